"""A daemon with no credential configured treats every caller as its operator; a web page the
operator happens to visit must not become one. Through a real headless Chromium and a real
`murmurd serve` on loopback: a page on another origin that POSTs a "simple" request (no
preflight: `mode: "no-cors"`, `text/plain`, or an HTML form) starts no task, and a DNS-rebound
name (`Host: attacker.example`) is refused, while the daemon's own origin (the console), a listed
`--cors-origin` and non-browser clients (no `Origin` header) keep working."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from a2akit import serving
from browserkit import PageServer, scripted_capsule, task_count

ATTACK_PAGE = """<!doctype html><body><script>
const body = (text) => JSON.stringify({jsonrpc: "2.0", id: 1, method: "message/send",
  params: {message: {messageId: "evil" + Math.random(), role: "user", parts: [{text}]}}});
window.attack = async (url) => {
  await fetch(url, {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"}, body: body("say hello")})
    .catch(() => null);
  await fetch(url, {method: "POST", mode: "no-cors", body: body("say hello")}).catch(() => null);
  return true;
};
window.formAttack = (url) => {
  const form = document.createElement("form");
  form.method = "POST"; form.action = url; form.enctype = "text/plain"; form.target = "sink";
  const field = document.createElement("input");
  field.name = '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"form","role":"user","parts":[{"text":"say hello"}]},"x":"';
  field.value = '"}}';
  form.appendChild(field);
  const sink = document.createElement("iframe"); sink.name = "sink"; document.body.appendChild(sink);
  document.body.appendChild(form);
  form.submit();
  return true;
};
</script></body>"""


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")




def test_a_page_on_another_origin_cannot_drive_a_daemon_without_credentials(tmp_path: Path, browser) -> None:
    stranger, listed = PageServer(ATTACK_PAGE), PageServer(ATTACK_PAGE)
    try:
        with serving(scripted_capsule(tmp_path), tmp_path / "state", "--cors-origin", listed.origin) as served:
            page = browser.new_page()
            page.goto(stranger.origin + "/")
            page.evaluate("(url) => window.attack(url)", served.url)
            page.evaluate("(url) => window.formAttack(url)", served.url)
            time.sleep(1.5)  # the form's navigation, had it been let through
            assert task_count(served.url) == 0
            # the daemon's own origin (the console) and a listed origin still may
            own = browser.new_page()
            own.goto(served.url + "console/")
            own.evaluate("(url) => window.fetch(url, {method: 'POST', headers: {'content-type': 'application/json'},"
                         " body: JSON.stringify({jsonrpc: '2.0', id: 1, method: 'message/send', params: {message:"
                         " {messageId: 'own', role: 'user', parts: [{text: 'say hello'}]}}})})", served.url)
            friend = browser.new_page()
            friend.goto(listed.origin + "/")
            friend.evaluate("(url) => window.attack(url)", served.url)
            assert task_count(served.url) == 3
    finally:
        stranger.close()
        listed.close()


def test_a_dns_rebound_name_and_a_foreign_origin_are_refused_over_raw_http(tmp_path: Path) -> None:
    with serving(scripted_capsule(tmp_path), tmp_path / "state") as served:
        port = served.url.rsplit(":", 1)[1].strip("/")
        send = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": "say hello"}]}}}
        for headers, words in [
            ({"host": f"attacker.example:{port}"}, "Host 'attacker.example"),
            ({"origin": "http://attacker.example"}, "origin 'http://attacker.example'"),
            ({"origin": "null"}, "origin 'null'"),
        ]:
            refused = httpx.post(served.url, json=send, headers=headers, timeout=10)
            assert refused.status_code == 403, refused.text
            error = refused.json()["error"]
            assert error["code"] == -32031 and words in error["message"], error
            on_stream = httpx.get(served.url + "stream", headers=headers, timeout=10)
            assert on_stream.status_code == 403
        assert task_count(served.url) == 0
        # loopback names, the daemon's own origin and clients that send no Origin are served
        for headers in ({"host": f"localhost:{port}"}, {"origin": served.url.rstrip("/")}, {}):
            assert httpx.post(served.url, json=send, headers=headers, timeout=10).status_code == 200
        assert task_count(served.url) == 3
