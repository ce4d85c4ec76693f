"""A running daemon's tasks from the terminal (issue 25, item 2): `murmurd send` prints the
answer, `murmurd tasks` lists and shows tasks, `reply` answers a waiting one, `cancel` cancels.
Real subprocesses against a real daemon serving examples/supervised."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2akit import Served
from conftest import ROOT
from supervisedkit import APPROVED, QUESTION, serving_supervised


def murmurd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_supervised(tmp_path_factory.mktemp("terminal")) as daemon:
        yield daemon


def test_send_prints_the_final_answer_by_default(served: Served) -> None:
    proc = murmurd("send", served.url, "hello there")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Ask me to deploy the release; I will check it and ask you before I do.\n"


def test_send_json_prints_the_accepted_task_at_once(served: Served) -> None:
    proc = murmurd("send", served.url, "hello as json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"].startswith("tsk_")


def test_send_of_a_question_prints_it_and_how_to_answer(served: Served) -> None:
    proc = murmurd("send", served.url, "deploy the release")
    assert proc.returncode == 0, proc.stderr
    task_id, asks = proc.stdout.split(" asks: ")
    assert task_id.startswith("tsk_") and asks.strip() == QUESTION
    assert f"answer it: murmurd reply {served.url} {task_id} TEXT" in proc.stderr
    served.wait_state(task_id, "input-required")


def _waiting_task(served: Served, text: str) -> str:
    task = served.send(text)
    served.wait_state(task["id"], "input-required", timeout=120)
    return task["id"]


def test_tasks_lists_state_age_context_sender_and_the_question(served: Served) -> None:
    waiting = _waiting_task(served, "deploy the list release")
    proc = murmurd("tasks", served.url)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["ID", "STATE", "AGE", "WAITING", "CONTEXT", "FROM", "FIRST", "WORDS"]
    [row_index] = [i for i, line in enumerate(rows) if line.startswith(waiting)]
    cells = rows[row_index].split()
    context = served.get(waiting)["contextId"]
    assert cells[1] == "input-required" and cells[4] == context and cells[5] == "operator"
    assert cells[2].endswith("s") and cells[3].endswith("s")  # ages like 3s or 1m05s
    assert rows[row_index].endswith("deploy the list release")
    assert rows[row_index + 1] == f"  asks: {QUESTION}"

    only = murmurd("tasks", served.url, "--state", "completed", "--json")
    states = {t["status"]["state"] for t in json.loads(only.stdout)}
    assert states <= {"TASK_STATE_COMPLETED"}


def test_one_task_shows_its_question_and_reply_answers_it(served: Served) -> None:
    waiting = _waiting_task(served, "deploy the shown release")
    shown = murmurd("tasks", served.url, waiting)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"task     {waiting}"
    assert lines[1].startswith("state    input-required (waiting ")
    assert f"asks     {QUESTION}" in lines
    assert "  user   deploy the shown release" in lines
    assert f"answer it: murmurd reply {served.url} {waiting} TEXT" in lines

    replied = murmurd("reply", served.url, waiting, "approve")
    assert replied.returncode == 0, replied.stderr
    served.wait_state(waiting, "completed", timeout=120)
    done = murmurd("tasks", served.url, waiting).stdout.splitlines()
    assert done[1] == "state    completed"
    assert done[done.index("answer") + 1] == f"  {APPROVED}"

    again = murmurd("reply", served.url, waiting, "approve")
    assert again.returncode == 1
    assert again.stderr == f"murmurd reply: task {waiting} is completed, not waiting for input; nothing was sent\n"


def test_cancel_cancels_a_waiting_task(served: Served) -> None:
    waiting = _waiting_task(served, "deploy the canceled release")
    proc = murmurd("cancel", served.url, waiting)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"canceled {waiting}\n"
    served.wait_state(waiting, "canceled")
    assert murmurd("tasks", served.url, waiting).stdout.splitlines()[1] == "state    canceled"


def test_unknown_task_is_a_clear_error(served: Served) -> None:
    proc = murmurd("tasks", served.url, "tsk_nope")
    assert proc.returncode == 1
    assert proc.stderr.startswith("murmurd tasks: ") and "JSON-RPC error" in proc.stderr
    assert proc.stderr.count("murmurd tasks:") == 1
