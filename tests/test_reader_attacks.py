"""Issue 21, items 7 and 10-13: the readers (`eval`, `trace`, `run`, `send`) attacked through
files and streams a component wrote, each through the real CLI as a subprocess."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT
from hookkit import end_turn, tool_call
from loopkit import capsule_dir, local
from tracekit import TRACES, place

# an OSC title, an OSC 52 clipboard write, a screen clear, an 8-bit CSI, a bidi override, a bell
HOSTILE = "\x1b]0;pwned\x07|\x1b]52;c;ZXZpbA==\x07|\x1b[2J|\x9b31m|\u202edesrever|\x07"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _murmurd(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})


def _inert(text: str) -> None:
    found = [c for c in RAW if c in text]
    assert not found, f"raw control characters {found!r} reached the terminal: {text!r}"


def _writer_capsule(root: Path, name: str, path: str, content: str, answer: str = "done") -> Path:
    """A scripted capsule whose one tool call writes `content` to `path` in the session workdir."""
    return capsule_dir(root, {
        "name": name, "version": "0.1.0",
        "artifacts": [local("scripted-driver", "driver", EXAMPLES / "scripted-driver"),
                      local("write-file", "tool", EXAMPLES / "write-file",
                            capabilities={"filesystem": {"scope": "."}})],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted", "max_turns": 4,
                      "driver": {"artifact": "scripted-driver", "config": {"responses": [
                          tool_call("c1", "write-file", {"path": path, "content": content}), end_turn(answer)]}}},
    })


def _dataset(root: Path, *case_ids: str) -> Path:
    dataset = root / "cases.jsonl"
    dataset.write_text("".join(json.dumps({"case_id": c, "task": "go"}) + "\n" for c in case_ids))
    return dataset


# -- item 7: one escaping helper for every reader ------------------------------------------------


def test_eval_run_prints_a_tool_written_verdict_inert(tmp_path: Path) -> None:
    record = {"record_type": "dataset_run", "overall": HOSTILE, "scores": {HOSTILE: 1}}
    capsule = _writer_capsule(tmp_path, "hostile-eval", "eval.jsonl", json.dumps(record) + "\n")
    proc = _murmurd("eval", "run", str(capsule), "--dataset", str(_dataset(tmp_path, "one")), "--no-env-file",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _inert(proc.stdout)
    result = next(line for line in proc.stdout.splitlines() if line.startswith("    result: "))
    assert result.startswith("    result: \\x1b]0;pwned\\x07|\\x1b]52;c;ZXZpbA==\\x07|\\x1b[2J|\\x9b31m|\\u202e")
    summary = proc.stdout.split("── Summary ──", 1)[1]
    assert "\\x1b]0;pwned" in summary and "=1" in summary
    session = result.split("session: ")[1]
    shown = _murmurd("eval", "show", session, cwd=capsule)  # the same file through `eval show`
    assert shown.returncode == 0, shown.stderr
    _inert(shown.stdout)
    assert "\\x9b31m" in shown.stdout


def _on_a_terminal(args: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """`murmurd ARGS` with stdout and stderr on a pseudo-terminal: (exit code, what it printed)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "murmurd", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})
    os.close(follower)
    out = bytearray()
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            assert ready, "murmurd printed nothing for the whole timeout"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        code = proc.wait(timeout=60)
    return code, out.decode("utf-8", "replace")


def test_run_streams_a_hostile_answer_inert_on_a_terminal_and_exact_into_a_pipe(tmp_path: Path) -> None:
    capsule = _writer_capsule(tmp_path, "hostile-answer", "out/note.txt", "x", answer=f"line one\n{HOSTILE}\n")
    code, printed = _on_a_terminal(["run", str(capsule), "--task", "go", "--no-env-file"], cwd=capsule)
    assert code == 0, printed
    _inert(printed)
    assert "line one" in printed and "\\x1b]52;c;ZXZpbA==\\x07" in printed and "\\u202edesrever" in printed
    piped = _murmurd("run", str(capsule), "--task", "go", "--no-env-file", cwd=capsule)
    assert piped.returncode == 0, piped.stderr
    assert HOSTILE in piped.stdout  # into a pipe the answer is the model's text, byte for byte


