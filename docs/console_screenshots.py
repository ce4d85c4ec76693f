"""Regenerate docs/console-finished.png and docs/console-input-required.png.

    PYTHONPATH=. .venv/bin/python docs/console_screenshots.py

Serves the browser tests' scripted capsule (tests/browserkit.py; offline, no API key), opens
`/console` in Debian's headless Chromium, and photographs a finished task and one waiting for
its supervisor (the finished one with its trace events unfolded).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "tests"))

from a2akit import serving  # noqa: E402
from browserkit import chromium, scripted_capsule, send_from_console, wait_task_state  # noqa: E402

WAIT_MS = 30_000






def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with serving(scripted_capsule(root), root / "state") as served, chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.goto(served.url + "console/")
            page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                                   timeout=WAIT_MS)
            served.send("say hello")
            send_from_console(page, "ask me whether to go on")
            wait_task_state(page, "input-required")
            page.fill("#reply-text", "go on")
            page.click("#reply-send")
            wait_task_state(page, "completed")
            page.wait_for_selector("#trace-box:not([hidden])", timeout=WAIT_MS)
            page.click("#trace-box summary")  # the operator's trace events, unfolded
            page.screenshot(path=str(DOCS / "console-finished.png"), full_page=True)
            page.click("#trace-box summary")
            send_from_console(page, "ask me before you deploy")
            wait_task_state(page, "input-required")
            page.fill("#reply-text", "yes, deploy to staging only")
            page.screenshot(path=str(DOCS / "console-input-required.png"))
    print("wrote docs/console-finished.png and docs/console-input-required.png")


if __name__ == "__main__":
    main()
