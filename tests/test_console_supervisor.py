"""A console a supervisor can work from (issue 25, item 4), in real Chromium against a real
daemon serving examples/supervised: a waiting task's row shows its question, how long it has
waited and who sent it; the transcript shows the question in place; cancel asks first; rows
and buttons work from the keyboard with a visible focus; axe-core (npm, tests/js) finds no
serious or critical violation; each artifact is listed once; a favicon; an empty state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2akit import Served
from browserkit import wait_task_state
from conftest import ROOT
from supervisedkit import APPROVED, QUESTION, serving_supervised

AXE = ROOT / "tests" / "js" / "node_modules" / "axe-core" / "axe.min.js"
TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving_supervised(tmp_path_factory.mktemp("console")) as daemon:
        yield daemon


def _open_console(browser: Any, served: Served) -> Any:
    # CSP forbids every script the page did not ship; the scan's script is the test's own
    context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    page.goto(served.url + "console/")
    page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'", timeout=TIMEOUT_MS)
    return page


def _axe(page: Any) -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: .ci/run installs it (npm ci --prefix tests/js)")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(content=AXE.read_text())
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["html"][:160] for n in v["nodes"]]}
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


def _tab_to(page: Any, selector: str, presses: int = 60) -> None:
    """Press Tab until the element matching `selector` has the focus (fails after `presses`)."""
    for _ in range(presses):
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def _focus_ring(page: Any) -> tuple[str, float]:
    return page.evaluate("() => { const s = getComputedStyle(document.activeElement);"
                         " return [s.outlineStyle, parseFloat(s.outlineWidth)]; }")


def _row_button(task_id: str) -> str:
    return f"#task-list li[data-task-id='{task_id}'] button.task-open"


def test_the_empty_console_says_what_to_do_and_has_a_favicon(browser, served: Served) -> None:
    page = _open_console(browser, served)
    assert page.is_visible("#empty-pane") and page.is_hidden("#task-pane")
    assert "Pick a task from the list" in page.text_content("#empty-pane")
    icon = page.get_attribute("link[rel=icon]", "href")
    answered = httpx.get(served.url + "console/" + icon, timeout=30)
    assert answered.status_code == 200 and answered.headers["content-type"].startswith("image/svg+xml")
    tools = set(page.locator("#card-tools li").all_text_contents())
    assert {"echo", "murmur-tool-request-input"} <= tools
    skills = set(page.locator("#card-skills li").all_text_contents())
    assert not tools & skills  # each artifact once
    assert _axe(page) == []
    assert page.errors == []


def test_a_supervisor_answers_and_cancels_from_the_keyboard(browser, served: Served) -> None:
    page = _open_console(browser, served)
    asked = served.send("deploy the release")  # someone else's task: it appears live
    served.wait_state(asked["id"], "input-required", timeout=120)
    row = f"#task-list li[data-task-id='{asked['id']}']"
    page.wait_for_selector(f"{row}[data-state='input-required'] .task-question", timeout=TIMEOUT_MS)
    page.wait_for_function("(s) => document.querySelector(s).textContent.includes('Deploy release')",
                           arg=f"{row} .task-question", timeout=TIMEOUT_MS)
    assert page.text_content(f"{row} .task-question") == f"asks: {QUESTION}"
    assert page.text_content(f"{row} .task-waited").startswith("waiting ")
    assert page.text_content(f"{row} .task-who") == "from operator"

    # Tab reaches the row; its focus is visible; Enter opens it
    _tab_to(page, _row_button(asked["id"]))
    style, width = _focus_ring(page)
    assert style != "none" and width >= 2
    page.keyboard.press("Enter")
    page.wait_for_function("(id) => document.querySelector('#task-id').textContent === id", arg=asked["id"],
                           timeout=TIMEOUT_MS)
    wait_task_state(page, "input-required", TIMEOUT_MS)
    page.wait_for_selector("#task-messages li.question", timeout=TIMEOUT_MS)
    assert page.text_content("#task-messages li.question .text") == QUESTION
    assert page.is_hidden("#empty-pane")
    assert _axe(page) == []

    # the reply, typed and sent from the keyboard; the question stays where it was asked
    _tab_to(page, "#reply-text")
    page.keyboard.type("approve")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "reply-send"
    assert _focus_ring(page)[0] != "none"
    page.keyboard.press("Enter")
    wait_task_state(page, "completed", TIMEOUT_MS)
    page.wait_for_function("(a) => document.querySelector('#task-messages').textContent.includes(a)",
                           arg=APPROVED, timeout=TIMEOUT_MS)
    transcript = page.locator("#task-messages li").all_text_contents()
    question_at = next(i for i, text in enumerate(transcript) if QUESTION in text)
    assert "approve" in transcript[question_at + 1] and transcript[0].endswith("deploy the release")

    # cancel asks first: Escape (or "Keep it running") keeps the task; confirming cancels it
    second = served.send("deploy once more")
    served.wait_state(second["id"], "input-required", timeout=120)
    page.wait_for_selector(_row_button(second["id"]), timeout=TIMEOUT_MS)
    _tab_to(page, _row_button(second["id"]))
    page.keyboard.press("Enter")
    wait_task_state(page, "input-required", TIMEOUT_MS)
    _tab_to(page, "#cancel-task")
    page.keyboard.press("Enter")
    page.wait_for_selector("#cancel-dialog[open]", timeout=TIMEOUT_MS)
    assert page.evaluate("() => document.activeElement.id") == "cancel-keep"  # the safe choice has the focus
    assert _axe(page) == []
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.querySelector('#cancel-dialog').open", timeout=TIMEOUT_MS)
    assert served.get(second["id"])["status"]["state"] == "input-required"
    page.click("#cancel-task")
    page.wait_for_selector("#cancel-dialog[open]", timeout=TIMEOUT_MS)
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("() => document.activeElement.id") == "cancel-confirm"
    page.keyboard.press("Enter")
    wait_task_state(page, "canceled", TIMEOUT_MS)
    assert served.get(second["id"])["status"]["state"] == "canceled"
    assert page.errors == []
