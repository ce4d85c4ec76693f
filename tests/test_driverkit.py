"""The bundled drivers' standard-library modules (SSE, retries, settings, usage, error bodies) under CPython."""

from __future__ import annotations

import email.utils
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "murmurd" / "bundled" / "_driverkit"))

from driverkit.errors import ConfigError, error_message  # noqa: E402
from driverkit.retry import RetryPolicy, is_retryable, retry_after_seconds  # noqa: E402
from driverkit.settings import api_url, load_settings  # noqa: E402
from driverkit.sse import Event, SseParser  # noqa: E402
from driverkit.usage import report  # noqa: E402


def _parse(*chunks: bytes) -> list[Event]:
    parser = SseParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events + list(parser.close())


def test_sse_events_survive_any_split_of_the_bytes() -> None:
    wire = "event: a\ndata: {\"x\": \"é\"}\n\n: comment\ndata: one\ndata: two\n\nevent: b\r\ndata:tight\r\n\r\n".encode()
    expected = [Event("a", '{"x": "é"}'), Event("message", "one\ntwo"), Event("b", "tight")]
    assert _parse(wire) == expected
    for cut in range(1, len(wire)):  # splits inside lines, CRLF pairs and the two-byte é
        assert _parse(wire[:cut], wire[cut:]) == expected, cut
    assert _parse(*(bytes([b]) for b in wire)) == expected


def test_sse_a_last_event_without_its_blank_line_is_dropped() -> None:
    assert _parse(b"data: whole\n\ndata: half") == [Event("message", "whole")]


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "-5"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now_epoch=1_000_000) == pytest.approx(10)


def test_which_statuses_are_retried() -> None:
    assert all(is_retryable(s) for s in (408, 409, 429, 500, 502, 503, 504, 529))
    assert not any(is_retryable(s) for s in (400, 401, 403, 404, 413, 422))


def test_backoff_grows_within_the_cap_and_retry_after_wins() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    for retry in range(8):
        step = min(4.0, 0.5 * 2**retry)
        assert step / 2 <= policy.backoff(retry) <= step
    assert policy.delay(3, 1.25) == 1.25


def test_api_urls_for_bare_and_versioned_endpoints() -> None:
    assert api_url("https://api.anthropic.com", "messages") == "https://api.anthropic.com/v1/messages"
    assert api_url("http://127.0.0.1:11434/v1", "chat/completions") == "http://127.0.0.1:11434/v1/chat/completions"
    assert api_url("https://gw.example/openai/v2", "responses") == "https://gw.example/openai/v2/responses"
    assert api_url("https://gw.example/vendor", "responses") == "https://gw.example/vendor/v1/responses"


def test_settings_read_the_environment_and_refuse_bad_config() -> None:
    env = {"MURMUR_INFERENCE_ENDPOINT": "http://127.0.0.1:8000/", "MURMUR_INFERENCE_API_KEY": "k",
           "MURMUR_INFERENCE_MODEL": "m", "MURMUR_INFERENCE_DRIVER_CONFIG": json.dumps({"retry_budget_seconds": 5})}
    settings = load_settings(env, "https://default")
    assert (settings.endpoint, settings.api_key, settings.model) == ("http://127.0.0.1:8000", "k", "m")
    assert settings.retry.budget_seconds == 5 and settings.retry.max_retries == 6
    assert load_settings({}, "https://api.openai.com/v1").endpoint == "https://api.openai.com/v1"
    for config, message in (("[1]", "must be a JSON object"), ("{", "not valid JSON")):
        with pytest.raises(ConfigError, match=message):
            load_settings({"MURMUR_INFERENCE_DRIVER_CONFIG": config}, "https://x")
    with pytest.raises(ConfigError, match="not an http"):
        load_settings({"MURMUR_INFERENCE_ENDPOINT": "ftp://x"}, "https://x")
    bad = load_settings({"MURMUR_INFERENCE_DRIVER_CONFIG": '{"retry_budget_seconds": "long"}'}, "https://x")
    with pytest.raises(ConfigError, match="non-negative number"):
        bad.retry
    with pytest.raises(ConfigError, match='"request" must be a JSON object'):
        load_settings({"MURMUR_INFERENCE_DRIVER_CONFIG": '{"request": 1}'}, "https://x").extra_body()


def test_usage_takes_only_reported_non_negative_integers() -> None:
    mapping = {"input_tokens": "prompt_tokens", "cached_tokens": "prompt_tokens_details.cached_tokens",
               "output_tokens": "completion_tokens"}
    assert report({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens": None},
                  mapping) == {"input_tokens": 5, "cached_tokens": 0}
    assert report({"prompt_tokens": True, "prompt_tokens_details": None}, mapping) == {}
    assert report(None, mapping) == {}


def test_error_bodies_of_both_apis_and_of_neither() -> None:
    anthropic = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    openai = b'{"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}}'
    assert error_message(anthropic) == "overloaded_error: Overloaded"
    assert error_message(openai) == "requests: Rate limit"
    assert error_message(b'{"error": "model not found"}') == "model not found"
    assert error_message(b"<html>Bad Gateway</html>") == "<html>Bad Gateway</html>"
    assert error_message(b"") == "(empty body)"