def test_send_and_watch_render_a_hostile_stream_inert(tmp_path: Path) -> None:
    import threading

    from a2akit import serving

    capsule = _writer_capsule(tmp_path, "hostile-stream", "out/note.txt", HOSTILE, answer=HOSTILE)
    with serving(capsule, tmp_path / "state") as served:
        watched: list[str] = []
        watcher = subprocess.Popen([sys.executable, "-m", "murmurd", "watch", served.url], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
        reader = threading.Thread(target=lambda: watched.extend(iter(watcher.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            sent = _murmurd("send", served.url, "--stream", "go", cwd=tmp_path, timeout=120)
            assert sent.returncode == 0, sent.stderr
            _inert(sent.stdout)
            assert "\\x1b]0;pwned\\x07" in sent.stdout and "[write-file]" in sent.stdout
            for _ in range(600):  # the watcher sees the same task end (it joined before the send)
                if any("completed" in line for line in watched):
                    break
                reader.join(0.1)
            assert any("completed" in line for line in watched), watched
        finally:
            watcher.kill()
            watcher.wait(timeout=30)
        _inert("".join(watched))
        assert any("\\x1b]0;pwned" in line for line in watched), watched


# -- item 10: a 400-digit score ------------------------------------------------------------------


def test_a_400_digit_score_neither_stops_eval_run_nor_eval_show(tmp_path: Path) -> None:
    huge = 10 ** 400
    record = {"record_type": "dataset_run", "overall": "pass", "scores": {"big": huge, "small": -huge, "ok": 0.5}}
    capsule = _writer_capsule(tmp_path, "huge-score", "eval.jsonl", json.dumps(record) + "\n")
    proc = _murmurd("eval", "run", str(capsule), "--dataset", str(_dataset(tmp_path, "first", "second")),
                    "--no-env-file", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("    result: pass")].__len__() == 2
    assert "pass: 2/2" in proc.stdout and "big=inf" in proc.stdout and "small=-inf" in proc.stdout
    for selector in [line.split("session: ")[1] for line in proc.stdout.splitlines() if "session: " in line]:
        shown = _murmurd("eval", "show", selector, cwd=capsule)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "big" in shown.stdout and "inf" in shown.stdout and "0.5000" in shown.stdout
        as_json = _murmurd("eval", "show", selector, "--json", cwd=capsule)
        assert json.loads(as_json.stdout)["dataset_run"]["scores"]["big"] == huge


# -- item 11: a 400-digit timestamp --------------------------------------------------------------


def _huge_trace(tmp_path: Path) -> Path:
    lines = []
    for number, line in enumerate((TRACES / "upstream-reopen.jsonl").read_text().splitlines()):
        event = json.loads(line)
        if number % 2:
            event["timestamp"] = 10 ** 400 + number
        if event.get("event_type") == "tool_call" and number % 3 == 0:
            event["duration_ms"] = 10 ** 400
        lines.append(json.dumps(event))
    workdir = tmp_path / "workdir"
    place(workdir, "ses_019ad1c2e4007c1d8e2f3a4b5c6d7e8f", "\n".join(lines) + "\n")
    return workdir


@pytest.mark.parametrize("command", [["show", "--html", "page.html"], ["show"], ["show", "--json"], ["steps"],
                                     ["steps", "--verbose"], ["report"]])
def test_a_400_digit_timestamp_never_crashes_a_trace_reader(tmp_path: Path, command: list[str]) -> None:
    workdir = _huge_trace(tmp_path)
    proc = _murmurd("trace", *command, "--workdir", str(workdir), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    if "--html" in command:
        page = (tmp_path / "page.html").read_text()
        assert "id='timeline'" in page and "∞" in page
    elif "--json" in command:
        json.loads(proc.stdout)
    else:
        assert proc.stdout.strip()


# -- item 12: `trace show --json` escapes C1 controls and bidi overrides --------------------------


def test_trace_show_json_writes_c1_and_bidi_escaped(tmp_path: Path) -> None:
    name = "read\x9b2J\u202efile\u2066\x85"
    lines = []
    for line in (TRACES / "upstream-reopen.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event_type") == "tool_call":
            event["tool_name"] = name
        if event.get("event_type") == "session_start":
            event["model"] = "m\u202e\x9b"
        lines.append(json.dumps(event, ensure_ascii=False))
    workdir = tmp_path / "workdir"
    place(workdir, "ses_019ad1c2e4007c1d8e2f3a4b5c6d7e8f", "\n".join(lines) + "\n")
    for command in (["show", "--json"], ["steps", "--json"], ["report", "--json"]):
        proc = _murmurd("trace", *command, "--workdir", str(workdir), cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        for raw in ("\x9b", "\u202e", "\u2066", "\x85"):
            assert raw not in proc.stdout, (command, raw)
    shown = json.loads(_murmurd("trace", "show", "--json", "--workdir", str(workdir), cwd=tmp_path).stdout)
    assert shown["model"] == "m\u202e\x9b"  # escaped, never altered: it decodes to the very same text
    assert {c["name"] for c in shown["tool_calls"]["calls"]} == {name}


# -- item 13: a dataset's task_path stays beneath the dataset's directory -------------------------


@pytest.mark.parametrize("task_path", ["../secret.md", "/etc/hostname", "{secret}", "tasks/../../secret.md",
                                       "tasks/link.md"])
def test_a_dataset_cannot_read_a_task_outside_its_directory(tmp_path: Path, task_path: str) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("THE-SECRET\n")
    capsule = _writer_capsule(tmp_path, "reader", "out/a.txt", "x")
    data = tmp_path / "data"
    (data / "tasks").mkdir(parents=True)
    (data / "tasks" / "link.md").symlink_to(secret)
    (data / "tasks" / "fine.md").write_text("fine\n")
    chosen = task_path.format(secret=secret)
    dataset = data / "cases.jsonl"
    dataset.write_text(json.dumps({"case_id": "fine", "task_path": "tasks/fine.md"}) + "\n"
                       + json.dumps({"case_id": "escape", "task_path": chosen}) + "\n")
    proc = _murmurd("eval", "run", str(capsule), "--dataset", str(dataset), "--no-env-file", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("error[E-EVAL-003]: ") and ":2: case 'escape': task_path" in proc.stderr, proc.stderr
    assert "beneath" in proc.stderr
    assert not (capsule / "workdir").exists()  # nothing ran, nothing read
