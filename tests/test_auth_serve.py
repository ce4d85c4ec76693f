"""Authentication through a real `murmurd serve` on loopback: bearer tokens through raw HTTP, the
a2a-sdk client and `murmurd send`; every refusal (401/403 with a JSON-RPC error body, nothing
stored or traced); identity from the credential; replies to `input-required`; the public-bind
refusal; mutual TLS with a throwaway CA; the token presented to a peer."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory, create_client
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.helpers import get_message_text, new_text_message
from a2a.types import a2a_pb2 as pb

from authkit import bearer, token_sha256
from a2akit import ROOT, Served, chaos_capsule, script_capsule, serving

OPS = "ops-token-" + "o" * 32
PARTNER = "partner-token-" + "p" * 32
LOW = "low-token-" + "l" * 32
OLD = "old-token-" + "d" * 32
GONE = "gone-token-" + "g" * 32
PAGE = "https://console.example"



def _credentials(root: Path, extra: str = "") -> Path:
    (root / "ops.token").write_text(OPS + "\n")
    path = root / "credentials.yaml"
    path.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_file: ops.token}}
  - {{name: partner, origin: peer, trust: [partner, internal], token_env: PARTNER_TOKEN_FOR_TEST}}
  - {{name: low, origin: peer, trust: [partner], token_sha256: {token_sha256(LOW)}}}
  - {{name: old, origin: operator, token_sha256: {token_sha256(OLD)}, expires: 2020-01-01T00:00:00Z}}
  - {{name: gone, origin: operator, token_sha256: {token_sha256(GONE)}, revoked: true}}
{extra}""")
    return path



def message(text: str, **extra: Any) -> dict[str, Any]:
    return {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **extra}


def rpc(served: Served, method: str, params: Any, headers: dict[str, str]) -> httpx.Response:
    return served.post({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, headers)


def recorded(served: Served) -> tuple[int, int]:
    """(tasks in the store, a2a_task_received lines in every trace)."""
    with sqlite3.connect(served.state_dir / "tasks.sqlite3") as db:
        rows = db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
    return rows, sum(1 for e in served.all_events() if e["event_type"] == "a2a_task_received")


def wait_state(served: Served, task_id: str, *states: str, token: str = OPS, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = rpc(served, "tasks/get", {"id": task_id}, bearer(token)).json()["result"]
        if task["status"]["state"] in states:
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Iterator[Served]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("auth")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 50})
    with serving(capsule, root / "state", "--credentials", str(_credentials(root)), "--cors-origin", PAGE,
                 env={"PARTNER_TOKEN_FOR_TEST": PARTNER}) as running:
        yield running


# -- the card ---------------------------------------------------------------------------------

