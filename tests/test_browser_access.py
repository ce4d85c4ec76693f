"""The console and the GET streams with a bearer token configured, in a real headless Chromium
(Debian's, driven by Playwright) against a real `murmurd serve`: the console asks for the token,
sends it in a header on its fetch calls, opens every EventSource with a stream ticket, re-mints
an expired ticket and resumes after a cut; a page without the token gets 401s and no data; a
ticket works on its own stream only; a peer token sees no trace events; and no URL the browser
asked for ever holds the token."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2akit import serving
from authkit import bearer
from browserkit import (FIRST_WORDS, SECOND_WORDS, CuttingProxy, scripted_capsule, send_from_console, wait_answer,
                        wait_task_state)
from test_stream_tickets import OPS, PEER, credentials, send, wait_completed

TIMEOUT_MS = 30_000


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")


class Recorder:
    """Every request the page made (URL, method, headers) and every response's status."""

    def __init__(self, page: Any) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.responses: list[tuple[str, int]] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.requests.append((r.url, r.method, dict(r.headers))))
        page.on("response", lambda r: self.responses.append((r.url, r.status)))
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def urls(self, part: str) -> list[str]:
        return [url for url, _method, _headers in self.requests if part in url]

    def assert_token_never_in_a_url(self, *tokens: str) -> None:
        assert self.requests
        for url, _method, _headers in self.requests:
            for token in tokens:
                assert token not in url, url


def _live(page: Any) -> None:
    page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'live'",
                           timeout=TIMEOUT_MS)


def _login(page: Any, token: str) -> None:
    page.wait_for_selector("#login:not([hidden])", timeout=TIMEOUT_MS)
    page.fill("#login-token", token)
    page.click("#login-send")
    _live(page)






def _serve(tmp_path: Path, *args: str):
    return serving(scripted_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path)), *args)


def test_the_console_asks_for_the_token_and_streams_through_tickets_re_minted_after_a_cut(
        tmp_path: Path, browser) -> None:
    with _serve(tmp_path, "--stream-ticket-ttl", "2") as served:
        earlier = send(served, "say hello")
        wait_completed(served, earlier["id"])
        proxy = CuttingProxy(int(served.url.rstrip("/").rsplit(":", 1)[1]))
        try:
            page = browser.new_page()
            seen = Recorder(page)
            page.goto(f"http://127.0.0.1:{proxy.port}/console/")
            page.wait_for_selector("#login:not([hidden])", timeout=TIMEOUT_MS)
            assert page.locator("#task-list li").count() == 0
            assert page.text_content("#card-name") == "console-demo"  # the card is public
            _login(page, OPS)
            page.wait_for_selector(f"#task-list li[data-task-id='{earlier['id']}']", timeout=TIMEOUT_MS)
            assert page.evaluate("() => sessionStorage.getItem('murmurd.console.token')") == OPS
            assert page.evaluate("() => localStorage.length") == 0

            asked = send_from_console(page, "ask me")
            wait_task_state(page, "input-required")
            wait_answer(page, FIRST_WORDS)
            assert page.text_content("#task-answer").split() == FIRST_WORDS.split()
            page.wait_for_selector("#trace-box:not([hidden])", timeout=TIMEOUT_MS)  # an operator sees the trace
            assert "task_start" in page.text_content("#task-trace")

            time.sleep(2.5)  # every ticket the page holds has expired now
            proxy.cut()  # both streams die; EventSource reconnects with its old, expired ticket
            page.wait_for_function("() => document.querySelector('#connection').dataset.state === 'reconnecting'",
                                   timeout=TIMEOUT_MS)
            _live(page)
            httpx.post(served.url, headers=bearer(OPS), timeout=30, json={
                "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
                    "messageId": "reply1", "role": "user", "parts": [{"text": "go on"}], "taskId": asked}}})
            wait_task_state(page, "completed")
            wait_answer(page, SECOND_WORDS)  # the stored answer: the last turn's text (issue 24)
            assert page.text_content("#task-answer").split() == SECOND_WORDS.split()
        finally:
            proxy.close()

        stream = f"/tasks/{asked}/stream"
        opened = seen.urls(stream + "?")
        assert all("ticket=" in url for url in opened)
        # the reconnection with the expired ticket was refused, then a fresh ticket resumed ?after=
        refused = [url for url, status in seen.responses if stream in url and status == 401]
        assert refused, seen.responses
        resumed = [url for url in opened if "after=" in url]
        assert resumed and resumed[-1] != refused[0]
        assert len({url.split("ticket=")[1] for url in opened}) >= 2  # minted more than once
        # the token rode in headers only: on every fetch call once it was typed in, never on an
        # EventSource, never in a URL
        posts = [headers.get("authorization") for _url, method, headers in seen.requests if method == "POST"]
        typed = posts.index(f"Bearer {OPS}")
        assert typed <= 1 and set(posts[typed:]) == {f"Bearer {OPS}"}, posts  # only the first call went without
        for url, method, headers in seen.requests:
            if method == "GET" and "/stream" in url:  # an EventSource
                assert "authorization" not in headers, url
        seen.assert_token_never_in_a_url(OPS)
        assert seen.errors == []


