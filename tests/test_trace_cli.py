"""`murmurd trace` on traces in upstream's exact line format, written by hand from the
observability fact sheet (§1-§3, §5): sections, delta rules, redundancy, every selector, every
error code and exit code (issue 16, item 2)."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from tracekit import TRACES, golden, murmurd, now_ms, place, v7_id

REOPEN = TRACES / "upstream-reopen.jsonl"
TWO_TASKS = TRACES / "upstream-two-tasks.jsonl"
IDLE = TRACES / "upstream-idle.jsonl"
REOPEN_ID = "ses_019ad1c2e4007c1d8e2f3a4b5c6d7e8f"
TWO_TASKS_ID = "ses_019ad1c2f8a07c1d9e2f3a4b5c6d7e90"
IDLE_ID = "ses_019ad1c30b407c1dae2f3a4b5c6d7e91"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workdir holding the three hand-written sessions under their own ids."""
    root = tmp_path / "workdir"
    for session_id, trace in ((REOPEN_ID, REOPEN), (TWO_TASKS_ID, TWO_TASKS), (IDLE_ID, IDLE)):
        place(root, session_id, trace)
    return root


# -- sections, goldens --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["upstream-reopen", "upstream-two-tasks", "upstream-idle"])
def test_show_renders_upstreams_sections(capsys, name: str) -> None:
    code, out, err = murmurd(capsys, "trace", "show", str(TRACES / f"{name}.jsonl"))
    assert (code, err) == (0, "")
    golden(f"trace/{name}.show.txt", out)


@pytest.mark.parametrize("name", ["upstream-reopen", "upstream-two-tasks"])
def test_steps_one_row_per_inference_and_verbose_adds_the_first_input_string(capsys, name: str) -> None:
    code, out, _ = murmurd(capsys, "trace", "steps", str(TRACES / f"{name}.jsonl"))
    assert code == 0
    golden(f"trace/{name}.steps.txt", out)
    code, out, _ = murmurd(capsys, "trace", "steps", "--verbose", str(TRACES / f"{name}.jsonl"))
    assert code == 0
    golden(f"trace/{name}.steps-verbose.txt", out)


def test_metrics_come_from_the_last_session_start_and_the_last_session_end(capsys) -> None:
    code, out, _ = murmurd(capsys, "trace", "show", "--json", str(REOPEN))
    assert code == 0
    shown = json.loads(out)
    assert shown["max_turns"] == 2  # the second attempt's budget (8 minus the 6 turns the first used)
    assert (shown["turns"], shown["input_tokens"], shown["output_tokens"]) == (9, 19300, 620)  # cumulative
    assert shown["duration_ms"] == 2156 and shown["exit_status"] == "ok"
    assert shown["compaction"] == {"turn": 5, "tokens_before": 9000, "tokens_after": 2100}
    assert [s["turn"] for s in shown["steps"]] == [0, 1, 2, 3, 4, 5, 0, 1, 2]  # zero-based per attempt
    assert [s["attempt"] for s in shown["steps"]] == [0] * 6 + [1] * 3
    # skills are shown apart and never counted as tool calls
    assert shown["tool_calls"]["count"] == 7 and shown["skill_calls"]["count"] == 1
    assert shown["reopens"] == [{"number": 1, "hook_name": "gatekeeper",
                                 "reason": "The result has no line reading VERIFIED; run the tests again and say so."}]


def test_redundancy_follows_the_fact_sheets_rules(capsys) -> None:
    code, out, _ = murmurd(capsys, "trace", "show", "--json", str(REOPEN))
    assert code == 0
    redundant = [(r["turn"], r["tool_name"], r["resource"], r["prior_turn"]) for r in json.loads(out)["redundant_calls"]]
    # path identity: src/app.py read at 0, read again at 1 (flagged); the edit (FILE_PATH, compared
    # case-insensitively) forgets it, so the read after the reopen is not flagged. resource_id
    # identity: sym:Foo::bar read at 3 and again after the reopen (one map for the whole file).
    assert redundant == [(1, "read_file", "src/app.py", 0), (1, "search", "sym:Foo::bar", 3)]
    code, out, _ = murmurd(capsys, "trace", "show", "--json", str(TWO_TASKS))
    # notes.md read in task 1 and again in task 2 (not reset per task); the third read declares
    # no effect, so it is treated as a mutate and never flagged
    assert [(r["turn"], r["resource"], r["prior_turn"]) for r in json.loads(out)["redundant_calls"]] == [(0, "notes.md", 0)]


