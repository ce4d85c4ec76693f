"""Property-based tests of the edge: any JSON value in any param of any method of any dialect
(hostile text, huge numbers, deep nesting included) never yields a 500 or -32603, never leaves a
task half-recorded or unrenderable, and never stops the session worker.

The real ASGI app (`create_app`) runs over a real `CapsuleDaemon` serving a real staged capsule
with a real SQLite store, on an event loop in a background thread; each example is one raw
ASGI request, so streams are seen up to their first bytes and then abandoned like a client would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2akit import chaos_capsule
from murmurd.a2a import wire
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.http.server import ServerConfig, create_app
from murmurd.a2a.stores.base import Retention
from murmurd.a2a.stores.sqlite import SqliteTaskStore
from murmurd.a2a.core.stream import EventLog
from murmurd.a2a.wire import METHOD_TABLE, Dialect
from murmurd.staging.stage import stage_capsule

T = TypeVar("T")
REQUEST_SECONDS = 30.0
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class LoopThread:
    """An event loop on its own thread, so the daemon outlives each (synchronous) example."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="edge-properties-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def cancel_the_rest() -> None:  # e.g. sse-starlette's shutdown watcher
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(cancel_the_rest(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Answer:
    status: int | None
    headers: dict[bytes, bytes]
    body: bytes
    crashed: BaseException | None

    @property
    def is_stream(self) -> bool:
        return self.headers.get(b"content-type", b"").startswith(b"text/event-stream")


async def asgi_post(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
    """One POST / through the ASGI app; a stream is read up to its response start, then the client
    goes away (as a disconnect)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        "client": ("127.0.0.1", 40000), "server": ("test", 80),
    }
    delivered, gone, finished = False, asyncio.Event(), asyncio.Event()
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            if dict(message.get("headers", [])).get(b"content-type", b"").startswith(b"text/event-stream"):
                finished.set()
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                finished.set()

    app_task = asyncio.create_task(app(scope, receive, send))
    waiter = asyncio.create_task(finished.wait())
    await asyncio.wait({app_task, waiter}, timeout=REQUEST_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    gone.set()
    waiter.cancel()
    done, _ = await asyncio.wait({app_task}, timeout=5)
    if not done:
        app_task.cancel()
        await asyncio.gather(app_task, return_exceptions=True)
    crashed = app_task.exception() if done and not app_task.cancelled() else None
    if not start and crashed is None:
        crashed = TimeoutError(f"no response within {REQUEST_SECONDS} s")
    return Answer(start.get("status"), dict(start.get("headers", [])), b"".join(chunks), crashed)


@dataclass
class Edge:
    runner: LoopThread
    daemon: CapsuleDaemon
    app: Any
    known_ids: list[str]

    def post(self, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
        return self.runner.run(asgi_post(self.app, body, headers or []), timeout=REQUEST_SECONDS + 15)

    def rpc(self, method: str, params: Any) -> dict[str, Any]:
        answer = self.post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode())
        return json.loads(answer.body)


@pytest.fixture(scope="module")
def edge(tmp_path_factory, artifacts, host) -> Iterator[Edge]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("edge-properties")
    staged = stage_capsule(chaos_capsule(root), host=host)
    runner = LoopThread()

    async def build() -> tuple[CapsuleDaemon, Any]:
        store = await SqliteTaskStore.open(root / "state" / "tasks.sqlite3", Retention(max_age_secs=None, max_count=40))
        policy = LifecyclePolicy(task_acceptance="single", after_task="sleep", input_timeout_secs=5.0)
        daemon = CapsuleDaemon(staged, host, store, policy=policy, log=EventLog(256))
        await daemon.start()
        return daemon, create_app(daemon, ServerConfig(url="http://test/", max_body_bytes=512 * 1024, max_batch=8))

    daemon, app = runner.run(build())
    edge = Edge(runner, daemon, app, [])
    warm = edge.rpc("message/send", {"message": {"parts": [{"text": "warm up"}]}, "configuration": {"blocking": True}})
    edge.known_ids.append(warm["result"]["id"])
    try:
        yield edge
    finally:
        runner.run(daemon.stop(1.0))
        runner.close()


# --- strategies --------------------------------------------------------------------------------

SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff"]
HOSTILE_STRINGS = ["", " ", "\x00", "a\x00b", "\u2028", "١٢", "²", "\ufeff", "tasks/", "9" * 30,
                   "ROLE_USER", "TASK_STATE_COMPLETED", "input-required", "offset:1", "b2Zmc2V0Ojk5OTk5OTk5OTk5OTk5OTk5OTk5OQ"]


def nested(levels: int, leaf: Any) -> Any:
    value = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(HOSTILE_STRINGS),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), st.sampled_from(SURROGATES), st.text(max_size=4)),
)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 2**63 - 1, -(2**63) - 1, 2**64, 10**300]),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=12,
)
deep_values = st.builds(nested, st.integers(40, 300), scalars)
hostile_values = st.one_of(json_values, deep_values)


def base_params(method: str, task_id: str) -> dict[str, Any]:
    """A valid params object for the method, in its dialect's shape."""
    dialect, operation = METHOD_TABLE.get(method, (Dialect.UPSTREAM, None))
    if operation is None or operation.name == "WATCH":
        return {}
    if operation.name == "LIST":
        return {"pageSize": 5, "pageToken": "", "contextId": "ctx_x", "status": "TASK_STATE_COMPLETED"}
    if operation.name in ("SEND", "STREAM"):
        if dialect is Dialect.V02:
            return {"id": task_id, "sessionId": "ctx_prop", "message": {"role": "user", "parts": [
                {"type": "text", "text": "hi"}]}, "metadata": {}}
        if dialect is Dialect.V10:
            return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                                "metadata": {"a": 1}}, "configuration": {"returnImmediately": True}}
        return {"message": {"kind": "message", "messageId": "m1", "role": "user",
                            "parts": [{"kind": "text", "text": "hi"}], "metadata": {}},
                "configuration": {"blocking": False}}
    return {"id": task_id, "historyLength": 1}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


@st.composite
def params_for(draw: st.DrawFn, method: str, task_ids: list[str]) -> Any:
    slot = draw(st.integers(0, 63))  # drawn whatever `task_ids` holds, so generation stays replayable
    params: Any = base_params(method, task_ids[slot % len(task_ids)] if task_ids else "tsk_none")
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["replace", "add", "whole"]))
        if how == "whole":
            params = draw(hostile_values)
        elif how == "add" and isinstance(params, dict | list):
            path = draw(st.sampled_from([p for p in _paths(params)]))
            target: Any = params
            for key in path:
                target = target[key]
            if isinstance(target, dict):
                params = _replace(params, path, {**target, draw(texts): draw(hostile_values)})
        else:
            params = _replace(params, draw(st.sampled_from(_paths(params))), draw(hostile_values))
    return params


