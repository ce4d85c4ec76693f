"""The fence rule (murmurd/a2a/replicas/fencing.py `Contact`), pure: when a replica whose
heartbeats stop getting through must stop its own work. The whole path, with real replicas and
a real PostgreSQL behind a partition, is in tests/test_replicas.py."""

from __future__ import annotations

from murmurd.a2a.replicas.fencing import FENCE_AFTER, Contact

LEASE = 15.0


def test_a_failed_heartbeat_fences_after_two_thirds_of_a_lease_of_silence() -> None:
    contact = Contact(LEASE, last_ok=100.0)
    contact.sending(105.0)
    contact.failed()
    assert not contact.must_fence(100.0 + FENCE_AFTER * LEASE - 0.01)
    assert contact.must_fence(100.0 + FENCE_AFTER * LEASE)


def test_a_stalled_event_loop_alone_does_not_fence() -> None:
    """After a stall, silence is long but no heartbeat has failed or hung: the one due goes out."""
    contact = Contact(LEASE, last_ok=100.0)
    assert not contact.must_fence(100.0 + 0.9 * LEASE)
    contact.sending(100.0 + 0.9 * LEASE)  # the heartbeat due, sent as the loop resumes
    assert not contact.must_fence(100.0 + 0.9 * LEASE + 0.1)
    contact.got_through(100.0 + 0.9 * LEASE)
    assert not contact.must_fence(100.0 + 1.5 * LEASE)


def test_a_heartbeat_hanging_for_a_sixth_of_a_lease_past_the_threshold_fences() -> None:
    contact = Contact(LEASE, last_ok=100.0)
    contact.sending(100.0 + LEASE / 3)
    assert not contact.must_fence(100.0 + LEASE / 3 + LEASE / 6 - 0.01)  # hanging, but not silent enough
    assert contact.must_fence(100.0 + FENCE_AFTER * LEASE)


def test_a_whole_lease_of_silence_fences_whatever_the_reason() -> None:
    """A survivor may sweep from then on: the work stops even if no heartbeat was tried."""
    assert Contact(LEASE, last_ok=100.0).must_fence(100.0 + LEASE)


def test_silence_counts_from_when_the_last_good_heartbeat_was_sent() -> None:
    """The database's `heartbeat_at` is no earlier than the send: counting from the answer
    would eat into the margin before a sweep."""
    contact = Contact(LEASE, last_ok=0.0)
    contact.sending(100.0)
    contact.got_through(100.0)  # answered late; the send time is what counts
    contact.sending(110.0)
    contact.failed()
    assert contact.must_fence(100.0 + FENCE_AFTER * LEASE)


def test_a_fenced_replica_is_not_fenced_twice() -> None:
    contact = Contact(LEASE, last_ok=100.0)
    contact.fence(100.0)
    assert not contact.must_fence(100.0 + 2 * LEASE)


def test_right_after_a_stall_only_a_whole_lease_of_silence_fences() -> None:
    """A beat in flight across a stall looks hung (or times out) for reasons of our own loop."""
    contact = Contact(LEASE, last_ok=100.0)
    contact.sending(100.0 + LEASE / 3)
    contact.failed()
    assert not contact.must_fence(100.0 + 0.9 * LEASE, stalled=True)
    assert contact.must_fence(100.0 + 0.9 * LEASE)
    assert contact.must_fence(100.0 + LEASE, stalled=True)


def test_a_fence_is_lifted_only_by_a_heartbeat_sent_after_it() -> None:
    contact = Contact(LEASE, last_ok=100.0)
    contact.fence(112.0)
    contact.got_through(111.0)  # sent before the fence: says nothing of now
    assert not contact.heard_since_fence()
    contact.got_through(113.0)
    assert contact.heard_since_fence()
    contact.unfence()
    assert not contact.fenced