def test_redundancy_ignores_calls_without_identity_and_never_reads_status(tmp_path: Path, capsys) -> None:
    head = [json.loads(line) for line in IDLE.read_text().splitlines()]
    def call(turn: int, effect: str | None, **extra: object) -> dict:
        event = {"event_type": "tool_call", "session_id": IDLE_ID, "timestamp": 1, "turn": turn, "tool_name": "t",
                 "input": {}, "duration_ms": 1, "status": "error", **extra}
        return event | ({"state_effect": effect} if effect else {})
    lines = [head[0],
             call(0, "read", input={"query": "x"}),  # no identity: ignored
             call(1, "read", input={"query": "x"}),
             call(2, "read", input={"Path": 7, "file": "a.txt"}),  # a non-string path is skipped: `file` wins
             call(3, "read", input={"file": "a.txt"}),  # flagged, though status is error
             call(4, "read", resource_id="", input={"file": "a.txt"}),  # empty resource_id: the path is used
             call(5, "read", resource_id="file:a.txt", input={"file": "a.txt"}),  # another identity
             call(6, "delete", input={"file": "a.txt"}),  # any other effect forgets
             call(7, "read", input={"file": "a.txt"}),
             head[-1]]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, _ = murmurd(capsys, "trace", "show", "--json", str(path))
    assert code == 0
    assert [(r["turn"], r["resource"], r["prior_turn"]) for r in json.loads(out)["redundant_calls"]] == \
        [(3, "a.txt", 2), (4, "a.txt", 3)]


def test_unknown_events_and_keys_are_ignored(tmp_path: Path, capsys) -> None:
    lines = IDLE.read_text().splitlines()
    extra = json.loads(lines[1]) | {"usage": {"cache_read_input_tokens": 5}, "brand_new_key": [1, 2]}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([lines[0], '{"event_type":"from_the_future","x":{}}', json.dumps(extra), lines[2]]) + "\n")
    code, out, _ = murmurd(capsys, "trace", "show", str(path))
    assert code == 0 and "count: 1  (max: 10)" in out


# -- diff and report ----------------------------------------------------------------------------


def test_diff_rows_and_delta_rules(workdir: Path, capsys) -> None:
    code, out, _ = murmurd(capsys, "trace", "diff", "--workdir", str(workdir), "e8f", "e90")
    assert code == 0
    golden("trace/upstream.diff.txt", out.replace(str(workdir), "<workdir>"))
    code, out, _ = murmurd(capsys, "trace", "diff", "--json", "--workdir", str(workdir), "e8f", "e90")
    rows = {r["metric"]: r for r in json.loads(out)["rows"]}
    assert [*rows] == ["turns", "duration", "input tokens", "output tokens", "input/turn (avg)", "output/turn (avg)",
                       "tool calls", "tool success rate", "avg tool latency", "skill calls", "shell calls",
                       "avg shell latency", "compaction", "exit status"]
    assert rows["turns"]["delta"] == "-4 (B better)"  # 9 -> 5: lower is better
    assert rows["tool success rate"]["better"] == "B"  # 85.7% -> 100%: higher is better
    assert rows["avg shell latency"]["delta"] == "—"  # B has no shell calls: not comparable
    assert rows["compaction"]["delta"] == "—" and rows["exit status"]["delta"] == "—"
    code, out, _ = murmurd(capsys, "trace", "diff", "--json", "--workdir", str(workdir), "e8f", REOPEN_ID)
    assert {r["delta"] for r in json.loads(out)["rows"]} == {"="}  # a session against itself


def test_diff_within_a_float_epsilon_is_equal() -> None:
    from murmurd.traceview.compare import delta

    assert delta(10.0, 10.04, str, False) == ("=", None)
    assert delta(10.0, 10.1, lambda v: f"{v:.1f}", False) == ("+0.1 (A better)", "A")
    assert delta(3, 3, str, False) == ("=", None)
    assert delta(None, 3, str, False) == ("—", None)