METHODS = sorted(METHOD_TABLE)
methods = st.one_of(st.sampled_from(METHODS), texts)
request_ids = st.one_of(st.integers(-(2**70), 2**70), texts, st.none(), st.floats(allow_nan=False), st.booleans())
header_values = st.sampled_from([b"\xb2", b"9" * 4301, b"1" * 19, b"-1", b"\xd9\xa1", b"0", b" 7 ", b"abc"])


@st.composite
def entries(draw: st.DrawFn, task_ids: list[str]) -> Any:
    method = draw(methods)
    entry: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": draw(params_for(method, task_ids))}
    if draw(st.integers(0, 5)):  # now and then a notification
        entry["id"] = draw(request_ids)
    if draw(st.integers(0, 9)) == 0:
        entry = draw(st.sampled_from([{**entry, "jsonrpc": draw(scalars)}, draw(hostile_values)]))
    return entry


@st.composite
def bodies(draw: st.DrawFn, task_ids: list[str]) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    if draw(st.integers(0, 4)) == 0:
        payload: Any = draw(st.lists(entries(task_ids), min_size=1, max_size=10))
    else:
        payload = draw(entries(task_ids))
    headers: list[tuple[bytes, bytes]] = []
    version = draw(st.sampled_from([None, b"0.3", b"1.0", b"0.2", b"\xb2"]))
    if version is not None:
        headers.append((b"a2a-version", version))
    if draw(st.booleans()):
        headers.append((b"last-event-id", draw(header_values)))
    return json.dumps(payload).encode("ascii"), headers  # ensure_ascii: surrogates travel as \\udXXX escapes


