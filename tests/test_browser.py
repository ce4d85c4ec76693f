"""A real headless Chromium (Debian's, driven by Playwright) against a real `murmurd serve`:
EventSource on the GET streams, CORS from another origin, the console, and reconnection."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2akit import serving, start
from browserkit import (FIRST_WORDS, HOSTILE_TEXT, SECOND_WORDS, CuttingProxy, PageServer, free_port,
                        scripted_capsule, send_from_console, task_count, wait_answer, wait_task_state)

TIMEOUT_MS = 30_000


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")


# An EventSource on a task's GET stream, collecting each frame once until the final status.
COLLECT = """async ([base, text]) => {
  const send = await fetch(base, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "message/send",
                          params: {message: {messageId: "m" + Date.now(), role: "user", parts: [{text}]}}})});
  const task = (await send.json()).result;
  return await new Promise((resolve) => {
    const frames = [];
    let opens = 0;
    const source = new EventSource(base + "tasks/" + task.id + "/stream");
    source.onopen = () => { opens += 1; };
    source.addEventListener("text", (e) => frames.push(["text", e.lastEventId, JSON.parse(e.data).text]));
    source.addEventListener("status", (e) => {
      const data = JSON.parse(e.data);
      frames.push(["status", e.lastEventId, data.status.state]);
      if (data.final) { source.close(); resolve({frames, opens}); }
    });
  });
}"""


def _words(frames: list) -> list[str]:
    return [text.strip() for kind, _id, text in frames if kind == "text" and text.strip()]


def test_an_event_source_receives_the_answer_chunks_in_order(tmp_path: Path, browser) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        page = browser.new_page()
        page.goto(served.url + ".well-known/agent-card.json")  # any page of the daemon's origin
        result = page.evaluate(COLLECT, [served.url, "say hello"])
        assert _words(result["frames"]) == FIRST_WORDS.split()
        assert result["frames"][-1][0::2] == ["status", "completed"]
        ids = [int(i) for _k, i, _t in result["frames"]]
        assert ids == sorted(set(ids))  # every frame once, in id order
        assert result["opens"] == 1


def test_a_stream_cut_mid_frame_resumes_with_last_event_id_and_every_chunk_arrives_once(
        tmp_path: Path, browser) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        served.send("say hello")  # warm up: the next task's chunks come from a ready session
        proxy = CuttingProxy(int(served.url.rstrip("/").rsplit(":", 1)[1]))
        try:
            base = f"http://127.0.0.1:{proxy.port}/"
            page = browser.new_page()
            page.goto(base + ".well-known/agent-card.json")
            proxy.limit = 700  # from now on every connection dies after 700 bytes, mid-frame
            result = page.evaluate(COLLECT, [base, "say hello"])
        finally:
            proxy.close()
        assert result["opens"] > 2, result  # it was cut, and reconnected, more than once
        assert _words(result["frames"]) == FIRST_WORDS.split()
        ids = [int(i) for _k, i, _t in result["frames"]]
        assert ids == sorted(set(ids))


CORS_PAGE = """<!doctype html><script>
window.callDaemon = async (url) => {
  try {
    const response = await fetch(url, {method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({jsonrpc: "2.0", id: 7, method: "message/send",
                            params: {message: {messageId: "cors" + Date.now(), role: "user", parts: [{text: "say hello"}]}}})});
    return {ok: true, body: await response.json()};
  } catch (error) {
    return {ok: false, error: String(error)};
  }
};
window.watchDaemon = (url) => new Promise((resolve) => {
  const source = new EventSource(url + "stream");
  source.onopen = () => { source.close(); resolve("open"); };
  source.onerror = () => { source.close(); resolve("refused"); };
});
</script>"""




def test_a_page_on_another_origin_calls_the_daemon_only_when_its_origin_is_listed(tmp_path: Path, browser) -> None:
    allowed, stranger = PageServer(CORS_PAGE), PageServer(CORS_PAGE)
    try:
        with serving(scripted_capsule(tmp_path), tmp_path / "state", "--cors-origin", allowed.origin) as served:
            page = browser.new_page()
            page.goto(allowed.origin + "/")
            answer = page.evaluate("(url) => window.callDaemon(url)", served.url)
            assert answer["ok"], answer
            assert answer["body"]["result"]["id"].startswith("tsk_")
            assert page.evaluate("(url) => window.watchDaemon(url)", served.url) == "open"
            card = page.evaluate("(url) => fetch(url + '.well-known/agent-card.json').then(r => r.json())", served.url)
            assert card["name"] == "console-demo"

            before = task_count(served.url)
            other = browser.new_page()
            other.goto(stranger.origin + "/")
            refused = other.evaluate("(url) => window.callDaemon(url)", served.url)
            assert not refused["ok"] and "Failed to fetch" in refused["error"], refused
            assert other.evaluate("(url) => window.watchDaemon(url)", served.url) == "refused"
            assert task_count(served.url) == before  # the preflight failed: no task was created
    finally:
        allowed.close()
        stranger.close()


def test_no_origin_is_allowed_by_default(tmp_path: Path, browser) -> None:
    stranger = PageServer(CORS_PAGE)
    try:
        with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
            page = browser.new_page()
            page.goto(stranger.origin + "/")
            refused = page.evaluate("(url) => window.callDaemon(url)", served.url)
            assert not refused["ok"], refused
            assert task_count(served.url) == 0
    finally:
        stranger.close()


# -- the console ------------------------------------------------------------------------------





def _answer_words(page) -> list[str]:
    return page.text_content("#task-answer").split()


def test_the_console_follows_tasks_live_replies_cancels_and_renders_text_as_text(tmp_path: Path, browser) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(served.url + "console")
        page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                               timeout=TIMEOUT_MS)
        assert page.text_content("#card-name") == "console-demo"
        assert page.text_content("#card-version") == "v1.2.3"
        assert "ask" in page.text_content("#card-tools")
        assert "ask" not in page.locator("#card-skills li").all_text_contents()  # a tool is listed once

        # A task sent by someone else appears live (watch stream, no polling), newest first.
        other = served.send("say hello")
        page.wait_for_selector(f"#task-list li[data-task-id='{other['id']}'][data-state='completed']",
                               timeout=TIMEOUT_MS)
        page.wait_for_function("(id) => document.querySelector(`#task-list li[data-task-id='${id}'] .task-label`)"
                               ".textContent === 'say hello'", arg=other["id"], timeout=TIMEOUT_MS)
        assert page.is_hidden("#waiting-count")
        assert page.title() == "console-demo · murmurd console"

        # A new task from the box: its answer streams in, it asks, the reply resumes it.
        asked = send_from_console(page, "ask me please")
        wait_task_state(page, "input-required")
        wait_answer(page, FIRST_WORDS)
        assert _answer_words(page) == FIRST_WORDS.split()
        assert page.text_content("#task-status-message") == "May I go on?"
        assert page.is_visible("#reply")
        row = page.locator(f"#task-list li[data-task-id='{asked}']")
        assert "input-required" in row.get_attribute("class")
        assert page.locator("#task-list li").first.get_attribute("data-task-id") == asked  # newest first
        assert page.title().startswith("(1) console-demo")
        page.select_option("#state-filter", "input-required")
        assert page.locator("#task-list li").count() == 1
        page.select_option("#state-filter", "")

        page.fill("#reply-text", "go on")
        page.click("#reply-send")
        wait_task_state(page, "completed")
        # the stored answer (the last turn's text) replaces what the turns streamed (issue 24)
        wait_answer(page, SECOND_WORDS)
        assert _answer_words(page) == SECOND_WORDS.split() == served.get(asked)["status"]["response"].split()
        assert served.get(asked)["status"]["state"] == "completed"
        assert "go on" in page.text_content("#task-messages")
        assert page.locator("#task-artifacts li").count() >= 1  # the ask tool's result, live
        assert "go on" in page.text_content("#task-artifacts")
        assert not page.title().startswith("(")

        # Cancel a task that waits for input.
        waiting = send_from_console(page, "ask me again")
        wait_task_state(page, "input-required")
        page.click("#cancel-task")
        page.click("#cancel-confirm")  # cancel asks first
        wait_task_state(page, "canceled")
        assert served.get(waiting)["status"]["state"] == "canceled"
        assert page.is_hidden("#cancel-task")

        # A model answer holding markup is shown as text, never run or parsed.
        send_from_console(page, "be hostile")
        wait_task_state(page, "completed")
        wait_answer(page, HOSTILE_TEXT)  # the state can come (watch stream) before the text (task stream)
        assert page.text_content("#task-answer") == HOSTILE_TEXT
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator("#task-answer script, #task-answer img, #task-answer b").count() == 0
        assert page.locator("#task-messages img, #task-messages script").count() == 0
        assert errors == []


def test_the_console_shows_every_chunk_once_across_a_cut_stream(tmp_path: Path, browser) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        proxy = CuttingProxy(int(served.url.rstrip("/").rsplit(":", 1)[1]))
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{proxy.port}/console/")
            page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                                   timeout=TIMEOUT_MS)
            asked = send_from_console(page, "ask me")
            wait_task_state(page, "input-required")
            wait_answer(page, FIRST_WORDS)
            proxy.cut()  # both streams die mid-answer (the task waits for its reply)
            page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                                   timeout=TIMEOUT_MS)
            assert _answer_words(page) == FIRST_WORDS.split()  # the replay shows no chunk twice
            served.send("go on", taskId=asked)  # the rest of the answer comes over the new stream
            wait_task_state(page, "completed")
            wait_answer(page, SECOND_WORDS)  # the stored answer: the last turn's text (issue 24)
            assert _answer_words(page) == SECOND_WORDS.split()
            assert proxy.cuts >= 1
        finally:
            proxy.close()


def test_the_console_reconnects_across_a_daemon_restart(tmp_path: Path, browser) -> None:
    capsule, state = scripted_capsule(tmp_path), tmp_path / "state"
    port = str(free_port())
    served = start(capsule, state, "--port", port)
    try:
        page = browser.new_page()
        page.goto(served.url + "console/")
        page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                               timeout=TIMEOUT_MS)
        asked = send_from_console(page, "ask me")
        wait_task_state(page, "input-required")
        assert served.stop(timeout=60) == 0
        page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'reconnecting'",
                               timeout=TIMEOUT_MS)
        served = start(capsule, state, "--port", port)
        # The page comes back by itself, showing what became of the task the old daemon left waiting
        # (a stopping daemon ends it: canceled after the grace period, or failed if it was killed).
        ended = served.get(asked)["status"]["state"]
        assert ended in ("canceled", "failed")
        page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                               timeout=TIMEOUT_MS)
        page.wait_for_selector(f"#task-list li[data-task-id='{asked}'][data-state='{ended}']", timeout=TIMEOUT_MS)
        wait_task_state(page, ended)
        wait_answer(page, FIRST_WORDS)  # the state can come (watch stream) before the text (task stream)
        assert _answer_words(page) == FIRST_WORDS.split()  # nothing shown twice
        fresh = send_from_console(page, "say hello")
        wait_task_state(page, "completed")
        wait_answer(page, FIRST_WORDS)
        assert _answer_words(page) == FIRST_WORDS.split()
        assert served.get(fresh)["status"]["state"] == "completed"
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(timeout=10)
