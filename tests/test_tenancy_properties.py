"""A property over the authorization rules (issue 21, "How it is checked"), against real daemons:
for random credentials, tasks, contexts, retention settings and methods (get, list, cancel,
reply, resubscribe, stream, join), no answer ever carries a task or history the caller may not
read, and a task it may not read is answered exactly as an unknown one.

Every task's text holds a marker naming its creator; the capsule is threaded and its driver
answers with every text it was sent, so a context's history that reached the model is in the
answer. An operator reads everything; a peer's answers may hold only its own markers."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2akit import Served, serving
from authkit import bearer, token_sha256
from tenancykit import message, recorder_capsule

TOKENS = {"ops": "ops-token-" + "o" * 32, "peer-a": "peer-a-token-" + "a" * 32,
          "peer-b": "peer-b-token-" + "b" * 32, "peer-c": "peer-c-token-" + "c" * 32}
TRUST = {"peer-a": "[partner]", "peer-b": "[internal, partner]", "peer-c": "[partner]"}  # peer-c: peer-a's twin
MARKER = re.compile(r"MK[0-9a-f]{12}")
READS = ("get", "cancel", "reply", "resubscribe", "stream")


@pytest.fixture(scope="module")
def daemons(tmp_path_factory, artifacts) -> Iterator[list[Served]]:
    """Two daemons on one credentials file: finished tasks kept, and only the 2 newest kept."""
    artifacts.fixture("recorder-driver")
    root = tmp_path_factory.mktemp("tenancy-properties")
    creds = root / "credentials.yaml"
    lines = [f"  - {{name: ops, origin: operator, token_sha256: {token_sha256(TOKENS['ops'])}}}"]
    lines += [f"  - {{name: {name}, origin: peer, trust: {trust}, token_sha256: {token_sha256(TOKENS[name])}}}"
              for name, trust in TRUST.items()]
    creds.write_text("credentials:\n" + "\n".join(lines) + "\n")
    with serving(recorder_capsule(root / "keep", max_concurrent_tasks=4), root / "state-keep",
                 "--credentials", str(creds)) as keep, \
            serving(recorder_capsule(root / "prune", max_concurrent_tasks=4), root / "state-prune",
                    "--credentials", str(creds), "--retain-finished-count", "2") as prune:
        yield [keep, prune]


CREATORS: dict[str, str] = {}  # marker -> the credential whose task's text holds it (every example)

actors = st.sampled_from(sorted(TOKENS))
steps = st.lists(st.one_of(
    st.tuples(st.just("send"), actors, st.none()),
    st.tuples(st.just("join"), actors, st.integers(0, 7)),
    st.tuples(st.sampled_from(READS), actors, st.integers(0, 7)),
    st.tuples(st.just("list"), actors, st.none()),
), min_size=1, max_size=8)


def _rpc(url: str, method: str, params: Any, actor: str, version: str | None = None) -> str:
    headers = {**bearer(TOKENS[actor]), **({"a2a-version": version} if version else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(url, json=body, headers=headers, timeout=120).text  # SSE bodies end: finished tasks


def _call(served: Served, method: str, actor: str, task: dict | None) -> str:
    """The whole answer's text (a JSON-RPC answer, or an SSE stream's body)."""
    url = served.url
    if method in ("send", "join"):
        marker = "MK" + secrets.token_hex(6)
        CREATORS[marker] = actor
        extra = {"contextId": task["context"]} if task is not None else {}
        return _rpc(url, "message/send", {"message": message(f"note {marker}", **extra),
                                          "configuration": {"blocking": True}}, actor)
    if method == "list":
        return _rpc(url, "ListTasks", {"pageSize": 100, "historyLength": 20}, actor, version="1.0")
    assert task is not None
    if method == "get":
        return _rpc(url, "tasks/get", {"id": task["id"], "historyLength": 20}, actor)
    if method == "cancel":
        return _rpc(url, "tasks/cancel", {"id": task["id"]}, actor)
    if method == "reply":
        return _rpc(url, "message/send", {"message": message("a reply", taskId=task["id"]),
                                          "configuration": {"blocking": True}}, actor)
    if method == "resubscribe":
        return _rpc(url, "tasks/resubscribe", {"id": task["id"]}, actor)
    response = httpx.get(url + f"tasks/{task['id']}/stream", headers=bearer(TOKENS[actor]), timeout=120)
    return f"{response.status_code} {response.text}"


def _unknown_answer(served: Served, method: str, actor: str, task_id: str, answer: str) -> None:
    """What a caller may not read is answered as a task that never existed."""
    if method == "stream":
        assert answer.startswith("404 "), answer
        return
    error = json.loads(answer).get("error", {})
    assert error.get("code") == -32001 and error.get("data") == {"id": task_id}, (method, actor, answer)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.integers(0, 1), program=steps)
def test_no_answer_carries_what_its_caller_may_not_read(daemons: list[Served], where: int,
                                                        program: list[tuple[str, str, int | None]]) -> None:
    served = daemons[where]
    tasks: list[dict] = []  # what this example created: id, context, creator
    for method, actor, pick in program:
        task = tasks[pick % len(tasks)] if pick is not None and tasks else None
        if method != "send" and method != "list" and task is None:
            method, task = "send", None  # nothing to name yet
        answer = _call(served, method, actor, task)
        foreign = {m for m in MARKER.findall(answer) if CREATORS.get(m, actor) != actor}
        assert actor == "ops" or not foreign, (method, actor, task, answer)
        if method in READS and actor != "ops" and task["creator"] != actor:
            _unknown_answer(served, method, actor, task["id"], answer)
        if method in ("send", "join"):
            result = json.loads(answer).get("result")
            if result is not None:
                tasks.append({"id": result["id"], "context": result["contextId"], "creator": actor})
            else:  # refused: only ever a join into a context holding another credential's task
                assert method == "join" and json.loads(answer)["error"]["code"] == -32031, answer