# --- the invariants ----------------------------------------------------------------------------

def assert_answered_without_fault(answer: Answer) -> None:
    assert answer.crashed is None, repr(answer.crashed)
    assert answer.status in (200, 204, 413), (answer.status, answer.body[:500])
    if answer.is_stream or answer.status == 204:
        return
    payload = json.loads(answer.body)
    for response in payload if isinstance(payload, list) else [payload]:
        assert response.get("error", {}).get("code") != -32603, response


async def daemon_is_whole(daemon: CapsuleDaemon) -> None:
    """The worker runs; every live task is stored; every stored task renders in every dialect."""
    worker = daemon._background[0]
    assert not worker.done(), worker
    for task_id in list(daemon._records):
        assert await daemon.store.get(task_id) is not None, f"{task_id} is live but not stored"
    assert all(r.id in daemon._records for r in daemon._queue)
    records = await daemon.store.list(limit=1000)
    for dialect in Dialect:
        for record in records:
            json.dumps(wire.render_task(dialect, record), allow_nan=False).encode("utf-8")
    json.dumps(wire.render_list(Dialect.V10, records), allow_nan=False).encode("utf-8")


def test_the_edge_is_served_in_process(edge: Edge) -> None:
    """The harness itself: a known task is found, a deep one refused (so the properties can fail)."""
    got = edge.rpc("GetTask", {"id": edge.known_ids[0]})
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    deep = edge.rpc("SendMessage", {"message": {"messageId": "d", "role": "ROLE_USER", "parts": [{"text": "x"}],
                                                "metadata": nested(400, 1)}})
    assert deep["error"]["code"] == -32602


@SETTINGS
@given(data=st.data())
def test_any_request_is_answered_without_a_fault(edge: Edge, data: st.DataObject) -> None:
    body, headers = data.draw(bodies(edge.known_ids))
    answer = edge.post(body, headers)
    assert_answered_without_fault(answer)
    edge.runner.run(daemon_is_whole(edge.daemon))
    if answer.status == 200 and not answer.is_stream:
        payload = json.loads(answer.body)
        for response in payload if isinstance(payload, list) else [payload]:
            result = response.get("result") if isinstance(response, dict) else None
            task = result.get("task", result) if isinstance(result, dict) else None
            if isinstance(task, dict) and isinstance(task.get("id"), str) and len(edge.known_ids) < 50:
                edge.known_ids.append(task["id"])


@SETTINGS
@given(field=st.sampled_from(["messageId", "contextId", "taskId", "text", "metadata"]),
       surrogate=st.sampled_from(SURROGATES), method=st.sampled_from(["message/send", "SendMessage", "tasks/send",
                                                                        "message/stream", "SendStreamingMessage"]))
def test_a_lone_surrogate_anywhere_in_a_new_message_is_refused_before_anything_is_recorded(
        edge: Edge, field: str, surrogate: str, method: str) -> None:
    params = base_params(method, "tsk_" + "a" * 32)
    message = params["message"]
    if field == "text":
        message["parts"][0]["text"] = "x" + surrogate
    elif field == "metadata":
        message["metadata"] = {surrogate: 1}
    else:
        message[field] = surrogate
    before = edge.runner.run(edge.daemon.store.list(limit=1000))
    answer = edge.post(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode())
    assert answer.status == 200 and not answer.is_stream
    error = json.loads(answer.body)["error"]
    assert error["code"] == -32602 and field in error["message"]
    after = edge.runner.run(edge.daemon.store.list(limit=1000))
    assert {r.id for r in after} <= {r.id for r in before}  # nothing new recorded
    edge.runner.run(daemon_is_whole(edge.daemon))


def test_the_worker_still_runs_an_ordinary_task(edge: Edge) -> None:
    done = edge.rpc("message/send", {"message": {"parts": [{"text": "ordinary"}]}, "configuration": {"blocking": True}})
    assert done["result"]["status"]["state"] == "completed", done
    assert done["result"]["status"]["response"] == "answer: ordinary"
