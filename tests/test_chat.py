"""`murmurd chat` driven through a real pseudo-terminal (pexpect) against a real daemon serving
examples/supervised (issue 25, item 2): the answer streams in, the tool call shows as it
happens, the task's question is answered at an inline prompt, Ctrl-C cancels the task and the
program goes on, the conversation is one threaded context, and lines land in readline history."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from a2akit import Served, napping_capsule, start
from conftest import ROOT
from supervisedkit import APPROVED, CHECKED, HELD, QUESTION, START_SECONDS, serving_supervised

DEADLINE = 120  # seconds for one expectation on a loaded machine


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_supervised(tmp_path_factory.mktemp("chat")) as daemon:
        yield daemon


def _chat(served: Served, home: Path, *, sigint: signal.Handlers = signal.SIG_DFL) -> pexpect.spawn:
    """Chat in a pseudo-terminal, started with SIGINT at `sigint` whatever this runner's is
    (a runner started as a background job ignores SIGINT, and a child inherits that)."""
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "TERM": "dumb"}
    env.pop("MURMUR_TOKEN", None)
    child = pexpect.spawn(sys.executable, ["-m", "murmurd", "chat", served.url], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=DEADLINE, dimensions=(40, 200),
                          preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    child.expect_exact("you> ")
    return child


def _ctrl_c_at_prompt(child: pexpect.spawn, shown: str) -> None:
    """Ctrl-C at a prompt, once more if `shown` (a regex) does not show. Python's `input` (GNU
    readline) prints its prompt and then waits in a `select` that only a signal arriving during
    the wait ends: a Ctrl-C sent the instant the prompt shows can land on a loaded machine before
    the wait begins, and is noticed only with the next key. A person presses again; so does this.
    A Ctrl-C that is never acted on still fails (`DEADLINE`)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        child.sendintr()
        try:
            child.expect(shown, timeout=15)
            return
        except pexpect.TIMEOUT:
            if time.monotonic() > deadline:
                raise


def _status(pid: int, thread: str | None = None) -> dict[str, str]:
    path = Path(f"/proc/{pid}/task/{thread}/status" if thread else f"/proc/{pid}/status")
    return dict(line.split(":\t", 1) for line in path.read_text().splitlines() if ":\t" in line)


def _threads_taking_ctrl_c(pid: int) -> list[str]:
    """The threads of `pid` that do not block SIGINT: the kernel hands a Ctrl-C to any of them,
    and one handed to another thread does not wake the main thread's wait at a prompt."""
    taking = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = _status(pid, task.name)
        if not int(status["SigBlk"], 16) & (1 << (signal.SIGINT - 1)):
            taking.append("MainThread" if task.name == str(pid) else status["Name"].strip())
    return taking


def _tasks(served: Served) -> list[dict]:
    return served.rpc("ListTasks", {"pageSize": 100})["result"].get("tasks", [])


def test_chat_streams_shows_tools_asks_inline_and_ctrl_c_cancels(served: Served, tmp_path: Path) -> None:
    child = _chat(served, tmp_path)
    try:
        child.sendline("deploy the release")
        child.expect_exact("Checking the release before anything else.")  # streamed text
        child.expect_exact(f"⚙ echo: {CHECKED}")  # the tool call, shown when it ran
        child.expect_exact(f"? {QUESTION}")
        child.expect_exact("reply> ")
        assert _threads_taking_ctrl_c(child.pid) == ["MainThread"]  # the stream's thread is running now
        child.sendline("approve")
        child.expect_exact(APPROVED)
        child.expect_exact("you> ")
        [first] = [t for t in _tasks(served) if t["status"]["state"] == "TASK_STATE_COMPLETED"
                   and "deploy the release" in str(t.get("history"))]
        context = first["contextId"]

        # the same conversation: the next message is in the same context
        child.sendline("deploy once more")
        child.expect_exact(f"? {QUESTION}")
        child.expect_exact("reply> ")
        _ctrl_c_at_prompt(child, r"\[canceled (tsk_[0-9a-f]+)\]")  # at the question: the task is canceled, chat goes on
        canceled_id = child.match.group(1)
        child.expect_exact("you> ")
        canceled = served.get(canceled_id)
        assert canceled["status"]["state"] == "canceled"
        assert canceled["contextId"] == context

        # Ctrl-C at an empty prompt cancels nothing and does not end the program
        _ctrl_c_at_prompt(child, re.escape("(Ctrl-D or /quit to leave)"))
        child.expect_exact("you> ")
        child.sendline("deploy a third time")
        child.expect_exact("reply> ")
        child.sendline("hold")
        child.expect_exact(HELD)
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    history = (tmp_path / "state" / "murmurd" / "chat_history").read_text()
    assert "deploy the release" in history and "approve" in history and "deploy a third time" in history


def test_ctrl_c_at_the_prompt_works_when_chat_was_started_with_sigint_ignored(served: Served, tmp_path: Path) -> None:
    """`murmurd chat ... &` from a script, `nohup`, a test runner started in the background:
    SIGINT comes in ignored. The prompt still takes Ctrl-C (before, it was ignored there)."""
    child = _chat(served, tmp_path, sigint=signal.SIG_IGN)
    try:
        assert int(_status(child.pid)["SigIgn"], 16) & (1 << (signal.SIGINT - 1)) == 0
        _ctrl_c_at_prompt(child, re.escape("(Ctrl-D or /quit to leave)"))
        child.expect_exact("you> ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_ctrl_c_while_the_task_runs_cancels_it_and_chat_goes_on(tmp_path: Path) -> None:
    served = start(napping_capsule(tmp_path), tmp_path / "state", timeout=START_SECONDS)
    try:
        child = _chat(served, tmp_path)
        try:
            child.sendline("take a nap")
            child.expect_exact("Taking a long nap now.")  # streamed; the shell's sleep 600 runs next
            child.sendintr()
            child.expect(r"\[canceled (tsk_[0-9a-f]+)\]")
            task_id = child.match.group(1)
            child.expect_exact("you> ")
            assert served.get(task_id)["status"]["state"] == "canceled"
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
    finally:
        served.proc.kill()
        served.proc.wait(timeout=30)