def test_report_over_every_session(workdir: Path, capsys) -> None:
    code, out, err = murmurd(capsys, "trace", "report", "--workdir", str(workdir))
    assert (code, err) == (0, "")
    golden("trace/upstream.report.txt", out.replace(str(workdir), "<workdir>"))
    code, out, _ = murmurd(capsys, "trace", "report", "--json", "--workdir", str(workdir))
    report = json.loads(out)
    stats = {s["metric"]: s for s in report["stats"]}
    assert stats["turns"]["mean"] == 5.0 and stats["turns"]["min"] == 1 and stats["turns"]["max"] == 9
    assert round(stats["turns"]["stddev"], 4) == 3.2660  # population stddev of 9, 5, 1
    assert stats["tool success (%)"]["n"] == 2  # the session without tool calls is left out
    assert stats["redundant calls"]["max"] == 2
    assert stats["skill calls"]["max"] == 1 and report["sessions"][0]["skill_calls"] == 1  # apart from tool calls
    assert {e["status"]: e["count"] for e in report["exit_status"]} == {"ok": 1, "max_turns_reached": 1, "failed": 1}
    assert report["per_task"] is not None  # the queue session ran two tasks


def test_report_last_and_since_pick_sessions_by_the_time_in_their_ids(tmp_path: Path, capsys) -> None:
    root = tmp_path / "workdir"
    now = now_ms()
    ids = [v7_id(now - age) for age in (3 * 86_400_000, 5 * 3_600_000, 20 * 60_000, 60_000)]
    for session_id in ids:
        place(root, session_id, IDLE.read_text().replace(IDLE_ID, session_id))
    def picked(*flags: str) -> list[str]:
        code, out, _ = murmurd(capsys, "trace", "report", "--json", "--workdir", str(root), *flags)
        assert code == 0
        return [s["session_id"] for s in json.loads(out)["sessions"]]
    assert picked() == ids
    assert picked("--since", "30m") == ids[2:]
    assert picked("--since", "6h") == ids[1:]
    assert picked("--since", "4d") == ids
    assert picked("--last", "1") == ids[3:]
    assert picked("--last", "3", "--since", "6h") == ids[1:]
    assert picked("--last", "9") == ids
    code, _, err = murmurd(capsys, "trace", "report", "--workdir", str(root), "--since", "1m")
    assert code == 1 and "E-TRC-001" in err  # the newest is 60 s old: nothing left to report


def test_report_skips_incomplete_sessions_with_a_note(workdir: Path, capsys) -> None:
    place(workdir, v7_id(now_ms()), "")  # the loop died before session_start: an empty trace
    place(workdir, v7_id(now_ms() + 1), None)  # no trace at all
    code, out, err = murmurd(capsys, "trace", "report", "--workdir", str(workdir))
    assert code == 0 and "Sessions: 3" in out
    assert err == "note: skipped 2 incomplete session(s)\n"


# -- selectors ----------------------------------------------------------------------------------


def _session_of(capsys, *args: str) -> str:
    code, out, err = murmurd(capsys, "trace", "show", "--json", *args)
    assert code == 0, err
    return json.loads(out)["session_id"]


def test_every_selector(workdir: Path, capsys) -> None:
    where = ("--workdir", str(workdir))
    assert _session_of(capsys, *where) == IDLE_ID  # latest: the largest id
    assert _session_of(capsys, *where, REOPEN_ID) == REOPEN_ID  # a full id
    assert _session_of(capsys, *where, "6D7E90") == TWO_TASKS_ID  # a suffix, case-insensitive
    assert _session_of(capsys, str(workdir / REOPEN_ID / "trace.jsonl")) == REOPEN_ID  # a path
    assert _session_of(capsys, str(workdir / TWO_TASKS_ID)) == TWO_TASKS_ID  # a session directory's path
    copy = workdir.parent / "saved.jsonl"
    shutil.copyfile(REOPEN, copy)
    os.chdir(workdir.parent)
    assert _session_of(capsys, "saved.jsonl") == REOPEN_ID  # a bare name ending .jsonl is a path
    assert _session_of(capsys) == IDLE_ID  # --workdir defaults to ./workdir
    code, out, _ = murmurd(capsys, "trace", "diff", "--json", *where, "@3", "@1")
    assert code == 0
    assert (json.loads(out)["a"]["session_id"], json.loads(out)["b"]["session_id"]) == (REOPEN_ID, IDLE_ID)
    code, out, _ = murmurd(capsys, "trace", "diff", "--json", *where)  # no args: @2 @1
    assert (json.loads(out)["a"]["session_id"], json.loads(out)["b"]["session_id"]) == (TWO_TASKS_ID, IDLE_ID)


