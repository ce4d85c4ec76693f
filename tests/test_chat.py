"""`murmurd chat` driven through a real pseudo-terminal (pexpect) against a real daemon serving
examples/supervised (issue 25, item 2): the answer streams in, the tool call shows as it
happens, the task's question is answered at an inline prompt, Ctrl-C cancels the task and the
program goes on, the conversation is one threaded context, and lines land in readline history."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from a2akit import Served
from conftest import ROOT
from supervisedkit import APPROVED, CHECKED, HELD, QUESTION, serving_supervised

DEADLINE = 120  # seconds for one expectation on a loaded machine


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_supervised(tmp_path_factory.mktemp("chat")) as daemon:
        yield daemon


def _chat(served: Served, home: Path) -> pexpect.spawn:
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "TERM": "dumb"}
    env.pop("MURMUR_TOKEN", None)
    child = pexpect.spawn(sys.executable, ["-m", "murmurd", "chat", served.url], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=DEADLINE, dimensions=(40, 200))
    child.expect_exact("you> ")
    return child


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
        child.sendintr()  # Ctrl-C at the question: the task is canceled, chat goes on
        child.expect(r"\[canceled (tsk_[0-9a-f]+)\]")
        canceled_id = child.match.group(1)
        child.expect_exact("you> ")
        canceled = served.get(canceled_id)
        assert canceled["status"]["state"] == "canceled"
        assert canceled["contextId"] == context

        # Ctrl-C at an empty prompt cancels nothing and does not end the program
        child.sendintr()
        child.expect_exact("(Ctrl-D or /quit to leave)")
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


def test_ctrl_c_while_the_answer_streams_cancels_that_task(served: Served, tmp_path: Path) -> None:
    child = _chat(served, tmp_path)
    try:
        child.sendline("deploy the streamed release")
        child.expect_exact("Checking the release")  # the task is running: its words arrive
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
