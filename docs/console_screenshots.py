"""Regenerate docs/console-finished.png and docs/console-input-required.png.

    PYTHONPATH=. .venv/bin/python docs/console_screenshots.py

Serves examples/supervised (offline, no API key; tests/supervisedkit.py copies it to a scratch
directory), opens `/console` in Debian's headless Chromium, and photographs a task waiting for
its supervisor (two waiting rows in the list with their questions, ages and senders; the
question in the transcript; the reply box focused) and a finished one with its trace unfolded.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "tests"))

from browserkit import chromium, wait_task_state  # noqa: E402
from supervisedkit import serving_supervised  # noqa: E402

WAIT_MS = 120_000


def _open(page, task_id: str) -> None:
    page.click(f"#task-list li[data-task-id='{task_id}'] button.task-open")
    page.wait_for_function("(id) => document.querySelector('#task-id').textContent === id", arg=task_id,
                           timeout=WAIT_MS)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with serving_supervised(root) as served, chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(served.url + "console/")
            page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                                   timeout=WAIT_MS)
            done = served.send("hello there")
            served.wait_state(done["id"], "completed", timeout=120)
            finished = served.send("deploy the release to production")
            served.wait_state(finished["id"], "input-required", timeout=120)
            waiting = [served.send(text) for text in ("deploy the release tonight", "deploy the hotfix release")]
            for task in waiting:
                served.wait_state(task["id"], "input-required", timeout=120)
            page.wait_for_selector(f"#task-list li[data-task-id='{waiting[-1]['id']}'] .task-question", timeout=WAIT_MS)

            _open(page, finished["id"])
            page.fill("#reply-text", "approve")
            page.click("#reply-send")
            wait_task_state(page, "completed", WAIT_MS)
            page.wait_for_selector("#trace-box:not([hidden])", timeout=WAIT_MS)
            page.click("#trace-box summary")  # the operator's trace events, unfolded
            page.screenshot(path=str(DOCS / "console-finished.png"), full_page=True)

            _open(page, waiting[0]["id"])
            wait_task_state(page, "input-required", WAIT_MS)
            page.wait_for_selector("#task-messages li.question", timeout=WAIT_MS)
            page.focus("#reply-text")
            page.keyboard.type("hold until the morning")
            page.screenshot(path=str(DOCS / "console-input-required.png"))
    print("wrote docs/console-finished.png and docs/console-input-required.png")


if __name__ == "__main__":
    main()
