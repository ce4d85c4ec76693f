"""Stateful driver continuation: every row of the seed's table."""

from __future__ import annotations

import pytest

from murmurd.session.continuation import ContinuationState, continuation_id_from_metadata

CTX = "ctx_" + "a" * 32
OTHER = "ctx_" + "b" * 32


def conversation(count: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "text": f"m{i}"} for i in range(count)]


def test_without_a_continuation_every_turn_is_a_full_resend() -> None:
    state = ContinuationState()
    messages = conversation(3)
    assert state.messages_to_send(CTX, messages) == (messages, None)
    assert not state.active


def test_same_context_sends_the_answer_and_what_followed_plus_the_id() -> None:
    state = ContinuationState()
    messages = conversation(1)  # the task message
    assert state.messages_to_send(CTX, messages) == (messages, None)
    state.on_response(CTX, "resp_123", len(messages))  # it answered a request of 1 message
    messages += conversation(2)[1:]  # the assistant response is appended
    assert (state.held_id, state.context_id, state.acknowledged) == ("resp_123", CTX, 1)

    messages.append({"role": "tool", "text": "result"})
    sent, continuation_id = state.messages_to_send(CTX, messages)
    assert sent == [{"role": "assistant", "text": "m1"}, {"role": "tool", "text": "result"}]
    assert continuation_id == "resp_123"

    # The driver acknowledges again with a new id: it was sent 3 messages.
    state.on_response(CTX, "resp_456", len(messages))
    messages.append({"role": "assistant", "text": "next"})
    messages.append({"role": "user", "text": "more"})
    assert state.messages_to_send(CTX, messages) == (
        [{"role": "assistant", "text": "next"}, {"role": "user", "text": "more"}], "resp_456")


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError):
        ContinuationState().on_response(CTX, "resp", -1)


def test_rebase_keeps_at_most_what_the_driver_was_sent() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp", 3)
    state.rebase(CTX, 4)  # the threaded history also holds the final answer
    assert state.acknowledged == 3
    state.rebase(CTX, 0)  # a stateless task carries none of it
    assert state.acknowledged == 0 and state.active
    state.rebase(OTHER, 0)
    assert not state.active


def test_the_returned_list_is_a_copy() -> None:
    state = ContinuationState(held_id="r", context_id=CTX, acknowledged=1)
    messages = conversation(3)
    sent, _ = state.messages_to_send(CTX, messages)
    sent.clear()
    assert len(messages) == 3


def test_a_different_context_is_a_full_resend_and_never_reuses_the_id() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp_123", 2)
    messages = conversation(3)
    assert state.messages_to_send(OTHER, messages) == (messages, None)
    assert not state.active
    # Coming back to the first context does not resurrect the id either.
    assert state.messages_to_send(CTX, messages) == (messages, None)


def test_a_missing_context_id_never_continues() -> None:
    state = ContinuationState()
    state.on_response(None, "resp_123", 2)
    messages = conversation(3)
    assert state.messages_to_send(None, messages) == (messages, None)


def test_an_empty_id_drops_the_held_one() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp_123", 2)
    state.on_response(CTX, "", 4)
    assert not state.active
    messages = conversation(5)
    assert state.messages_to_send(CTX, messages) == (messages, None)


def test_an_absent_id_drops_the_held_one() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp_123", 2)
    state.on_response(CTX, None, 4)
    assert (state.held_id, state.context_id, state.acknowledged) == (None, None, 0)
    messages = conversation(5)
    assert state.messages_to_send(CTX, messages) == (messages, None)


def test_replace_context_drops_the_held_id_and_resends_the_compacted_history() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp_123", 6)
    compacted = [{"role": "user", "text": "summary"}, {"role": "user", "text": "latest"}]
    state.drop()
    assert state.messages_to_send(CTX, compacted) == (compacted, None)


def test_a_history_shorter_than_acknowledged_is_a_full_resend() -> None:
    state = ContinuationState()
    state.on_response(CTX, "resp_123", 6)
    shorter = conversation(2)  # replaced without drop(): the id no longer matches this history
    assert state.messages_to_send(CTX, shorter) == (shorter, None)
    assert not state.active


def test_continuation_id_from_metadata() -> None:
    assert continuation_id_from_metadata([("state_effect", "read")]) is None
    assert continuation_id_from_metadata([("continuation_id", "abc"), ("resource_id", "x")]) == "abc"
    assert continuation_id_from_metadata([("continuation_id", "a"), ("continuation_id", "b")]) == "b"
    assert continuation_id_from_metadata([("continuation_id", "")]) == ""
