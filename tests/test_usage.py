"""Reported token usage: every row of the seed's tables, malformed reports degrade to no report."""

from __future__ import annotations

import json

import pytest

from murmurd.session.usage import USAGE_MEMBERS, is_token_count, normalize_usage


def test_the_seed_example_is_recorded_whole() -> None:
    response = json.loads(
        '{ "stop_reason": "end_turn", "content": [{"type": "text", "text": "..."}], "usage": '
        '{ "input_tokens": 12043, "output_tokens": 218, "cached_tokens": 11780, "cache_write_tokens": 0 } }'
    )
    assert normalize_usage(response["usage"]) == {
        "input_tokens": 12043,
        "output_tokens": 218,
        "cached_tokens": 11780,
        "cache_write_tokens": 0,  # a reported 0 is a genuine cache miss and is kept
    }
    assert USAGE_MEMBERS == ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens")


def test_no_usage_records_nothing() -> None:
    response = {"stop_reason": "end_turn", "content": []}
    assert normalize_usage(response.get("usage")) == {}


@pytest.mark.parametrize(
    "raw",
    [None, [], [{"input_tokens": 3}], "input_tokens=3", 12, 1.5, True, False, ("input_tokens", 3)],
    ids=repr,
)
def test_a_usage_that_is_not_an_object_records_nothing(raw: object) -> None:
    assert normalize_usage(raw) == {}


@pytest.mark.parametrize(
    "bad",
    [-1, -12043, 3.0, 3.5, "218", True, False, None, [], {}, [218], float("nan"), float("inf")],
    ids=repr,
)
def test_a_malformed_member_is_dropped_and_siblings_are_kept(bad: object) -> None:
    raw = {"input_tokens": bad, "output_tokens": 218, "cached_tokens": 0}
    assert normalize_usage(raw) == {"output_tokens": 218, "cached_tokens": 0}
    assert not is_token_count(bad)


@pytest.mark.parametrize("member", USAGE_MEMBERS)
def test_each_member_is_checked_on_its_own(member: str) -> None:
    others = {name: 7 for name in USAGE_MEMBERS if name != member}
    assert normalize_usage({**others, member: -1}) == others
    assert normalize_usage({**others, member: 5}) == {**others, member: 5}


@pytest.mark.parametrize(
    "unknown",
    ["total_tokens", "prompt_tokens", "completion_tokens", "cache_read_input_tokens", "INPUT_TOKENS", "input-tokens"],
)
def test_a_member_the_runtime_does_not_define_is_dropped(unknown: str) -> None:
    assert normalize_usage({unknown: 10, "input_tokens": 1}) == {"input_tokens": 1}


def test_an_absent_member_is_never_written_as_zero() -> None:
    recorded = normalize_usage({"input_tokens": 100, "output_tokens": 20})
    assert recorded == {"input_tokens": 100, "output_tokens": 20}
    assert "cached_tokens" not in recorded and "cache_write_tokens" not in recorded
    assert normalize_usage({}) == {}


def test_large_integers_survive_and_values_are_plain_ints() -> None:
    recorded = normalize_usage(json.loads('{"input_tokens": 123456789012345678901234567890}'))
    assert recorded == {"input_tokens": 123456789012345678901234567890}
    assert all(type(value) is int for value in recorded.values())


def test_members_come_out_in_the_defined_order() -> None:
    raw = {"cache_write_tokens": 4, "cached_tokens": 3, "output_tokens": 2, "input_tokens": 1}
    assert list(normalize_usage(raw)) == list(USAGE_MEMBERS)
