"""JSON-RPC 2.0 framing: parsing, error codes, notifications and batches (runtime-notes §6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from murmurd.a2a.wire import jsonrpc
from murmurd.a2a.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_LIMIT,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    InvalidEntry,
    JsonRpcError,
    JsonRpcRequest,
    encoded_size,
    error_response,
    handle_body,
    parse_body,
    result_response,
)

pytestmark = pytest.mark.anyio


async def echo(request: JsonRpcRequest) -> dict[str, Any]:
    if request.method == "boom":
        raise RuntimeError("secret internals")
    if request.method == "missing":
        raise JsonRpcError.task_not_found("tsk_x")
    return result_response(request.id, {"method": request.method, "params": request.params})


def body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_error_codes_match_the_notes_and_a2a() -> None:
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700, -32600, -32601, -32602, -32603)
    assert (TASK_NOT_FOUND, TASK_NOT_CANCELABLE) == (-32001, -32002)
    assert JsonRpcError.task_not_found("t").code == -32001
    assert JsonRpcError.task_not_cancelable("t", "completed").data == {"id": "t", "state": "completed"}
    assert JsonRpcError.method_not_found("x").code == -32601
    assert JsonRpcError.invalid_params("x").code == -32602


def test_request_too_large_is_an_invalid_request_with_the_limit() -> None:
    error = JsonRpcError.request_too_large(1_048_576)
    assert error_response(None, error) == {
        "jsonrpc": "2.0", "id": None,
        "error": {"code": -32600, "message": "Invalid request: body exceeds 1048576 bytes",
                  "data": {"limit_bytes": 1_048_576}},
    }


def test_responses_have_the_2_0_envelope() -> None:
    assert result_response(7, {"a": 1}) == {"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}
    assert error_response("x", JsonRpcError(-32601, "nope")) == {
        "jsonrpc": "2.0", "id": "x", "error": {"code": -32601, "message": "nope"}}


def test_single_request_parses() -> None:
    parsed = parse_body(body({"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "t"}, "id": 1}))
    assert not parsed.is_batch
    (request,) = parsed.entries
    assert isinstance(request, JsonRpcRequest)
    assert (request.method, request.params, request.id, request.is_notification) == ("tasks/get", {"id": "t"}, 1, False)


@pytest.mark.parametrize("params", [None, {"a": 1}, [1, 2]])
def test_params_may_be_absent_object_or_array(params: Any) -> None:
    raw: dict[str, Any] = {"jsonrpc": "2.0", "method": "m", "id": "a"}
    if params is not None:
        raw["params"] = params
    (request,) = parse_body(body(raw)).entries
    assert isinstance(request, JsonRpcRequest) and request.params == params


def test_null_id_is_a_request_absent_id_is_a_notification() -> None:
    (with_null,) = parse_body(body({"jsonrpc": "2.0", "method": "m", "id": None})).entries
    (without,) = parse_body(body({"jsonrpc": "2.0", "method": "m"})).entries
    assert isinstance(with_null, JsonRpcRequest) and not with_null.is_notification
    assert isinstance(without, JsonRpcRequest) and without.is_notification


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe", b"[1,", b'{"a": NaN}', b"[" * 100_000,
                                 b"1" * 5000, b""])
async def test_invalid_json_is_a_parse_error_with_null_id(raw: bytes) -> None:
    with pytest.raises(JsonRpcError) as caught:
        parse_body(raw)
    assert caught.value.code == PARSE_ERROR
    response = await handle_body(raw, echo)
    assert isinstance(response, dict)
    assert response["id"] is None and response["error"]["code"] == PARSE_ERROR


@pytest.mark.parametrize("raw", [b"1", b'"str"', b"null", b"true"])
async def test_a_body_that_is_not_object_or_array_is_invalid(raw: bytes) -> None:
    response = await handle_body(raw, echo)
    assert isinstance(response, dict)
    assert response["id"] is None and response["error"]["code"] == INVALID_REQUEST


async def test_empty_batch_is_invalid() -> None:
    response = await handle_body(b"[]", echo)
    assert isinstance(response, dict)
    assert response == {"jsonrpc": "2.0", "id": None,
                        "error": {"code": -32600, "message": "Invalid request: empty batch"}}


async def test_batch_size_cap() -> None:
    entries = [{"jsonrpc": "2.0", "method": "m", "id": i} for i in range(3)]
    response = await handle_body(body(entries), echo, max_batch=2)
    assert isinstance(response, dict) and response["error"]["code"] == INVALID_REQUEST
    assert response["error"]["data"] == {"limit_requests": 2}


@pytest.mark.parametrize(("raw", "echoed_id"), [
    ({"jsonrpc": "1.0", "method": "m", "id": 1}, 1),
    ({"method": "m", "id": "a"}, "a"),
    ({"jsonrpc": 2.0, "method": "m", "id": 3}, 3),
    ({"jsonrpc": "2.0", "method": 5, "id": 4}, 4),
    ({"jsonrpc": "2.0", "id": 5}, 5),
    ({"jsonrpc": "2.0", "method": "m", "params": "x", "id": 6}, 6),
    ({"jsonrpc": "2.0", "method": "m", "params": 3, "id": 7}, 7),
    ({"jsonrpc": "2.0", "method": "m", "id": {"x": 1}}, None),
    ({"jsonrpc": "2.0", "method": "m", "id": 1.5}, None),
    ({"jsonrpc": "2.0", "method": "m", "id": True}, None),
])
async def test_invalid_request_objects(raw: dict[str, Any], echoed_id: Any) -> None:
    (entry,) = parse_body(body(raw)).entries
    assert isinstance(entry, InvalidEntry)
    response = await handle_body(body(raw), echo)
    assert isinstance(response, dict)
    assert response["error"]["code"] == INVALID_REQUEST
    assert response["id"] == echoed_id


async def test_handler_result_and_errors() -> None:
    ok = await handle_body(body({"jsonrpc": "2.0", "method": "m", "params": {"a": 1}, "id": 1}), echo)
    assert ok == {"jsonrpc": "2.0", "id": 1, "result": {"method": "m", "params": {"a": 1}}}
    missing = await handle_body(body({"jsonrpc": "2.0", "method": "missing", "id": 2}), echo)
    assert isinstance(missing, dict) and missing["error"]["code"] == TASK_NOT_FOUND and missing["id"] == 2


async def test_a_handler_crash_is_an_internal_error_without_details() -> None:
    response = await handle_body(body({"jsonrpc": "2.0", "method": "boom", "id": 9}), echo)
    assert isinstance(response, dict)
    assert response["id"] == 9 and response["error"]["code"] == INTERNAL_ERROR
    assert "secret" not in json.dumps(response)


async def test_notification_runs_but_gets_no_response() -> None:
    seen: list[str] = []

    async def record(request: JsonRpcRequest) -> dict[str, Any]:
        seen.append(request.method)
        return result_response(request.id, "ignored")

    assert await handle_body(body({"jsonrpc": "2.0", "method": "note"}), record) is None
    assert await handle_body(body({"jsonrpc": "2.0", "method": "boom"}), echo) is None  # errors too
    assert seen == ["note"]


async def test_batch_mixes_results_errors_and_notifications_in_order() -> None:
    entries = [
        {"jsonrpc": "2.0", "method": "a", "id": 1},
        {"jsonrpc": "2.0", "method": "notify"},
        {"jsonrpc": "2.0", "method": "missing", "id": 2},
        {"foo": "bar"},
        5,
        {"jsonrpc": "2.0", "method": "boom", "id": "z"},
    ]
    response = await handle_body(body(entries), echo)
    assert isinstance(response, list)
    assert [(r["id"], r.get("error", {}).get("code")) for r in response] == [
        (1, None), (2, TASK_NOT_FOUND), (None, INVALID_REQUEST), (None, INVALID_REQUEST), ("z", INTERNAL_ERROR)]


async def test_batch_of_one_is_still_a_list() -> None:
    response = await handle_body(body([{"jsonrpc": "2.0", "method": "a", "id": 1}]), echo)
    assert isinstance(response, list) and len(response) == 1


async def test_all_notification_batch_has_no_body() -> None:
    entries = [{"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"}]
    assert await handle_body(body(entries), echo) is None


async def test_run_accepts_a_handler_returning_none() -> None:
    async def silent(request: JsonRpcRequest) -> None:
        return None

    parsed = parse_body(body({"jsonrpc": "2.0", "method": "a", "id": 1}))
    assert await jsonrpc.run(parsed, silent) is None


async def test_str_bodies_work_too() -> None:
    response = await handle_body('{"jsonrpc": "2.0", "method": "a", "id": 1}', echo)
    assert isinstance(response, dict) and response["result"]["method"] == "a"


async def test_a_batch_answer_stops_at_the_response_cap() -> None:
    ran: list[int] = []

    async def big(request: JsonRpcRequest) -> dict[str, Any]:
        ran.append(request.id)
        return result_response(request.id, "x" * 1000)

    entries = [{"jsonrpc": "2.0", "method": "get", "id": i} for i in range(10)]
    entries.insert(5, {"jsonrpc": "2.0", "method": "notify"})
    response = await handle_body(body(entries), big, max_response_bytes=3500)
    assert isinstance(response, list) and [r["id"] for r in response] == list(range(10))
    assert [r["result"] for r in response[:3]] == ["x" * 1000] * 3
    assert response[3]["error"]["code"] == SERVER_LIMIT
    assert response[3]["error"]["data"] == {"limit_response_bytes": 3500, "carried_out": True}
    assert all(r["error"]["data"] == {"limit_response_bytes": 3500, "carried_out": False} for r in response[4:])
    assert ran == [0, 1, 2, 3]  # nothing past the cap is run, the notification included
    assert sum(encoded_size(r) for r in response[:3]) <= 3500


async def test_the_first_answer_of_a_batch_is_whole_whatever_its_size() -> None:
    async def huge(request: JsonRpcRequest) -> dict[str, Any]:
        return result_response(request.id, "y" * 5000)

    entries = [{"jsonrpc": "2.0", "method": "get", "id": i} for i in range(2)]
    response = await handle_body(body(entries), huge, max_response_bytes=100)
    assert isinstance(response, list)
    assert response[0]["result"] == "y" * 5000
    assert response[1]["error"]["data"]["carried_out"] is True
    single = await handle_body(body(entries[0]), huge, max_response_bytes=100)  # a lone request is not capped
    assert isinstance(single, dict) and single["result"] == "y" * 5000


def test_an_answer_holding_a_lone_surrogate_has_a_size() -> None:
    assert encoded_size(result_response(1, "a\ud800b")) == len(b'{"jsonrpc":"2.0","id":1,"result":"a\\ud800b"}')