def test_the_agent_card_needs_no_credential_and_names_the_scheme_in_both_shapes(served: Served) -> None:
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        card = httpx.get(served.url.rstrip("/") + path, timeout=10).json()
        assert card["securitySchemes"]["bearer"]["type"] == "http"  # A2A 0.3
        assert card["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"  # A2A 1.0
        assert card["security"] == [{"bearer": []}]
        assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
        assert "mtls" not in card["securitySchemes"]  # no client CA: no mutual TLS


def test_only_the_card_the_probes_and_the_consoles_files_are_open_every_other_route_needs_a_credential(
        served: Served) -> None:
    base = served.url.rstrip("/")
    assert httpx.get(base + "/healthz", timeout=10).status_code == 200
    assert httpx.get(base + "/readyz", timeout=10).status_code == 200
    for path in ("/metrics", "/stream", "/tasks/tsk_x/stream", "/tasks/tsk_x/trace", "/auth/stream-ticket", "/",
                 "/console/../stream", "/console/%2e%2e/stream"):
        refused = httpx.get(base + path, timeout=10)
        assert refused.status_code in (401, 404), path
        if refused.status_code == 401:
            assert refused.json()["error"]["code"] == -32030
        else:  # a console path that is no file of the console: StaticFiles' 404, never a stream
            assert path.startswith("/console/") and "event-stream" not in refused.headers.get("content-type", "")
    for path in ("/metrics", "/stream", "/tasks/tsk_x/stream", "/tasks/tsk_x/trace", "/auth/stream-ticket", "/"):
        assert httpx.get(base + path, timeout=10).status_code == 401, path
    # the console's static files hold no data: they load without a credential, and only by GET
    page = httpx.get(base + "/console/", timeout=10)
    assert page.status_code == 200 and "console.js" in page.text and "tsk_" not in page.text
    assert httpx.get(base + "/console/console.js", timeout=10).status_code == 200
    assert httpx.post(base + "/console/", timeout=10).status_code == 401
    assert httpx.get(base + "/metrics", headers=bearer(OPS), timeout=10).status_code == 200
    assert "murmurd_tasks_running" in httpx.get(base + "/metrics", headers=bearer(OPS), timeout=10).text


def test_a_browser_page_gets_its_preflight_and_reads_a_401(served: Served) -> None:
    preflight = httpx.options(served.url, timeout=10, headers={
        "origin": PAGE, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == PAGE
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    refused = httpx.post(served.url, json={}, headers={"origin": PAGE}, timeout=10)
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == PAGE
    allowed = rpc(served, "tasks/get", {"id": "tsk_" + "0" * 32}, {**bearer(OPS), "origin": PAGE})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == PAGE


# -- refusals -----------------------------------------------------------------------------------

REFUSED = [
    ({}, "a credential is required"),
    ({"authorization": "Basic b3BzOnNlY3JldA=="}, "malformed Authorization header"),
    ({"authorization": "Bearer"}, "malformed Authorization header"),
    ({"authorization": f"Bearer {OPS} extra"}, "malformed Authorization header"),
    (bearer("wrong-token-" + "w" * 30), "unknown bearer token"),
    (bearer(OPS[:-1]), "unknown bearer token"),
    (bearer(OLD), "credential 'old' expired at 2020-01-01"),
    (bearer(GONE), "credential 'gone' is revoked"),
]


@pytest.mark.parametrize("headers, reason", REFUSED)
def test_missing_malformed_wrong_expired_and_revoked_credentials_get_401_and_nothing_is_recorded(
        served: Served, headers: dict[str, str], reason: str) -> None:
    before = recorded(served)
    for method, params in (("message/send", {"message": message("let me in")}),
                           ("SendMessage", {"message": {**message("let me in"), "role": "ROLE_USER"}}),
                           ("tasks/get", {"id": "tsk_" + "0" * 32})):
        response = rpc(served, method, params, headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        body = response.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["code"] == -32030 and reason in body["error"]["message"]
        assert OPS not in response.text
    stream = httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "message/stream",
                                          "params": {"message": message("stream me")}}, headers=headers, timeout=10)
    assert stream.status_code == 401 and stream.json()["error"]["code"] == -32030
    other = httpx.get(served.url.rstrip("/") + "/anything/else", headers=headers, timeout=10)
    assert other.status_code == 401
    time.sleep(0.2)
    assert recorded(served) == before


@pytest.mark.parametrize("token, headers, reason", [
    (PARTNER, {"x-murmur-task-trust": "operator"}, "may assert trust partner, internal, untrusted; not 'operator'"),
    (PARTNER, {"x-murmur-task-origin": "operator"}, "cannot send operator tasks"),
    (LOW, {"x-murmur-task-origin": "peer", "x-murmur-task-trust": "internal"}, "not 'internal'"),
])
def test_a_peer_credential_asserting_more_trust_gets_403_and_nothing_is_recorded(
        served: Served, token: str, headers: dict[str, str], reason: str) -> None:
    before = recorded(served)
    response = rpc(served, "message/send", {"message": message("widen me")}, {**bearer(token), **headers})
    assert response.status_code == 403
    body = response.json()
    assert body["error"]["code"] == -32031 and reason in body["error"]["message"]
    time.sleep(0.2)
    assert recorded(served) == before


# -- identity from the credential -----------------------------------------------------------------

@pytest.mark.parametrize("token, headers, identity", [
    (OPS, {}, ("operator", "operator", "ops")),
    (OPS, {"x-murmur-task-origin": "peer", "x-murmur-task-trust": "sandboxed"}, ("peer", "sandboxed", "ops")),
    (PARTNER, {}, ("peer", "partner", "partner")),
    (PARTNER, {"x-murmur-task-trust": "internal"}, ("peer", "internal", "partner")),
    (PARTNER, {"x-murmur-task-origin": "peer", "x-murmur-task-trust": "untrusted"}, ("peer", "untrusted", "partner")),
])
def test_origin_and_trust_come_from_the_credential_and_headers_only_narrow(
        served: Served, token: str, headers: dict[str, str], identity: tuple[str, str, str]) -> None:
    body = {"message": {**message("who am i"), "metadata": {"origin": "operator", "trust": "root"}}}
    task = rpc(served, "message/send", body, {**bearer(token), **headers}).json()["result"]
    assert wait_state(served, task["id"], "completed")["status"]["response"] == "answer: who am i"
    events = served.all_events()
    start = next(e for e in events if e["event_type"] == "task_start" and e["task_id"] == task["id"])
    received = next(e for e in events if e["event_type"] == "a2a_task_received" and e["task_id"] == task["id"])
    assert (start["origin"], start["trust"], received["principal"]) == identity


# -- replies to input-required ------------------------------------------------------------------

def _asking(served: Served, token: str) -> str:
    task = rpc(served, "message/send", {"message": message("mode:ask")}, bearer(token)).json()["result"]
    wait_state(served, task["id"], "input-required")
    return task["id"]


def test_a_reply_from_another_credential_is_refused_and_an_operator_may_answer(served: Served) -> None:
    task_id = _asking(served, PARTNER)
    before = recorded(served)
    refused = rpc(served, "message/send", {"message": message("approved", taskId=task_id)}, bearer(LOW))
    # issue 21: a task the caller may not read is answered as unknown, before the trust rule
    assert refused.status_code == 200
    assert refused.json()["error"]["code"] == -32001
    assert "input" not in refused.json()["error"]["message"]
    waiting = wait_state(served, task_id, "input-required")
    assert [m["parts"][0]["text"] for m in waiting.get("history", [])][-1:] != ["approved"]
    assert recorded(served) == before
    answered = rpc(served, "message/send", {"message": message("operator says go", taskId=task_id)}, bearer(OPS))
    assert answered.status_code == 200 and answered.json()["result"]["id"] == task_id
    assert wait_state(served, task_id, "completed")["status"]["response"] == "answer: operator says go"


def test_a_peer_may_answer_or_cancel_a_task_it_created_but_not_one_an_operator_created(served: Served) -> None:
    own = _asking(served, PARTNER)
    ok = rpc(served, "message/send", {"message": message("partner says go", taskId=own)}, bearer(PARTNER))
    assert ok.status_code == 200
    assert wait_state(served, own, "completed")["status"]["response"] == "answer: partner says go"
    operators = _asking(served, OPS)
    refused = rpc(served, "message/send", {"message": message("partner says go", taskId=operators)}, bearer(PARTNER))
    assert refused.json()["error"]["code"] == -32001  # as unknown as a task that never existed
    not_cancelled = rpc(served, "tasks/cancel", {"id": operators}, bearer(PARTNER))
    assert not_cancelled.json()["error"]["code"] == -32001, not_cancelled.text
    assert wait_state(served, operators, "input-required")
    assert rpc(served, "tasks/cancel", {"id": operators}, bearer(OPS)).json()["result"]["status"]["state"] == "canceled"
    theirs = _asking(served, PARTNER)
    cancelled = rpc(served, "tasks/cancel", {"id": theirs}, bearer(PARTNER)).json()["result"]
    assert cancelled["status"]["state"] == "canceled"


# -- the official SDK client ----------------------------------------------------------------------

class _Tokens(CredentialService):
    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
        return self.token if security_scheme_name == "bearer" else None


async def _sdk_client(url: str, version: str, http: httpx.AsyncClient, token: str | None) -> Any:
    config = ClientConfig(httpx_client=http, streaming=False)
    interceptors = [AuthInterceptor(_Tokens(token))] if token else []
    if version == "1.0":
        return await create_client(url, config, interceptors=interceptors)
    response = await http.get(url.rstrip("/") + "/.well-known/agent-card.json")
    card = conversions.to_core_agent_card(types_v03.AgentCard.model_validate(response.json()))
    assert list(card.security_schemes) == ["bearer"]
    return ClientFactory(config).create(card, interceptors=interceptors)


@pytest.mark.anyio
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_the_a2a_sdk_client_authenticates_from_the_card(served: Served, version: str) -> None:
    async with httpx.AsyncClient() as http:
        client = await _sdk_client(served.url, version, http, OPS)
        request = pb.SendMessageRequest(message=new_text_message("sdk hello", role=pb.Role.ROLE_USER))
        responses = [r async for r in client.send_message(request)]
        assert get_message_text(responses[0].task.status.message) == "answer: sdk hello"
        await client.close()
        before = recorded(served)
        anonymous = await _sdk_client(served.url, version, http, None)
        with pytest.raises(Exception, match="401"):
            [r async for r in anonymous.send_message(request)]
        await anonymous.close()
        assert recorded(served) == before


# -- murmurd send -------------------------------------------------------------------------------

def test_murmurd_send_presents_a_token_file_or_the_environment(served: Served, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(OPS)
    command = [sys.executable, "-m", "murmurd", "send", served.url, "via the cli", "--json"]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MURMUR_TOKEN")}
    by_file = subprocess.run([*command, "--token-file", str(tmp_path / "token")], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=60)
    assert by_file.returncode == 0, by_file.stderr
    assert json.loads(by_file.stdout)["id"].startswith("tsk_")
    by_env = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**env, "MURMUR_TOKEN": OPS},
                            timeout=60)
    assert by_env.returncode == 0, by_env.stderr
    without = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert without.returncode == 1
    assert "JSON-RPC error -32030: Unauthenticated: a credential is required" in without.stderr


def test_murmurd_watch_presents_its_token(served: Served, tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_TOKEN")}
    command = [sys.executable, "-m", "murmurd", "watch", served.url]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert refused.returncode == 1 and "-32030" in refused.stderr
    (tmp_path / "token").write_text(OPS)
    watcher = subprocess.Popen([*command, "--token-file", str(tmp_path / "token")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        time.sleep(1.5)
        task = rpc(served, "message/send", {"message": message("watched")}, bearer(OPS)).json()["result"]
        wait_state(served, task["id"], "completed")
        time.sleep(0.5)
        assert watcher.poll() is None  # still following the stream
    finally:
        watcher.terminate()
        out, _err = watcher.communicate(timeout=10)
    assert f"[{task['id']}] completed" in out


# -- public binds -------------------------------------------------------------------------------

def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("MURMUR_TOKEN", "MURMUR_CREDENTIALS"))}


def test_serving_a_public_address_without_a_credential_is_refused_unless_insecure(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue"})
    command = [sys.executable, "-m", "murmurd", "serve", str(capsule), "--state-dir", str(tmp_path / "state")]
    for host in ("0.0.0.0", "::"):
        refused = subprocess.run([*command, "--host", host], capture_output=True, text=True, cwd=ROOT,
                                 env=_clean_env(), timeout=60)
        assert refused.returncode == 2
        assert f"refusing to serve on {host}, which is not a loopback address, with no credential configured" in refused.stderr
        assert "--insecure" in refused.stderr
    assert not (tmp_path / "state").exists() and not (capsule / "workdir").exists()  # refused before anything
    with serving(capsule, tmp_path / "state", "--host", "0.0.0.0", "--insecure", env=_clean_env()) as insecure:
        port = insecure.url.rsplit(":", 1)[1].rstrip("/")
        assert insecure.url.startswith("http://0.0.0.0:")
        task = httpx.post(f"http://127.0.0.1:{port}/", json={"jsonrpc": "2.0", "id": 1, "method": "message/send",
                                                             "params": {"message": message("open door")}}, timeout=30)
        assert task.status_code == 200 and task.json()["result"]["id"].startswith("tsk_")
    (tmp_path / "token").write_text(OPS)
    with serving(capsule, tmp_path / "state2", "--host", "0.0.0.0", "--token-file", str(tmp_path / "token"),
                 env=_clean_env()) as secured:
        port = secured.url.rsplit(":", 1)[1].rstrip("/")
        assert httpx.post(f"http://127.0.0.1:{port}/", json={}, timeout=10).status_code == 401


@pytest.mark.parametrize("args, error", [
    (["--tls-cert", "x.pem"], "--tls-cert and --tls-key go together"),
    (["--token-file", "/nonexistent/token"], "cannot read token file /nonexistent/token"),
    (["--credentials", "/nonexistent/credentials.yaml"], "cannot read credentials file"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"], "cannot use --tls-cert /nonexistent/c.pem"),
])
def test_unusable_security_options_exit_2(tmp_path: Path, args: list[str], error: str) -> None:
    (tmp_path / "murmur.yaml").write_text("name: x\nversion: 1.0.0\n")
    refused = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path), *args], capture_output=True,
                             text=True, cwd=ROOT, env=_clean_env(), timeout=60)
    assert refused.returncode == 2 and error in refused.stderr


# -- the token presented to a peer ----------------------------------------------------------------

def test_outbound_message_send_presents_the_token_configured_for_that_peer(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    orchestrator_token = "orchestrator-token-" + "x" * 30
    worker_credentials = _credentials(tmp_path, f"  - {{name: orchestrator, origin: peer, trust: [operator], "
                                                f"token_sha256: {token_sha256(orchestrator_token)}}}")
    worker_capsule = chaos_capsule(tmp_path, "worker", lifecycle={"task_acceptance": "queue"})
    with serving(worker_capsule, tmp_path / "worker-state", "--credentials", str(worker_credentials),
                 env={**_clean_env(), "PARTNER_TOKEN_FOR_TEST": PARTNER}) as worker:
        port = worker.url.rsplit(":", 1)[1].rstrip("/")
        peers = tmp_path / "orchestrator-credentials.yaml"
        peers.write_text(f"peers:\n  - {{url: 'http://127.0.0.1:{port}', token_env: ORCH_TOKEN_FOR_TEST}}\n")
        allow = {"network": {"allow": [f"http://127.0.0.1:{port}", f"http://localhost:{port}"]}}
        orchestrator_dir = script_capsule(tmp_path, "orchestrator", artifacts.fixture("pull-capsule"), capabilities=allow)
        with serving(orchestrator_dir, tmp_path / "orch-state", "--credentials", str(peers),
                     env={**_clean_env(), "ORCH_TOKEN_FOR_TEST": orchestrator_token}) as orchestrator:
            reports = []
            for url in (worker.url, f"http://localhost:{port}/"):  # configured; the same daemon by another name
                task = orchestrator.send(json.dumps({"send": [url, "hello worker"]}))
                done = orchestrator.wait_state(task["id"], "completed", "failed")
                reports.append(json.loads(done["status"]["response"])["send"])
        peer_task_id = reports[0]["ok"][0]
        assert wait_state(worker, peer_task_id, "completed")["status"]["response"] == "answer: hello worker"
        events = worker.all_events()
        received = next(e for e in events if e["event_type"] == "a2a_task_received" and e["task_id"] == peer_task_id)
        start = next(e for e in events if e["event_type"] == "task_start" and e["task_id"] == peer_task_id)
        assert (start["origin"], start["trust"], received["principal"]) == ("peer", "operator", "orchestrator")
        assert "peer error -32030: Unauthenticated: a credential is required" in reports[1]["err"]


# -- reloading ----------------------------------------------------------------------------------

def _wait_line(served: Served, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        found = [line for line in served.stderr if text in line]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, "".join(served.stderr)
        time.sleep(0.05)


def test_sighup_reloads_the_credentials_and_a_bad_file_changes_nothing(tmp_path: Path, artifacts) -> None:
    import signal

    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    credentials = _credentials(tmp_path)
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue"})
    with serving(capsule, tmp_path / "state", "--credentials", str(credentials),
                 env={**_clean_env(), "PARTNER_TOKEN_FOR_TEST": PARTNER}) as served:
        get = {"id": "tsk_" + "0" * 32}
        assert rpc(served, "tasks/get", get, bearer(PARTNER)).json()["error"]["code"] == -32001  # let in
        credentials.write_text(credentials.read_text().replace("token_env: PARTNER_TOKEN_FOR_TEST}",
                                                               "token_env: PARTNER_TOKEN_FOR_TEST, revoked: true}"))
        served.proc.send_signal(signal.SIGHUP)
        _wait_line(served, "credentials reloaded: 5 credential(s), 0 peer token(s)")
        revoked = rpc(served, "tasks/get", get, bearer(PARTNER))
        assert revoked.status_code == 401 and "credential 'partner' is revoked" in revoked.json()["error"]["message"]
        credentials.write_text("credentials: [{name: broken}]\n")
        served.proc.send_signal(signal.SIGHUP)
        line = _wait_line(served, "credentials not reloaded")
        assert "credentials.0.origin" in line and OPS not in line
        assert rpc(served, "tasks/get", get, bearer(OPS)).json()["error"]["code"] == -32001  # still in force
        assert rpc(served, "tasks/get", get, bearer(PARTNER)).status_code == 401
