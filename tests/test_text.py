"""`murmurd.text`: guest text made valid Unicode, and JSON that always encodes."""

from __future__ import annotations

import json

from murmurd.text import json_text, valid_json_value, valid_text


def test_lone_surrogates_become_the_replacement_character_and_pairs_stay() -> None:
    assert valid_text("half \ud83d here") == "half \ufffd here"
    assert valid_text("\udfff\ud800") == "\ufffd\ufffd"
    emoji = json.loads('"\\ud83d\\ude00"')  # a whole pair, as json.loads joins it
    assert valid_text(emoji) == "\U0001f600"
    plain = "ordinary text ü"
    assert valid_text(plain) is plain


def test_every_string_of_a_json_value_is_made_valid() -> None:
    value = json.loads('{"a\\ud800": [1, "x\\udc00", {"b": "\\ud83d"}], "n": null, "t": true}')
    assert valid_json_value(value) == {"a\ufffd": [1, "x\ufffd", {"b": "\ufffd"}], "n": None, "t": True}


def test_json_text_escapes_only_what_cannot_be_encoded_and_round_trips() -> None:
    assert json_text({"t": "ü"}) == '{"t":"ü"}'
    broken = {"t": "ü \ud83d"}
    text = json_text(broken)
    text.encode("utf-8")  # never raises
    assert json.loads(text) == broken


def test_a_driver_response_with_half_an_emoji_pair_parses_valid() -> None:
    from murmurd.session.driver_protocol import parse_response

    raw = ('{"stop_reason": "tool_call", "content": [{"type": "text", "text": "a \\ud83d"},'
           ' {"type": "tool_call", "id": "c1", "name": "echo", "input": {"text": "\\udc00 b"}}]}')
    response = parse_response(raw)
    assert response.text == "a \ufffd"
    assert response.tool_calls[0]["input"] == {"text": "\ufffd b"}


def test_a_json_answer_holding_a_lone_surrogate_renders_escaped_not_a_500() -> None:
    from murmurd.a2a.http.server import _JSONResponse

    body = _JSONResponse({"result": {"text": "half \ud83d", "ok": "ü"}}).body
    assert json.loads(body) == {"result": {"text": "half \ud83d", "ok": "ü"}}


def test_an_sse_frame_holding_a_lone_surrogate_encodes() -> None:
    from murmurd.a2a.core.stream import StreamEvent, sse_frame

    frame = sse_frame(StreamEvent(1, "text", "t", {"text": "half \ud83d"}))
    frame["data"].encode("utf-8")
    assert json.loads(frame["data"]) == {"text": "half \ud83d"}