def test_sessions_of_murmurd_run_workdir_are_found_under_dot_murmur(tmp_path: Path, capsys) -> None:
    place(tmp_path / "project" / ".murmur", REOPEN_ID, REOPEN)
    assert _session_of(capsys, "--workdir", str(tmp_path / "project")) == REOPEN_ID


def test_a_legacy_random_id_still_loads_and_never_poses_as_the_latest(tmp_path: Path, capsys) -> None:
    """Sessions from before UUIDv7 ids (random hex) load by id and suffix, and sort by their
    directory's time: a random `ses_f...` is not the latest just because it sorts last."""
    root = tmp_path / "workdir"
    fresh = v7_id(now_ms())
    tail = next(t for t in ("01", "02") if not fresh.endswith(t))  # the fresh id's random end never shares it
    legacy = "ses_f3b2" + "0" * 26 + tail
    old = place(root, legacy, IDLE.read_text().replace(IDLE_ID, legacy))
    os.utime(old, (1_000_000, 1_000_000))  # 1970: older than any UUIDv7 session
    place(root, fresh, IDLE.read_text().replace(IDLE_ID, fresh))
    assert _session_of(capsys, "--workdir", str(root)) == fresh
    assert _session_of(capsys, "--workdir", str(root), legacy) == legacy
    assert _session_of(capsys, "--workdir", str(root), tail) == legacy
    code, out, _ = murmurd(capsys, "trace", "report", "--json", "--workdir", str(root), "--since", "1h")
    assert [s["session_id"] for s in json.loads(out)["sessions"]] == [fresh]


# -- error codes and exit codes -----------------------------------------------------------------


def _error(capsys, *args: str) -> str:
    code, out, err = murmurd(capsys, *args)
    assert code == 1 and out == "", (code, out, err)
    assert err.startswith("error[") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("args, code", [
    (["show", "nope"], "E-TRC-002"),  # no suffix match
    (["show", "7e9"], "E-TRC-002"),  # a suffix must end the id
    (["show", "ses_019ad1c2e4007c1d8e2f3a4b5c6d7e00"], "E-TRC-002"),  # a full id not there
    (["steps", "nope"], "E-TRC-002"),
    (["show", "@1"], "E-TRC-002"),  # @N is diff's only
    (["diff", "@1"], "E-TRC-002"),  # exactly one argument
    (["diff", "@1", "@2", "@3"], "E-TRC-002"),
    (["diff", "@0", "@1"], "E-TRC-002"),
    (["diff", "@4", "@1"], "E-TRC-002"),  # out of range
    (["diff", "@x", "@1"], "E-TRC-002"),
    (["diff", "@-1", "@1"], "E-TRC-002"),
    (["report", "e8f", "--last", "1"], "E-TRC-002"),
    (["report", "e8f", "--since", "1h"], "E-TRC-002"),
    (["report", "--since", "1w"], "E-TRC-002"),
    (["report", "--since", "h"], "E-TRC-002"),
    (["report", "--last", "0"], "E-TRC-002"),
    (["report", "nope"], "E-TRC-002"),
])
def test_selector_errors(workdir: Path, capsys, args: list[str], code: str) -> None:
    err = _error(capsys, "trace", args[0], "--workdir", str(workdir), *args[1:])
    assert err.startswith(f"error[{code}]: ")


def test_ambiguous_suffix_lists_the_candidates(workdir: Path, capsys) -> None:
    twin = IDLE_ID[:-4] + "0e91"
    place(workdir, twin, IDLE)
    err = _error(capsys, "trace", "show", "--workdir", str(workdir), "E91")
    assert err.startswith("error[E-TRC-002]: 2 sessions end with 'E91'") and twin in err and IDLE_ID in err
    err = _error(capsys, "trace", "report", "--workdir", str(workdir), "e91")
    assert err.startswith("error[E-TRC-002]: 2 sessions end with")


@pytest.mark.parametrize("command", ["show", "steps", "diff", "report"])
def test_a_missing_workdir_is_e_io_001(tmp_path: Path, capsys, command: str) -> None:
    err = _error(capsys, "trace", command, "--workdir", str(tmp_path / "absent"))
    assert err.startswith("error[E-IO-001]: ") and "absent" in err


def test_an_empty_workdir_has_no_latest_session(tmp_path: Path, capsys) -> None:
    assert _error(capsys, "trace", "show", "--workdir", str(tmp_path)).startswith("error[E-TRC-002]: ")


