"""The hand-written driver `bench/throughput.py --driver wat` runs (tests/fixtures/echo-driver.wat).

It stands for a driver that starts as upstream's Rust-built ones do, so the bench can tell the
host's cost per task from a componentize-py guest's start. It must answer the request murmurd's
session builds (`driver_protocol.build_request`, serialized with `json.dumps`'s defaults as the
loop does) the way the chaos driver answers plain text, or the bench's answer check fails for
the wrong reason. The tools carry a `"text": "..."` of their own: the driver must stop at them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wasmtime import wat2wasm

from murmurd.host import ComponentHost, ToolInput, ToolStatus
from murmurd.session.driver_protocol import ToolSpec, build_request, parse_response, system_prompt
from murmurd.session.messages import Message, user_message

ECHO_DRIVER = Path(__file__).parent / "fixtures" / "echo-driver.wat"
TOOLS = [ToolSpec("echo", 'Echoes "text": "back"',
                  {"type": "object", "properties": {"text": {"type": "string", "default": "t"}}, "text": "decoy"})]


@pytest.fixture(scope="module")
def echo_driver(host: ComponentHost):
    return host.load_bytes(wat2wasm(ECHO_DRIVER.read_text()), name="echo-driver-wat")


def _request(messages: list[Message]) -> str:
    return json.dumps(build_request(model="m", max_tokens=100, system=system_prompt("c", "1.0.0", 'say "text": "no"'),
                                    messages=messages, tools=TOOLS, prompt_cache_key="k"))


@pytest.mark.parametrize("text", ["throughput 3.14", 'quotes "inside" and a \\ backslash', "é \U0001f600 escaped as a pair", ""])
def test_it_answers_the_last_message_text_of_the_sessions_request(host: ComponentHost, echo_driver, text: str) -> None:
    earlier = [user_message("first"), Message("assistant", [{"type": "text", "text": "reply"}])]
    result = host.call_tool_sync(echo_driver, ToolInput(data=_request([*earlier, user_message(text)])))
    assert result.status == ToolStatus.PASSED, result
    response = parse_response(result.data or "")
    assert (response.stop_reason, response.text) == ("end_turn", f"answer: {text}")


def test_a_request_without_text_fails_the_turn_with_a_summary(host: ComponentHost, echo_driver) -> None:
    for data in (None, "", "{}", '{"messages": [{"role": "user", "content": [{"type": "text", "text": "cut'):
        result = host.call_tool_sync(echo_driver, ToolInput(data=data))
        assert (result.status, result.summary) == (ToolStatus.FAILED, "no text in the request")
