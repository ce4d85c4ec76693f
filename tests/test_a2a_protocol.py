"""The A2A surface against a real `murmurd serve` on loopback: card, JSON-RPC, dialects, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from a2akit import Served, chaos_capsule, serving

TASK_ID = re.compile(r"^tsk_[0-9a-f]{32}$")
CONTEXT_ID = re.compile(r"^ctx_[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Served:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("protocol")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 100})
    with serving(capsule, root / "state", "--max-body-bytes", "65536") as running:
        yield running


def test_the_agent_card_serves_upstream_and_standard_fields(served: Served) -> None:
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        card = httpx.get(served.url.rstrip("/") + path).json()
        assert (card["name"], card["version"], card["url"]) == ("chaos", "1.0.0", served.url)
        assert card["capabilities"]["streaming"] is True
        assert sorted(card["capabilities"]["tools"]) == ["ask", "echo"]
        assert card["capabilities"]["shell"] is False and card["capabilities"]["network"] is False
        assert card["defaultInputModes"] == ["text/plain"]
        assert {s["name"] for s in card["skills"]} >= {"ask", "echo"}
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0", "0.3"}


def test_message_send_returns_the_minimal_upstream_task(served: Served) -> None:
    task = served.send("hello")
    assert set(task) == {"id", "contextId", "status"}
    assert TASK_ID.match(task["id"]) and CONTEXT_ID.match(task["contextId"])
    done = served.wait_state(task["id"], "completed")
    assert done["status"]["response"] == "answer: hello"
    assert done["artifacts"] == [{"name": "result", "parts": [{"text": "answer: hello"}]}]


def test_a_given_context_id_is_kept(served: Served) -> None:
    task = served.send("hi", contextId="ctx_mine")
    assert task["contextId"] == "ctx_mine"


def test_non_text_parts_are_preserved_and_text_parts_joined(served: Served) -> None:
    parts = [{"text": "hello "}, {"data": {"answer": 42}}, {"text": "world"}]
    task = served.send("", parts=parts)
    assert served.wait_state(task["id"], "completed")["status"]["response"] == "answer: hello world"
    got = served.rpc("GetTask", {"id": task["id"], "historyLength": 10})["result"]
    first = got["history"][0]["parts"]
    assert {"text": "hello "} in first and any(p.get("data") == {"answer": 42} for p in first)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (b"42", -32600),
        (b"[]", -32600),
        (json.dumps({"jsonrpc": "1.0", "id": 1, "method": "tasks/get"}).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": 7}).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/explode"}).encode(), -32601),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}).encode(), -32602),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "tsk_nope"}}).encode(), -32001),
    ],
)
def test_json_rpc_errors(served: Served, body: bytes, code: int) -> None:
    response = served.post(None, raw=body)
    assert response.status_code == 200
    payload = response.json()
    if isinstance(payload, list):
        (payload,) = payload
    assert payload["error"]["code"] == code, payload
    assert payload["jsonrpc"] == "2.0"


def test_cancel_of_a_finished_task_is_not_cancelable(served: Served) -> None:
    task = served.send("quick")
    served.wait_state(task["id"], "completed")
    error = served.rpc("tasks/cancel", {"id": task["id"]})["error"]
    assert error["code"] == -32002 and "completed" in error["message"]


def test_batches_answer_every_request_in_order(served: Served) -> None:
    body = [
        {"jsonrpc": "2.0", "id": "a", "method": "message/send",
         "params": {"message": {"messageId": "b1", "role": "user", "parts": [{"text": "batched"}]}}},
        {"jsonrpc": "2.0", "id": "b", "method": "tasks/get", "params": {"id": "tsk_unknown"}},
        {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "tsk_notification"}},
        {"jsonrpc": "2.0", "id": "c", "method": "no/such"},
        {"jsonrpc": "2.0", "id": "d", "method": "message/stream", "params": {}},
    ]
    replies = served.post(body).json()
    assert [r["id"] for r in replies] == ["a", "b", "c", "d"]
    assert replies[0]["result"]["status"]["state"] in ("submitted", "working", "completed")
    assert [r["error"]["code"] for r in replies[1:]] == [-32001, -32601, -32600]


def test_a_notification_gets_no_body(served: Served) -> None:
    response = served.post({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "tsk_x"}})
    assert response.status_code == 204 and response.content == b""


def test_an_oversized_body_is_refused_with_a_clear_error(served: Served) -> None:
    big = {"jsonrpc": "2.0", "id": 9, "method": "message/send",
           "params": {"message": {"messageId": "big", "role": "user", "parts": [{"text": "x" * 100_000}]}}}
    response = served.post(big)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == -32600 and "65536" in error["message"] and error["data"] == {"limit_bytes": 65536}
    assert served.send("still alive")["status"]["state"] in ("submitted", "working", "completed")


def test_a2a_0_2_tasks_send_uses_the_client_task_id(served: Served) -> None:
    params = {"id": "client-chosen-1", "sessionId": "sess-1",
              "message": {"role": "user", "parts": [{"type": "text", "text": "old dialect"}]}}
    result = served.rpc("tasks/send", params)["result"]
    assert result["id"] == "client-chosen-1" and result["sessionId"] == "sess-1"
    assert result["status"]["state"] == "completed"
    assert "answer: old dialect" in json.dumps(result)


def test_a2a_0_2_send_subscribe_streams_json_rpc_events(served: Served) -> None:
    params = {"id": "client-chosen-2", "message": {"role": "user", "parts": [{"type": "text", "text": "stream old"}]}}
    frames = served.events("tasks/sendSubscribe", params)
    results = [data["result"] for _id, _event, data in frames]
    assert all(data["jsonrpc"] == "2.0" and data["id"] == 1 for _i, _e, data in frames)
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True


def test_message_stream_frames_are_ordered_and_close_on_final(served: Served) -> None:
    msg = {"messageId": "s1", "role": "user", "parts": [{"text": "streaming"}]}
    frames = served.events("message/stream", {"message": msg})
    ids = [int(i) for i, _e, _d in frames]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    kinds = [(e, d.get("status", {}).get("state")) for _i, e, d in frames]
    assert kinds[0] == ("status", "submitted") and ("status", "working") in kinds
    assert kinds[-1] == ("status", "completed") and frames[-1][2]["final"] is True
    texts = [d for _i, e, d in frames if e == "text"]
    assert texts[-1]["final"] is True and texts[-1]["text"] == "answer: streaming"
    assert frames[-1][2]["status"]["response"] == "answer: streaming"


def test_the_task_acceptance_none_capsule_answers_method_not_found(tmp_path: Path, artifacts) -> None:
    capsule = chaos_capsule(tmp_path)
    # `none` runs only its launch task (then exits): keep one running while A2A is refused
    with serving(capsule, tmp_path / "state", "--task-acceptance", "none", "--task", "mode:hang", "--grace", "1") as served:
        error = served.rpc("message/send", {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}})
        assert error["error"]["code"] == -32601
        assert served.rpc("tasks/get", {"id": "tsk_x"})["error"]["code"] == -32001
        assert served.stop() == 0


JUNK_PARAMS = [None, [], ["x"], "text", 7, True, {"message": None}, {"message": "hi"}, {"message": {"parts": "x"}},
               {"message": {"parts": [None]}}, {"message": {"parts": [{"text": 5}]}}, {"id": None}, {"id": ["a"]},
               {"id": {"nested": 1}}, {"pageSize": -1}, {"historyLength": "lots"}, {"message": {"parts": [{}]}},
               {"message": {"role": "robot", "parts": [{"text": "x"}]}}, {"configuration": "blocking"}]


def test_no_params_of_any_shape_get_a_500_or_stop_the_daemon(served: Served) -> None:
    from murmurd.a2a.wire import METHOD_TABLE

    with httpx.Client(timeout=10) as client:
        for method in sorted(METHOD_TABLE):
            for params in JUNK_PARAMS:
                body = {"jsonrpc": "2.0", "id": 1, "method": method}
                if params is not None:
                    body["params"] = params
                with client.stream("POST", served.url, json=body) as response:
                    assert response.status_code in (200, 204), (method, params)
                    kind = response.headers.get("content-type", "")
                    if kind.startswith("text/event-stream"):
                        continue  # a stream opened (stream/watch takes no params): close it
                    payload = json.loads(response.read() or b"{}")
                    assert response.status_code == 204 or "error" in payload or "result" in payload, (method, params)
                    assert payload.get("error", {}).get("code") != -32603, (method, params, payload)  # no bugs
    assert served.send("still here")["status"]["state"] in ("submitted", "working", "completed")
