"""`murmurd trace show --html FILE` opened in a headless browser (Debian's chromium, driven by
Playwright): the timeline of turns and calls, redundant calls marked, nothing fetched, hostile
strings shown as text (issue 16, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import Browser, Page

from conftest import EXAMPLES, ROOT
from tracekit import TRACES, murmurd


def _open(browser: Browser, page_file: Path) -> tuple[Page, list[str], list[str]]:
    """The page, every URL it requested, every dialog it opened."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(page_file.as_uri(), wait_until="load", timeout=30_000)
    return page, requests, dialogs


def _bars(page: Page, selector: str) -> list[dict[str, float]]:
    return [page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())]


def test_the_page_shows_the_timeline_of_an_upstream_trace(browser: Browser, tmp_path: Path, capsys) -> None:
    out = tmp_path / "session.html"
    code, stdout, err = murmurd(capsys, "trace", "show", "--html", str(out), str(TRACES / "upstream-reopen.jsonl"))
    assert (code, stdout, err) == (0, f"wrote {out}\n", "")
    page, requests, dialogs = _open(browser, out)
    try:
        assert page.locator("#timeline").is_visible()
        lanes = page.locator("#timeline .lane")
        assert lanes.count() == 9  # one lane per inference turn, both attempts
        assert [lanes.nth(i).get_attribute("data-turn") for i in range(9)] == ["0", "1", "2", "3", "4", "5", "0", "1", "2"]
        assert page.locator("#timeline .attempt").all_inner_texts() == ["attempt 1", "attempt 2"]
        counts = {kind: page.locator(f"#timeline .bar.{kind}").count() for kind in ("inference", "tool", "skill", "shell")}
        assert counts == {"inference": 9, "tool": 7, "skill": 1, "shell": 1}
        redundant = page.locator("#timeline .bar.redundant")
        assert redundant.count() == 2
        assert "redundant: re-reads turn 0" in redundant.nth(0).get_attribute("title")
        assert page.locator("#timeline .bar.failed").count() == 2  # pytest's tool call and its shell line
        # inference bars are laid out in time: each starts right of the one before, inside its track
        inference = _bars(page, "#timeline .bar.inference")
        assert all(b["width"] >= 3 for b in inference)
        assert [b["x"] for b in inference] == sorted(b["x"] for b in inference)
        track = page.locator("#timeline .track").first.bounding_box()
        assert all(track["x"] - 1 <= b["x"] and b["x"] + b["width"] <= track["x"] + track["width"] + 1 for b in inference)
        # token counts per turn, the turn table with the redundant badges
        assert lanes.nth(0).locator(".tokens").inner_text() == "1,200 in · 80 out"
        assert page.locator("#turns .badge").all_inner_texts() == ["redundant · re-reads turn 0", "redundant · re-reads turn 3"]
        assert "shell /usr/bin/pytest" in page.locator("#turns").inner_text()
        page.screenshot(path=str(tmp_path / "session.png"), full_page=True)
    finally:
        page.close()
    assert requests == [out.as_uri()] and dialogs == []  # nothing fetched, nothing ran


def test_hostile_strings_are_text_and_nothing_is_fetched(browser: Browser, tmp_path: Path, capsys) -> None:
    lines = [json.loads(line) for line in (TRACES / "upstream-idle.jsonl").read_text().splitlines()]
    attack = "<img src=http://127.0.0.1:9/x onerror=alert(1)><script>alert(2)</script>"
    lines[0]["capsule_name"] = attack
    call = {"event_type": "tool_call", "session_id": lines[0]["session_id"], "timestamp": lines[1]["timestamp"] + 3,
            "turn": 0, "tool_name": attack, "input": {"path": "</style><link rel=stylesheet href=http://127.0.0.1:9/c>"},
            "duration_ms": 2, "status": "ok", "state_effect": "read"}
    trace = tmp_path / "hostile.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in [lines[0], lines[1], call, lines[2]]))
    out = tmp_path / "hostile.html"
    assert murmurd(capsys, "trace", "show", "--html", str(out), str(trace))[0] == 0
    page, requests, dialogs = _open(browser, out)
    try:
        assert page.locator("img, script, link").count() == 0
        assert page.locator("h1").inner_text() == f"{attack} v1.2.0"
        assert attack in page.locator("#turns").inner_text()
        assert page.title().startswith(attack)
    finally:
        page.close()
    assert requests == [out.as_uri()] and dialogs == []


def test_a_real_session_page(browser: Browser, tmp_path: Path, capsys) -> None:
    """The hello example run by `murmurd run`: its echo, skill and write-file calls on the timeline."""
    proc = subprocess.run([sys.executable, "-m", "murmurd", "run", str(EXAMPLES / "hello"), "--task", "hi",
                           "--workdir", str(tmp_path / "project"), "--json", "--no-env-file"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "hello.html"
    code, _, err = murmurd(capsys, "trace", "show", "--workdir", str(tmp_path / "project"), "--html", str(out))
    assert code == 0, err
    page, requests, _ = _open(browser, out)
    try:
        assert page.locator("#timeline .lane").count() == 4
        assert page.locator("#timeline .bar.tool").count() == 2 and page.locator("#timeline .bar.skill").count() == 1
        titles = [page.locator("#timeline .bar.tool").nth(i).get_attribute("title") for i in range(2)]
        assert titles[0].startswith("tool echo · ") and titles[1].startswith("tool write-file · ")
        assert all(b["width"] >= 3 for b in _bars(page, "#timeline .bar"))
    finally:
        page.close()
    assert requests == [out.as_uri()]


def test_an_unwritable_page_is_e_io_003_and_a_symlink_is_never_written_through(tmp_path: Path, capsys) -> None:
    trace = str(TRACES / "upstream-idle.jsonl")
    code, out, err = murmurd(capsys, "trace", "show", "--html", str(tmp_path / "absent" / "p.html"), trace)
    assert (code, out) == (1, "") and err.startswith("error[E-IO-003]: cannot write ")
    (tmp_path / "link.html").symlink_to(tmp_path / "elsewhere.html")
    code, _, err = murmurd(capsys, "trace", "show", "--html", str(tmp_path / "link.html"), trace)
    assert code == 0, err  # the page replaces the link whole; nothing is written where it pointed
    assert not (tmp_path / "link.html").is_symlink() and not (tmp_path / "elsewhere.html").exists()
