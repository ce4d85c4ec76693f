"""murmur-driver-anthropic through real sessions against a loopback Messages API stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from driverkit_session import API_KEY, driver_capsule, run, stage, usage_rows
from murmurd.session.driver_protocol import capsule_block
from standins import Reset, Stall, Stream, anthropic_error, anthropic_standin, anthropic_stream

pytestmark = pytest.mark.anyio

DRIVER = "murmur-driver-anthropic"
THINKING = {"type": "thinking", "thinking": "The user wants an echo.", "signature": "sig-abc123"}
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {"text": "ping"}}
FIRST_USAGE = {"input_tokens": 120, "cache_creation_input_tokens": 90, "cache_read_input_tokens": 0}
SECOND_USAGE = {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 90}


async def test_a_tool_loop_streams_thinking_and_text_caches_the_prefix_and_reports_usage(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [
            anthropic_stream([THINKING, {"type": "text", "text": "Let me echo. "}, TOOL_USE], "tool_use", FIRST_USAGE,
                             output_tokens=40),
            anthropic_stream([{"type": "text", "text": "All done."}], "end_turn", SECOND_USAGE, output_tokens=5),
        ]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {"thinking_budget": 2048}), host, tmp_path)
        (outcome,), chunks = await run(staged, host, "echo ping please")

    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "All done."
    assert api.problems == []
    assert "".join(chunks.thinking) == THINKING["thinking"]
    assert "".join(chunks.text) == "Let me echo. All done."

    first, second = api.requests
    assert first.headers["x-api-key"] == API_KEY and first.headers["anthropic-version"] == "2023-06-01"
    body = first.body
    assert (body["model"], body["max_tokens"], body["stream"]) == ("standin-model", 1024, True)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "prompt_cache_key" not in body  # the Messages API would reject it
    (system,) = body["system"]
    assert system["text"].startswith(capsule_block("driver-test", "1.2.0"))
    assert system["text"].endswith("You are a careful test agent.")
    assert system["cache_control"] == {"type": "ephemeral"}
    assert body["tools"] == [{"name": "echo", "description": body["tools"][0]["description"],
                              "input_schema": body["tools"][0]["input_schema"]}]
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "echo ping please", "cache_control": {"type": "ephemeral"}}]}]

    # the stable prefix is byte-identical on the next turn, so it reads what the first wrote
    assert second.body["system"] == body["system"] and second.body["tools"] == body["tools"]
    user, assistant, results = second.body["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "echo ping please"}]}
    assert assistant == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": THINKING["thinking"], "signature": "sig-abc123"},
        {"type": "text", "text": "Let me echo. "},
        {"type": "tool_use", "id": "toolu_01", "name": "echo", "input": {"text": "ping"}},
    ]}
    (result,) = results["content"]
    assert results["role"] == "user" and result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01"
    assert "ping" in result["content"][0]["text"] and result["cache_control"] == {"type": "ephemeral"}
    assert "is_error" not in result

    assert usage_rows(staged) == [
        {"input_tokens": 120, "output_tokens": 40, "cached_tokens": 0, "cache_write_tokens": 90},
        {"input_tokens": 30, "output_tokens": 5, "cached_tokens": 90, "cache_write_tokens": 0},
    ]


async def test_usage_the_provider_did_not_report_is_omitted_not_zero(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "hi"}], "end_turn", {"input_tokens": 7})]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {"prompt_caching": False}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    assert api.problems == []
    assert usage_rows(staged) == [{"input_tokens": 7, "output_tokens": 9}]
    body = api.requests[0].body
    assert "cache_control" not in body["system"][0] and "cache_control" not in body["messages"][0]["content"][0]


async def test_max_tokens_ends_the_task_with_the_text_so_far(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "cut sho"}], "max_tokens", {"input_tokens": 7})]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "write a lot")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "cut sho"


async def test_a_refusal_fails_the_task_naming_the_stop_reason(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "I can't."}], "refusal", {"input_tokens": 7})]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "something bad")
    assert outcome.exit_status == "failed"
    assert "stop_reason 'refusal'" in (outcome.error or "")


async def test_a_429_is_retried_after_its_retry_after(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [
            anthropic_error(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                            {"retry-after": "1"}),
            anthropic_stream([{"type": "text", "text": "made it"}], "end_turn", {"input_tokens": 7}),
        ]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "made it"
    first, second = api.requests
    assert second.at - first.at >= 0.95  # retry-after: 1 was honoured
    assert second.body == first.body


async def test_a_529_storm_past_the_retry_budget_fails_clearly(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_error(529, "overloaded_error", "Overloaded")]
        config = {"retry_budget_seconds": 1.5, "retry_base_delay_seconds": 0.2}
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    error = outcome.error or ""
    assert "anthropic: gave up after" in error and "retry budget 1.5s" in error
    assert "HTTP 529: overloaded_error: Overloaded" in error
    assert 2 <= len(api.requests) <= 8
    assert api.requests[-1].at - api.requests[0].at <= 1.5
    assert staged.workdir.result.read_text().startswith("error: ")


async def test_a_provider_error_body_fails_at_once_naming_status_and_message(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_error(400, "invalid_request_error", "max_tokens: must be at most 64000")]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "anthropic: HTTP 400: invalid_request_error: max_tokens: must be at most 64000" in (outcome.error or "")
    assert len(api.requests) == 1  # a request the API rejects is never retried


async def test_a_malformed_stream_fails_clearly(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        good = anthropic_stream([{"type": "text", "text": "hello"}], "end_turn", {"input_tokens": 7})
        api.replies = [Stream([good.events[0], ("content_block_start", "{not json")])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "anthropic: malformed stream: event 'content_block_start' data is not JSON" in (outcome.error or "")


async def test_a_stream_cut_before_message_stop_fails_clearly(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        good = anthropic_stream([{"type": "text", "text": "hello"}], "end_turn", {"input_tokens": 7})
        api.replies = [Stream(good.events[:-2])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "malformed stream: it ended before message_stop" in (outcome.error or "")


async def test_an_error_event_mid_stream_fails_naming_it(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        good = anthropic_stream([{"type": "text", "text": "hello"}], "end_turn", {"input_tokens": 7})
        error = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
        api.replies = [Stream([*good.events[:3], ("error", error)])]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "stream error overloaded_error: Overloaded" in (outcome.error or "")


async def test_without_a_network_grant_the_call_is_refused_with_the_fix(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "hi"}], "end_turn", {"input_tokens": 7})]
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, {}, network=False), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "failed"
    assert "HTTP-request-denied" in (outcome.error or "") and "network.allow" in (outcome.error or "")
    assert api.requests == []


async def test_a_reset_connection_is_retried(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [Reset(), anthropic_stream([{"type": "text", "text": "made it"}], "end_turn", {"input_tokens": 7})]
        config = {"retry_base_delay_seconds": 0.1}
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "made it" and len(api.requests) == 2


async def test_a_silent_provider_times_out_within_read_timeout_seconds(tmp_path: Path, host) -> None:
    with anthropic_standin() as api:
        api.replies = [Stall(3)]
        config = {"read_timeout_seconds": 0.5, "max_retries": 0}
        staged = stage(driver_capsule(tmp_path, DRIVER, api.url, config), host, tmp_path)
        (outcome,), _ = await run(staged, host, "hello")
    elapsed = outcome.duration_ms / 1000
    assert outcome.exit_status == "failed"
    assert "gave up after 1 attempts (0 retries): no response: connection-read-timeout" in (outcome.error or "")
    assert elapsed < 2.5


def test_murmurd_run_streams_the_answer_with_the_key_from_dotenv(tmp_path: Path) -> None:
    """The user's path: a capsule directory, the key in `.env`, `murmurd run` as a subprocess."""
    import os
    import subprocess
    import sys

    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "Hello from the stand-in."}], "end_turn",
                                        {"input_tokens": 7})]
        capsule = driver_capsule(tmp_path, DRIVER, api.url, {})
        (capsule / ".env").write_text(f"STANDIN_API_KEY={API_KEY}\n")
        env = {k: v for k, v in os.environ.items() if k != "STANDIN_API_KEY"}
        proc = subprocess.run([sys.executable, "-m", "murmurd", "run", str(capsule), "--task", "say hello"],
                              capture_output=True, text=True, timeout=300, cwd=capsule, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Hello from the stand-in." in proc.stdout
    assert api.problems == [] and api.requests[0].headers["x-api-key"] == API_KEY
