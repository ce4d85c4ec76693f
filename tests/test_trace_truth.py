"""Trace tools tell the truth (issue 25, item 3): a canceled task reads `canceled`, never
`failed`; ids are told apart; `diff` compares a session still running (marked open); token
counts say whose they are; the HTML timeline has a time axis; a missing workdir says where
sessions live. The canceled and open sessions come from a real daemon (examples/supervised)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from a2akit import Served
from conftest import ROOT
from murmurd.traceview.html import tick_step
from murmurd.traceview.labels import distinct_labels
from supervisedkit import serving_supervised
from tracekit import TRACES, murmurd

DEADLINE = 120.0


def _session_of(served: Served, task_id: str) -> str:
    """The session directory whose trace started `task_id` (one session per context)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for trace in sorted((served.capsule / "workdir").glob("ses_*/trace.jsonl")):
            for line in trace.read_text().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if event.get("event_type") == "task_start" and event.get("task_id") == task_id:
                    return trace.parent.name
        time.sleep(0.1)
    raise AssertionError(f"no session traced task {task_id}")


def _wait_line(served: Served, session: str, needle: str) -> None:
    trace = served.capsule / "workdir" / session / "trace.jsonl"
    deadline = time.monotonic() + DEADLINE
    while needle not in trace.read_text().replace(" ", ""):
        assert time.monotonic() < deadline, f"{trace} never wrote {needle}"
        time.sleep(0.1)


def test_canceled_open_and_distinct_sessions_from_a_real_daemon(tmp_path: Path, capsys) -> None:
    with serving_supervised(tmp_path) as served:
        workdir = str(served.capsule / "workdir")
        done = served.send("hello there")
        served.wait_state(done["id"], "completed", timeout=DEADLINE)
        waiting = served.send("deploy the release")
        served.wait_state(waiting["id"], "input-required", timeout=DEADLINE)
        finished, running = _session_of(served, done["id"]), _session_of(served, waiting["id"])
        _wait_line(served, finished, '"event_type":"session_end"')

        code, out, err = murmurd(capsys, "trace", "diff", finished, running, "--workdir", workdir)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[1].startswith(f"Run B: {running}") and lines[1].endswith("[open: still running]")
        assert "[open" not in lines[0]
        assert any(re.match(r"exit status\s+ok\s+open", line) for line in lines)
        code, out, _ = murmurd(capsys, "trace", "diff", finished, running, "--workdir", workdir, "--json")
        assert json.loads(out)["b"]["open"] is True and json.loads(out)["a"]["open"] is False

        served.rpc("tasks/cancel", {"id": waiting["id"]})
        served.wait_state(waiting["id"], "canceled", timeout=DEADLINE)
        _wait_line(served, running, '"event_type":"task_end"')

        code, out, err = murmurd(capsys, "trace", "show", running, "--workdir", workdir)
        assert code == 0, err
        assert re.search(r"^  status:\s+canceled$", out, re.M), out
        code, out, _ = murmurd(capsys, "trace", "show", running, "--workdir", workdir, "--json")
        assert json.loads(out)["exit_status"] == "canceled"
        assert json.loads(out)["tasks"][0]["exit_status"] == "canceled"

        code, out, err = murmurd(capsys, "trace", "report", finished, running, "--workdir", workdir)
        assert code == 0, err
        heads = [line for line in out.splitlines() if line.startswith("Session ")]
        labels = [line.split()[1] for line in heads]
        assert len(set(labels)) == 2  # told apart, though both ids begin alike
        assert re.search(r"^  canceled\s+1\s+\(50%\)$", out, re.M), out
        assert "failed" not in out.split("Exit status:")[1]


def test_labels_keep_the_shared_prefix_and_add_a_distinguishing_tail() -> None:
    ids = ["ses_01a233b362db7356a8c61962aadf42b4", "ses_01a233b362db7356a8c61962aadf42c4"]
    labels = distinct_labels(ids)
    assert labels[ids[0]] == "ses_01a233b3…df42b4" and labels[ids[1]] == "ses_01a233b3…df42c4"
    same_tail = ["ses_01a233b3000000aaaaaa", "ses_01a233b3111111aaaaaa"]
    assert set(distinct_labels(same_tail).values()) == {"ses_01a233b3…0aaaaaa", "ses_01a233b3…1aaaaaa"}
    assert distinct_labels(["ses_01a233b3aaaaaa111111"]) == {"ses_01a233b3aaaaaa111111": "ses_01a233b3…111111"}


def test_show_says_which_token_counts_are_estimates_and_what_the_provider_reported(capsys, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = (TRACES / "upstream-idle.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    for event in events:
        if event["event_type"] == "inference":
            event["usage"] = {"input_tokens": 50, "output_tokens": 40}
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    code, out, _ = murmurd(capsys, "trace", "show", str(trace))
    assert code == 0
    tokens = out.split("── Tokens ──")[1].split("── Tool calls ──")[0]
    assert "the runtime's own estimate" in tokens
    assert "provider reported: 50 in, 40 out (1 of 1 turns)" in tokens
    code, out, _ = murmurd(capsys, "trace", "show", "--json", str(trace))
    assert json.loads(out)["reported_tokens"] == {"input_tokens": 50, "output_tokens": 40, "turns": 1}


def test_the_html_timeline_has_a_time_axis(capsys, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    code, _, err = murmurd(capsys, "trace", "show", str(TRACES / "upstream-reopen.jsonl"), "--html", str(page))
    assert code == 0, err
    html = page.read_text()
    axis = re.search(r'<div class="axis" data-step-ms="(\d+)">(.*?)</div></div><div class="tokens">', html)
    assert axis is not None
    ticks = re.findall(r'<span>\+([^<]+)</span>', axis.group(2))
    assert ticks[0] == "0ms" and 2 <= len(ticks) <= 9
    assert tick_step(2200) == 500 and tick_step(7) == 1 and tick_step(45_000) == 10_000


def test_a_missing_workdir_says_where_sessions_live(capsys, tmp_path: Path) -> None:
    code, _, err = murmurd(capsys, "trace", "show", "--workdir", str(tmp_path / "workdir"))
    assert code == 1
    assert err.startswith("error[E-IO-001]: workdir ")
    assert "pass --workdir <capsule-dir>/workdir" in err