PROBE = """async ([taskA, taskB]) => {
  const status = async (url, init) => (await fetch(url, init)).status;
  const opens = (url) => new Promise((resolve) => {
    const source = new EventSource(url);
    source.onopen = () => { source.close(); resolve("open"); };
    source.onerror = () => { source.close(); resolve("refused"); };
  });
  const rpc = (headers) => ({method: "POST", headers: Object.assign({"content-type": "application/json"}, headers),
    body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "ListTasks", params: {}})});
  const out = {
    list: await status("/", rpc({})),
    watch: await opens("/stream"),
    trace: await status("/tasks/" + taskA + "/trace"),
    mint: await status("/auth/stream-ticket", {method: "POST", body: JSON.stringify({path: "/stream"})}),
  };
  if (window.TOKEN) {
    const minted = await fetch("/auth/stream-ticket", {method: "POST",
      headers: {authorization: "Bearer " + window.TOKEN, "content-type": "application/json"},
      body: JSON.stringify({path: "/tasks/" + taskA + "/stream"})});
    const ticket = (await minted.json()).ticket;
    out.own = await opens("/tasks/" + taskA + "/stream?ticket=" + ticket);
    out.other = await opens("/tasks/" + taskB + "/stream?ticket=" + ticket);
    out.otherStatus = await status("/tasks/" + taskB + "/stream?ticket=" + ticket);
    out.post = await status("/?ticket=" + ticket, rpc({}));
  }
  return out;
}"""


def test_a_page_without_the_token_gets_401s_and_no_data_and_a_ticket_opens_only_its_stream(
        tmp_path: Path, browser) -> None:
    with _serve(tmp_path) as served:
        first, second = send(served, "say hello"), send(served, "say hello")
        for task in (first, second):
            wait_completed(served, task["id"])
        page = browser.new_page()
        seen = Recorder(page)
        page.goto(served.url + "console/")
        page.wait_for_selector("#login:not([hidden])", timeout=TIMEOUT_MS)
        assert page.get_attribute("#connection", "data-state") == "locked"
        page.fill("#login-token", "wrong-token-" + "w" * 32)
        page.click("#login-send")
        page.wait_for_function("() => document.querySelector('#login-message').textContent.includes('unknown bearer')",
                               timeout=TIMEOUT_MS)
        assert page.is_visible("#login") and page.locator("#task-list li").count() == 0
        assert page.evaluate("() => sessionStorage.length") == 0  # a refused token is forgotten
        assert "say hello" not in page.content() and first["id"] not in page.content()
        assert any(status == 401 for _url, status in seen.responses)

        without = page.evaluate(PROBE, [first["id"], second["id"]])
        assert without == {"list": 401, "watch": "refused", "trace": 401, "mint": 401}

        page.evaluate("(token) => { window.TOKEN = token; }", OPS)
        withticket = page.evaluate(PROBE, [first["id"], second["id"]])
        assert withticket["own"] == "open"
        assert withticket["other"] == "refused" and withticket["otherStatus"] == 401
        assert withticket["post"] == 401
        seen.assert_token_never_in_a_url(OPS)


def test_a_peer_token_sees_its_own_tasks_but_not_their_trace_events(tmp_path: Path, browser) -> None:
    with _serve(tmp_path) as served:
        operators = send(served, "say hello")
        task = send(served, "say hello", PEER)
        wait_completed(served, operators["id"])
        wait_completed(served, task["id"])
        page = browser.new_page()
        seen = Recorder(page)
        page.goto(served.url + "console/")
        _login(page, PEER)
        row = f"#task-list li[data-task-id='{task['id']}']"
        page.wait_for_selector(row, timeout=TIMEOUT_MS)
        assert page.locator("#task-list li").count() == 1  # the operator's task is not listed
        page.click(row)
        wait_task_state(page, "completed")
        page.wait_for_selector("#trace-note:not([hidden])", timeout=TIMEOUT_MS)
        assert page.is_hidden("#trace-box") and page.locator("#task-trace li").count() == 0
        assert (served.url + f"tasks/{task['id']}/trace", 403) in seen.responses
        wait_answer(page, FIRST_WORDS)  # the stream itself is open
        assert page.text_content("#task-answer").split() == FIRST_WORDS.split()  # the stream itself is open
        seen.assert_token_never_in_a_url(PEER)
        assert seen.errors == []