def test_a_missing_trace_path_is_e_io_001(tmp_path: Path, capsys) -> None:
    assert _error(capsys, "trace", "show", str(tmp_path / "gone.jsonl")).startswith("error[E-IO-001]: ")


def test_a_symlinked_trace_in_a_session_is_refused(tmp_path: Path, capsys) -> None:
    root = tmp_path / "workdir"
    session = place(root, REOPEN_ID, None)
    (session / "trace.jsonl").symlink_to(REOPEN)
    assert _error(capsys, "trace", "show", "--workdir", str(root)).startswith("error[E-IO-001]: ")


def _bad(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("mangle, where", [
    (lambda lines: lines[:1] + ["{not json"] + lines[1:], 2),
    (lambda lines: lines[:1] + ["[1, 2]"] + lines[1:], 2),
    (lambda lines: lines[:1] + ['{"no_event_type": 1}'] + lines[1:], 2),
    (lambda lines: lines[:2] + ["\udcff\udcfe"] + lines[2:], 3),  # not UTF-8
    (lambda lines: [lines[0].replace('"model":"claude-sonnet-4-5"', '"model":null')] + lines[1:], 1),
    (lambda lines: [lines[0].replace('"max_turns":10', '"max_turns":"10"')] + lines[1:], 1),
    (lambda lines: lines[:1] + ['{"event_type":"inference","turn":0}'] + lines[1:], 2),  # no decision
    (lambda lines: lines[:-1], 3),  # no session_end
    (lambda lines: lines[1:], 3),  # no session_start
    (lambda lines: [], 1),  # empty
])
def test_bad_traces_are_e_trc_001_with_path_and_line(tmp_path: Path, capsys, mangle, where: int) -> None:
    path = _bad(tmp_path, mangle(IDLE.read_text().splitlines()))
    for command in ("show", "steps"):
        err = _error(capsys, "trace", command, str(path))
        assert err.startswith(f"error[E-TRC-001]: {path}:{where}: "), err


def test_a_bad_trace_in_diff_is_e_trc_001(workdir: Path, capsys) -> None:
    (workdir / IDLE_ID / "trace.jsonl").write_text("{oops\n")
    assert _error(capsys, "trace", "diff", "--workdir", str(workdir)).startswith("error[E-TRC-001]: ")


# -- the terminal -------------------------------------------------------------------------------


def test_colour_only_on_a_terminal_and_hostile_strings_are_escaped(tmp_path: Path) -> None:
    lines = IDLE.read_text().splitlines()
    hostile = json.loads(lines[0]) | {"capsule_name": "evil\x1b[2J\x1b]0;pwned\x07"}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(hostile), *lines[1:]]) + "\n")
    command = [sys.executable, "-m", "murmurd", "trace", "show", str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    piped = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=True).stdout
    assert "\x1b" not in piped and "evil\\x1b[2J\\x1b]0;pwned\\x07" in piped
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, timeout=60, env=env, check=True)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        on_tty = b"".join(chunks).decode()
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert proc.returncode == 0
    assert "\x1b[1m── Session ──\x1b[0m" in on_tty  # coloured headings on a terminal
    assert "\x1b[2J" not in on_tty and "evil\\x1b[2J" in on_tty  # but never the trace's own escapes


def test_deeply_nested_json_is_refused_or_shown_never_a_crash(tmp_path: Path, capsys) -> None:
    lines = IDLE.read_text().splitlines()
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join([lines[0], "[" * 200_000 + "]" * 200_000, *lines[1:]]) + "\n")
    err = _error(capsys, "trace", "show", str(path))
    assert err.startswith(f"error[E-TRC-001]: {path}:2: ")
    deep: object = "innermost"
    for _ in range(900):
        deep = {"k": deep}
    call = {"event_type": "tool_call", "session_id": IDLE_ID, "timestamp": 1, "turn": 0, "tool_name": "t",
            "input": deep, "duration_ms": 1, "status": "ok"}
    path.write_text("\n".join([lines[0], lines[1], json.dumps(call), lines[2]]) + "\n")
    for args in (["show"], ["steps", "-v"], ["show", "--json"], ["show", "--html", str(tmp_path / "deep.html")]):
        code, out, err = murmurd(capsys, "trace", *args, str(path))
        assert code == 0, (args, err)
    assert '"innermost"' in murmurd(capsys, "trace", "steps", "-v", str(path))[1]
