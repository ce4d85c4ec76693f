"""The provider stand-ins can fail: they refuse what the real APIs refuse."""

from __future__ import annotations

import json

import httpx
import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import ValidationError

from standins import anthropic_standin, anthropic_stream, chat_stream, strict_validator

ANTHROPIC = {"model": "m", "max_tokens": 5, "stream": True,
             "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_anthropic_refuses_prompt_cache_key_and_unknown_nested_fields() -> None:
    validate = strict_validator(MessageCreateParamsStreaming)
    validate(ANTHROPIC)
    with pytest.raises(ValidationError, match="prompt_cache_key"):
        validate({**ANTHROPIC, "prompt_cache_key": "capsule:1.0.0"})
    thinking = {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s",
                                                  "cache_control": {"type": "ephemeral"}}]}
    with pytest.raises(ValueError, match=r"body.messages\[1\].content\[0\].cache_control"):
        validate({**ANTHROPIC, "messages": [*ANTHROPIC["messages"], thinking]})
    with pytest.raises(ValidationError, match="max_tokens"):
        validate({k: v for k, v in ANTHROPIC.items() if k != "max_tokens"})


def test_openai_refuses_fields_neither_api_defines() -> None:
    chat = strict_validator(CompletionCreateParamsStreaming)
    body = {"model": "m", "stream": True, "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]}
    chat(body)
    with pytest.raises(ValueError, match=r"body.messages\[0\].is_error"):
        chat({**body, "messages": [{**body["messages"][0], "is_error": True}]})
    responses = strict_validator(ResponseCreateParamsStreaming)
    items = {"model": "m", "stream": True, "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}
    responses(items)
    with pytest.raises(ValidationError, match="previous_response"):
        responses({**items, "previous_response": "resp_1"})


def test_a_refused_request_is_answered_400_and_recorded() -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "hi"}], "end_turn", {"input_tokens": 1})]
        answer = httpx.post(f"{api.url}/v1/messages", json={**ANTHROPIC, "prompt_cache_key": "k"}, timeout=5)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert len(api.problems) == 1 and "prompt_cache_key" in api.problems[0]


def test_streams_are_built_from_the_sdk_event_types() -> None:
    with pytest.raises(ValidationError):
        anthropic_stream([{"type": "text", "text": "hi"}], "end_turn", {"input_tokens": "many"})
    with pytest.raises(ValidationError):
        chat_stream(text="hi", usage={"prompt_tokens": 1})  # completion_tokens and total_tokens are required
    events = chat_stream(text="hi", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}).events
    assert json.loads(events[-2][1])["usage"]["total_tokens"] == 2 and events[-1][1] == "[DONE]"
