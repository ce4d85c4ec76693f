"""The edge's refusals as pure functions: deep nesting, lone surrogates, huge numbers, page tokens."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from murmurd.a2a.http import inbound

from murmurd.a2a.wire import jsonrpc
from murmurd.a2a.wire.v10 import MAX_PAGE_OFFSET, decode_page_token, encode_page_token


def nested(levels: int, leaf: Any = "x") -> Any:
    value = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


def refusal(params: Any) -> jsonrpc.JsonRpcError:
    with pytest.raises(jsonrpc.JsonRpcError) as caught:
        inbound.check_params(params)
    assert caught.value.code == jsonrpc.INVALID_PARAMS
    json.dumps(caught.value.to_json()).encode("utf-8")  # the refusal itself is always sendable
    caught.value.message.encode("utf-8")
    return caught.value


@pytest.mark.parametrize("params", [
    None, [], {}, {"message": {"parts": [{"text": "héllo \x00 ✓ 🙂"}], "metadata": nested(inbound.MAX_DEPTH - 2)}},
    nested(inbound.MAX_DEPTH),
    [1, 2.5, True, None, "ok"], {"n": 10**300},
])
def test_safe_params_pass(params: Any) -> None:
    inbound.check_params(params)


def test_nesting_past_the_limit_is_refused_naming_the_field() -> None:
    error = refusal({"message": {"metadata": nested(400)}})
    assert "params.message.metadata" in error.message and "nested deeper than 64" in error.message
    assert error.data["limit_depth"] == inbound.MAX_DEPTH and len(error.message) < 300
    refusal(nested(inbound.MAX_DEPTH + 1))
    refusal({"message": {"metadata": nested(inbound.MAX_DEPTH - 1)}})


@pytest.mark.parametrize(("params", "field"), [
    ({"message": {"messageId": "\ud800"}}, "params.message.messageId"),
    ({"message": {"parts": [{"text": "a\udfffb"}]}}, "params.message.parts[0].text"),
    ({"message": {"contextId": "\udbff"}}, "params.message.contextId"),
    ({"id": "tsk_\ud800"}, "params.id"),
    (["\ud800"], "params[0]"),
])
def test_lone_surrogates_are_refused_naming_the_field(params: Any, field: str) -> None:
    error = refusal(params)
    assert error.message.startswith(f"Invalid params: {field}:") and error.data["field"] == field


def test_a_lone_surrogate_member_name_is_refused_and_shown_escaped() -> None:
    error = refusal({"metadata": {"\ud800key": 1}})
    assert "params.metadata.\\ud800key" in error.message


@pytest.mark.parametrize("raw", [
    '{"jsonrpc": "2.0", "id": "\\ud800", "method": "tasks/get"}',
    '{"jsonrpc": "2.0", "id": "ok\\udc00", "method": "tasks/get"}',
])
def test_an_unencodable_id_is_an_invalid_request_answered_with_null(raw: str) -> None:
    [entry] = jsonrpc.parse_body(raw).entries
    assert isinstance(entry, jsonrpc.InvalidEntry) and entry.id is None
    assert entry.error.code == jsonrpc.INVALID_REQUEST and "id" in entry.error.message


def test_an_unencodable_method_is_an_invalid_request_echoing_the_id() -> None:
    [entry] = jsonrpc.parse_body('{"jsonrpc": "2.0", "id": 3, "method": "\\ud800"}').entries
    assert isinstance(entry, jsonrpc.InvalidEntry) and entry.id == 3 and "method" in entry.error.message


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400 + ".0"])
def test_a_number_too_large_for_a_float_is_a_parse_error(number: str) -> None:
    with pytest.raises(jsonrpc.JsonRpcError) as caught:
        jsonrpc.decode_json(f'{{"x": {number}}}')
    assert caught.value.code == jsonrpc.PARSE_ERROR


def test_an_integer_past_the_digit_limit_is_a_parse_error() -> None:
    with pytest.raises(jsonrpc.JsonRpcError) as caught:
        jsonrpc.decode_json('{"x": ' + "9" * 5000 + "}")
    assert caught.value.code == jsonrpc.PARSE_ERROR


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("token", [
    encode_page_token(2**63), encode_page_token(MAX_PAGE_OFFSET + 1), encode_page_token(10**40),
    _token("offset:" + "9" * 5000), _token("offset:-1"), _token("offset:١٢"), _token("offset:²"), _token("page:5"),
    "not base64!", "é", "\ud800",
])
def test_page_tokens_this_server_never_issued_are_invalid_params(token: str) -> None:
    with pytest.raises(jsonrpc.JsonRpcError) as caught:
        decode_page_token(token)
    assert caught.value.code == jsonrpc.INVALID_PARAMS


def test_issued_page_tokens_round_trip() -> None:
    for offset in (0, 50, MAX_PAGE_OFFSET):
        assert decode_page_token(encode_page_token(offset)) == offset


def test_an_answer_holding_a_lone_surrogate_is_sent_escaped_not_a_500() -> None:
    """The router's last line of defence, should unencodable text ever get past the edge."""
    from murmurd.a2a.http.server import _JSONResponse

    body = _JSONResponse({"jsonrpc": "2.0", "id": "\ud800", "result": "ok ✓"}).body
    assert json.loads(body) == {"jsonrpc": "2.0", "id": "\ud800", "result": "ok ✓"}
    assert _JSONResponse({"result": "ok ✓"}).body == '{"result":"ok ✓"}'.encode()
