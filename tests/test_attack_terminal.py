"""A peer's text never reaches the operator's terminal raw (attack on issue 25's `murmurd tasks`):
a peer credential sends a task whose text holds terminal controls (OSC 52 writes the clipboard,
CSI 2J clears the screen, OSC 0 retitles the window); the operator lists and shows tasks on a
real `murmurd serve`, and every control character arrives escaped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from a2akit import serving
from tenancykit import OPS, PEER_A, credentials, send, tenant_capsule, wait_state

HOSTILE = "hi \x1b]52;c;cGF5bG9hZA==\x07 \x1b[2J \x1b]0;pwned\x07 \x9b31m \u202eevil"


def _tasks(url: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "murmurd", "tasks", url, *args], capture_output=True, text=True,
                          env={**os.environ, "MURMUR_TOKEN": OPS}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _inert(text: str) -> None:
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in text, (raw, text)


def test_a_peers_terminal_controls_reach_the_operators_task_views_escaped(tmp_path: Path) -> None:
    with serving(tenant_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path))) as served:
        done = send(served.url, HOSTILE, PEER_A)["result"]
        asking = send(served.url, "mode:ask " + HOSTILE, PEER_A, blocking=False)["result"]
        wait_state(served.url, asking["id"], "input-required")
        listing = _tasks(served.url)
        assert done["id"] in listing and asking["id"] in listing
        _inert(listing)
        assert "\\x1b]52;c;" in listing  # shown, as an escape
        for task_id in (done["id"], asking["id"]):
            detail = _tasks(served.url, task_id)
            assert task_id in detail
            _inert(detail)


def test_send_prints_a_capsules_answer_with_its_controls_escaped(tmp_path: Path) -> None:
    with serving(tenant_capsule(tmp_path), tmp_path / "state") as served:
        done = subprocess.run([sys.executable, "-m", "murmurd", "send", served.url, HOSTILE], capture_output=True,
                              text=True, env={k: v for k, v in os.environ.items() if k != "MURMUR_TOKEN"}, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "answer: hi \\x1b]52;c;" in done.stdout
        _inert(done.stdout)


def test_chat_shows_a_capsules_answer_with_its_controls_escaped(tmp_path: Path) -> None:
    import pexpect

    with serving(tenant_capsule(tmp_path), tmp_path / "state") as served:
        env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "xdg"), "TERM": "dumb"}
        env.pop("MURMUR_TOKEN", None)
        child = pexpect.spawn(sys.executable, ["-m", "murmurd", "chat", served.url], env=env, encoding="utf-8",
                              timeout=120, dimensions=(40, 200))
        try:
            child.expect_exact("you> ")
            child.send("hi \x16\x1b]0;pwned\x16\x07 done\r")  # C-v: readline inserts the next key as it is
            child.expect_exact("answer: hi \\x1b]0;pwned\\x07 done")
            child.expect_exact("you> ")
            answer = child.before
            assert "\x1b]0;pwned\x07 done" not in answer.split("answer: ", 1)[-1], answer
        finally:
            child.terminate(force=True)
