"""murmur-driver-openai through real sessions against loopback Chat Completions and Responses stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driverkit_session import API_KEY, driver_capsule, run, stage, usage_rows
from murmurd.session.cache_key import prompt_cache_key
from murmurd.session.driver_protocol import capsule_block
from standins import (
    Stream,
    chat_standin,
    chat_stream,
    openai_error,
    responses_standin,
    responses_stream,
    responses_usage,
)

pytestmark = pytest.mark.anyio

DRIVER = "murmur-driver-openai"
CONTEXT = "ctx_0123456789"
ECHO = {"id": "call_1", "name": "echo", "input": {"text": "ping"}}
RESPONSES = {"api": "responses"}


def chat_usage(prompt: int, completion: int, cached: int | None = None) -> dict:
    usage: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


# --------------------------------------------------------------------------- Chat Completions


async def test_chat_tool_loop_streams_reasoning_and_text_and_reports_usage(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [
            chat_stream(reasoning="The user wants an echo.", text="Let me echo.", tool_calls=[ECHO],
                        finish_reason="tool_calls", usage=chat_usage(150, 20, 0)),
            chat_stream(text="All done.", usage=chat_usage(190, 4, 128)),
        ]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), chunks = await run(staged, host, "echo ping please", context_id=CONTEXT)

    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "All done."
    assert api.problems == []
    assert "".join(chunks.thinking) == "The user wants an echo."
    assert "".join(chunks.text) == "Let me echo.All done."

    first, second = api.requests
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    body = first.body
    assert body["model"] == "standin-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 1024 and "max_completion_tokens" not in body  # a compatible server
    assert body["prompt_cache_key"] == prompt_cache_key("driver-test", "1.2.0", CONTEXT)
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"].startswith(capsule_block("driver-test", "1.2.0"))
    assert user == {"role": "user", "content": "echo ping please"}
    (tool,) = body["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "echo" and "parameters" in tool["function"]

    assert second.body["prompt_cache_key"] == body["prompt_cache_key"]
    assert second.body["messages"][:2] == body["messages"]
    assistant, answer = second.body["messages"][2:]
    assert assistant == {"role": "assistant", "content": "Let me echo.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "ping"}'}}]}
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_1" and "ping" in answer["content"]

    assert usage_rows(staged) == [
        {"input_tokens": 150, "output_tokens": 20, "cached_tokens": 0},
        {"input_tokens": 190, "output_tokens": 4, "cached_tokens": 128},
    ]


async def test_a_compatible_server_at_a_v1_base_url_without_usage_or_done(tmp_path: Path, host) -> None:
    """As Ollama and llama.cpp are configured: `<host>/v1`, no usage chunk; a tool turn may finish `stop`."""
    with chat_standin() as api:
        api.replies = [
            chat_stream(tool_calls=[ECHO], finish_reason="stop", done=False),
            chat_stream(text="done", usage=chat_usage(5, 1)),
        ]
        config = {"stream_usage": False, "prompt_cache_key": False}
        staged = stage(driver_capsule(tmp_path, DRIVER, f"{api.url}/v1", config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "done"
    assert api.problems == [] and [r.path for r in api.requests] == ["/v1/chat/completions"] * 2
    assert "stream_options" not in api.requests[0].body and "prompt_cache_key" not in api.requests[0].body
    assert usage_rows(staged) == [None, {"input_tokens": 5, "output_tokens": 1}]  # no made-up cache member


async def test_chat_length_is_max_tokens_and_content_filter_fails(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [chat_stream(text="cut sho", finish_reason="length")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (cut,), _ = await run(staged, host, "write a lot")
        api.replies, api.requests = [chat_stream(text="", finish_reason="content_filter")], []
        (filtered,), _ = await run(staged, host, "something bad")
    assert cut.exit_status == "ok" and cut.result_text == "cut sho"
    assert filtered.exit_status == "failed" and "finish_reason 'content_filter'" in (filtered.error or "")


async def test_chat_429_is_retried_after_retry_after_ms(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [openai_error(429, "Rate limit reached", "requests", {"retry-after-ms": "400"}),
                       chat_stream(text="made it")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    first, second = api.requests
    assert second.at - first.at >= 0.38 and second.body == first.body


async def test_chat_5xx_storm_past_the_budget_fails_clearly(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [openai_error(503, "The server is overloaded", "server_error")]
        config = {"retry_budget_seconds": 1, "retry_base_delay_seconds": 0.2}
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: gave up after" in (outcome.error or "")
    assert "HTTP 503: server_error: The server is overloaded" in (outcome.error or "")
    assert 2 <= len(api.requests) <= 6


async def test_chat_max_retries_caps_the_attempts(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [openai_error(500, "boom", "server_error", {"retry-after": "0"})]
        config = {"max_retries": 2}
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "gave up after 3 attempts (2 retries): HTTP 500: server_error: boom" in (outcome.error or "")
    assert len(api.requests) == 3


async def test_chat_provider_error_body_fails_naming_status_and_message(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [openai_error(401, "Incorrect API key provided", "invalid_request_error")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: HTTP 401: invalid_request_error: Incorrect API key provided" in (outcome.error or "")
    assert len(api.requests) == 1


async def test_chat_malformed_stream_fails_clearly(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [Stream([*chat_stream(text="hi").events[:1], (None, '{"id": "chatcmpl", "choices": [')])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: malformed stream: chunk data is not JSON" in (outcome.error or "")


async def test_chat_stream_without_a_finish_fails_clearly(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        api.replies = [Stream(chat_stream(text="hello there").events[:2])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "malformed stream: it ended before a finish_reason" in (outcome.error or "")


async def test_chat_error_object_mid_stream_fails_naming_it(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        error = json.dumps({"error": {"message": "model crashed", "type": "server_error"}})
        api.replies = [Stream([*chat_stream(text="hello").events[:2], (None, error)])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: stream error server_error: model crashed" in (outcome.error or "")


async def test_tool_arguments_that_are_not_json_fail_clearly(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        events = chat_stream(tool_calls=[ECHO], finish_reason="tool_calls").events
        chunk = json.loads(events[2][1])  # the first half of the arguments
        chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = "{oops"
        api.replies = [Stream([*events[:2], (None, json.dumps(chunk)), *events[3:]])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "the model's arguments for tool 'echo' are not JSON" in (outcome.error or "")


async def test_an_unknown_api_is_a_configuration_error(tmp_path: Path, host) -> None:
    with chat_standin() as api:
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {"api": "completions"}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert 'openai: driver.config "api" must be "chat" or "responses", got \'completions\'' in (outcome.error or "")
    assert api.requests == []


async def test_a_refused_connection_is_retried_then_fails_naming_it(tmp_path: Path, host) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = {"retry_budget_seconds": 0.6, "retry_base_delay_seconds": 0.1}
    staged = stage(driver_capsule(tmp_path, DRIVER, endpoint, config), host, tmp_path)
    (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "gave up after" in (outcome.error or "") and "connection-refused" in (outcome.error or "")


# --------------------------------------------------------------------------- Responses


async def test_responses_tool_loop_continues_with_previous_response_id_sending_only_the_tail(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        api.replies = [
            responses_stream("resp_1", reasoning="Echo is the right tool.", text="Let me echo.", tool_calls=[ECHO],
                             usage=responses_usage(150, 20, 0)),
            responses_stream("resp_2", text="All done.", usage=responses_usage(40, 4, 32)),
        ]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), chunks = await run(staged, host, "echo ping please", context_id=CONTEXT)

    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "All done."
    assert api.problems == []
    assert "".join(chunks.thinking) == "Echo is the right tool."
    assert "".join(chunks.text) == "Let me echo.All done."

    first, second = api.requests
    body = first.body
    assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "echo ping please"}]}]
    assert body["instructions"].startswith(capsule_block("driver-test", "1.2.0"))
    assert body["store"] is True and body["max_output_tokens"] == 1024 and "previous_response_id" not in body
    assert body["prompt_cache_key"] == prompt_cache_key("driver-test", "1.2.0", CONTEXT)
    (tool,) = body["tools"]
    assert (tool["type"], tool["name"], tool["strict"]) == ("function", "echo", False)

    # the runtime held resp_1 as the continuation: the wire carries only the tool output
    assert second.body["previous_response_id"] == "resp_1"
    (output,) = second.body["input"]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1" and "ping" in output["output"]
    assert second.body["instructions"] == body["instructions"] and second.body["tools"] == body["tools"]
    assert second.body["prompt_cache_key"] == body["prompt_cache_key"]

    assert usage_rows(staged) == [
        {"input_tokens": 150, "output_tokens": 20, "cached_tokens": 0},
        {"input_tokens": 40, "output_tokens": 4, "cached_tokens": 32},
    ]


async def test_responses_without_store_resend_the_whole_conversation(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        api.replies = [responses_stream("resp_1", text="Let me echo.", tool_calls=[ECHO]),
                       responses_stream("resp_2", text="All done.")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {**RESPONSES, "store": False}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "echo ping please", context_id=CONTEXT)
    assert outcome.exit_status == "ok", outcome.error
    assert api.problems == []
    second = api.requests[1].body
    assert second["store"] is False and "previous_response_id" not in second
    user, said, call, output = second["input"]
    assert user["role"] == "user" and said == {"role": "assistant", "content": "Let me echo."}
    assert call == {"type": "function_call", "call_id": "call_1", "name": "echo", "arguments": '{"text": "ping"}'}
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1"
    assert usage_rows(staged) == [None, None]


async def test_responses_incomplete_at_max_output_tokens_ends_with_the_text(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        api.replies = [responses_stream("resp_1", text="cut sho", status="incomplete",
                                        incomplete_reason="max_output_tokens")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), _ = await run(staged, host, "write a lot")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "cut sho"


async def test_responses_failed_response_fails_naming_its_error(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        stream = responses_stream("resp_1", status="failed")
        name, data = stream.events[-1]
        failed = json.loads(data)
        failed["response"]["error"] = {"code": "server_error", "message": "The model crashed"}
        api.replies = [Stream([*stream.events[:-1], (name, json.dumps(failed))])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: response failed server_error: The model crashed" in (outcome.error or "")


async def test_responses_error_event_fails_naming_it(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        stream = responses_stream("resp_1", text="hello")
        error = json.dumps({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None,
                            "sequence_number": 3})
        api.replies = [Stream([*stream.events[:2], ("error", error)])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "openai: stream error rate_limit_exceeded: Slow down" in (outcome.error or "")


async def test_responses_stream_cut_before_completion_fails_clearly(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        api.replies = [Stream(responses_stream("resp_1", text="hello").events[:-1])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "malformed stream: it ended before response.completed" in (outcome.error or "")


async def test_responses_unknown_previous_response_fails_with_the_providers_message(tmp_path: Path, host) -> None:
    with responses_standin() as api:
        api.replies = [
            responses_stream("resp_1", tool_calls=[ECHO]),
            openai_error(400, "Previous response with id 'resp_1' not found.", "invalid_request_error"),
        ]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello", context_id=CONTEXT)
    assert outcome.exit_status == "failed"
    assert "HTTP 400: invalid_request_error: Previous response with id 'resp_1' not found." in (outcome.error or "")
    assert api.requests[1].body["previous_response_id"] == "resp_1"


async def test_responses_continue_into_the_next_task_of_the_same_context(tmp_path: Path, host) -> None:
    """A threaded second task: the runtime sends the held id and the tail; the wire carries only the new text."""
    from driverkit_session import Chunks
    from murmurd.session.session import Session, TaskSpec

    with responses_standin() as api:
        api.replies = [responses_stream("resp_1", text="First answer."),
                       responses_stream("resp_2", text="Second answer.")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, RESPONSES), host, tmp_path)
        session = Session(staged, host)
        await session.open()
        try:
            first = await session.run_task(TaskSpec("tsk_1", "first question", context_id=CONTEXT), Chunks())
            second = await session.run_task(TaskSpec("tsk_2", "second question", context_id=CONTEXT,
                                                      history=first.messages), Chunks())
        finally:
            await session.close()
    assert (first.result_text, second.result_text) == ("First answer.", "Second answer.")
    assert api.problems == []
    body = api.requests[1].body
    assert body["previous_response_id"] == "resp_1"
    assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "second question"}]}]
