"""Header smuggling at the HTTP edge, through a real `murmurd serve` with bearer tokens: a request
carrying two `Authorization` headers, or two `x-murmur-task-origin` / `x-murmur-task-trust`
headers, is ambiguous (a proxy that appends its own header would otherwise be overridden by the
client's, or the other way round) and is refused before any route runs; nothing is recorded."""

from __future__ import annotations

import time

import httpx
import pytest

from authkit import token_sha256
from a2akit import Served, serving
from browserkit import scripted_capsule

OPS = "ops-token-" + "o" * 32
PEER = "peer-token-" + "p" * 32



@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts):
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")
    root = tmp_path_factory.mktemp("headers")
    creds = root / "credentials.yaml"
    creds.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_sha256: {token_sha256(OPS)}}}
  - {{name: partner, origin: peer, trust: [partner, internal], token_sha256: {token_sha256(PEER)}}}
""")
    with serving(scripted_capsule(root), root / "state", "--credentials", str(creds)) as daemon:
        yield daemon


def send(served: Served, headers: list[tuple[str, str]]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"messageId": f"m{time.monotonic_ns()}", "role": "user",
                                   "parts": [{"text": "say hello"}]}}}
    return httpx.post(served.url, json=body, headers=headers, timeout=30)


def count(served: Served) -> int:
    answer = httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                        headers={"authorization": f"Bearer {OPS}", "a2a-version": "1.0"}, timeout=30).json()
    return int(answer["result"]["totalSize"])


@pytest.mark.parametrize("headers", [
    [("authorization", f"Bearer {OPS}"), ("authorization", "Bearer " + "j" * 40)],
    [("authorization", "Bearer " + "j" * 40), ("Authorization", f"Bearer {OPS}")],
    [("authorization", f"Bearer {OPS}"), ("AUTHORIZATION", f"Bearer {OPS}")],
])
def test_two_authorization_headers_are_refused(served: Served, headers: list[tuple[str, str]]) -> None:
    before = count(served)
    response = send(served, headers)
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == -32030 and "more than one Authorization header" in error["message"]
    assert OPS not in response.text
    assert count(served) == before


@pytest.mark.parametrize("name", ["x-murmur-task-trust", "x-murmur-task-origin"])
def test_two_origin_or_trust_headers_are_refused(served: Served, name: str) -> None:
    before = count(served)
    values = ("partner", "untrusted") if name.endswith("trust") else ("peer", "peer")
    response = send(served, [("authorization", f"Bearer {PEER}"), (name, values[0]), (name.upper(), values[1])])
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == -32031 and f"more than one {name} header" in error["message"]
    assert count(served) == before


def test_one_of_each_still_works(served: Served) -> None:
    response = send(served, [("Authorization", f"bearer   {PEER}"), ("X-Murmur-Task-Trust", "internal")])
    assert response.status_code == 200, response.text
    assert response.json()["result"]["id"].startswith("tsk_")
