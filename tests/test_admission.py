"""The admission rules of issue 11 as pure judgements: the bound, per-context order, queue_depth,
and which waiting task a reply answers."""

from __future__ import annotations

from dataclasses import dataclass

from murmurd.a2a.core.admission import (
    DEFAULT_QUEUE_BOUND,
    Ambiguous,
    NewTask,
    Reply,
    Waiter,
    concurrency_bound,
    refusal,
    route_message,
    runnable,
)


@dataclass
class Task:
    id: str
    context_id: str


def test_single_and_none_keep_a_bound_of_one_and_queue_defaults_to_many() -> None:
    assert concurrency_bound("single", 50) == 1
    assert concurrency_bound("none", None) == 1
    assert concurrency_bound("queue", None) == DEFAULT_QUEUE_BOUND > 1
    assert concurrency_bound("queue", 3) == 3


def test_runnable_starts_up_to_the_bound_in_arrival_order() -> None:
    waiting = [Task("t1", "a"), Task("t2", "b"), Task("t3", "c")]
    assert [t.id for t in runnable(waiting, set(), running=1, bound=3)] == ["t1", "t2"]
    assert runnable(waiting, set(), running=3, bound=3) == []


def test_runnable_never_runs_two_tasks_of_one_context_nor_overtakes_within_a_context() -> None:
    waiting = [Task("t1", "a"), Task("t2", "a"), Task("t3", "b")]
    assert [t.id for t in runnable(waiting, set(), running=0, bound=8)] == ["t1", "t3"]
    assert [t.id for t in runnable(waiting, {"a"}, running=1, bound=8)] == ["t3"]


def test_refusal_under_the_bound_accepts_and_past_it_single_rejects_queue_holds() -> None:
    common = {"accepting": True, "waiting": 0, "context_busy": False, "queue_depth": 1}
    assert refusal(task_acceptance="queue", bound=4, running=3, **common) is None
    assert refusal(task_acceptance="single", bound=1, running=0, **common) is None
    assert "single task" in refusal(task_acceptance="single", bound=1, running=1, **common)
    assert refusal(task_acceptance="queue", bound=4, running=4, **common) is None  # queued
    full = {**common, "waiting": 1}
    assert "queue is full (queue_depth 1)" in refusal(task_acceptance="queue", bound=4, running=4, **full)


def test_a_run_whose_task_reads_finished_no_longer_holds_the_bound() -> None:
    """A caller saw `completed` and sends again while the run still releases its slot."""
    common = {"accepting": True, "waiting": 0, "context_busy": False, "queue_depth": 1}
    assert refusal(task_acceptance="single", bound=1, running=0, finishing=1, **common) is None
    assert "single task" in refusal(task_acceptance="single", bound=1, running=1, finishing=0, **common)
    # under after_task: exit the first finished task ends the intake, as the daemon will a moment later
    assert "shutting down" in refusal(task_acceptance="single", bound=1, running=0, finishing=1,
                                      exit_after_task=True, **common)
    assert refusal(task_acceptance="queue", bound=4, running=0, finishing=0, exit_after_task=True, **common) is None


def test_a_task_whose_context_is_busy_waits_and_counts_against_queue_depth() -> None:
    args = {"accepting": True, "task_acceptance": "queue", "bound": 8, "running": 1, "queue_depth": 2}
    assert refusal(waiting=1, context_busy=True, **args) is None
    assert "queue is full" in refusal(waiting=2, context_busy=True, **args)
    assert refusal(waiting=2, context_busy=False, **args) is None  # starts at once: never queued


def test_a_daemon_shutting_down_refuses_everything() -> None:
    reason = refusal(accepting=False, task_acceptance="queue", bound=8, running=0, waiting=0,
                     context_busy=False, queue_depth=4)
    assert reason == "rejected: the capsule is shutting down"


WAITERS = [Waiter("tsk_1", "ctx_a"), Waiter("tsk_2", "ctx_b")]


def test_a_reply_by_task_id_or_by_context_id() -> None:
    assert route_message("tsk_2", None, WAITERS, 8) == Reply("tsk_2")
    assert route_message("tsk_2", "ctx_b", WAITERS, 8) == Reply("tsk_2")
    assert route_message(None, "ctx_a", WAITERS, 8) == Reply("tsk_1")


def test_a_message_naming_neither_never_answers_above_a_bound_of_one() -> None:
    assert route_message(None, None, WAITERS, 8) == NewTask()
    assert route_message(None, None, WAITERS[:1], 8) == NewTask()
    assert route_message(None, "ctx_new", WAITERS, 8) == NewTask()


def test_a_bound_of_one_keeps_upstreams_any_message_answers() -> None:
    assert route_message(None, None, WAITERS[:1], 1) == Reply("tsk_1")
    assert route_message(None, "ctx_other", WAITERS[:1], 1) == Reply("tsk_1")
    assert route_message(None, None, [], 1) == NewTask()


def test_a_task_id_that_does_not_wait_is_left_to_the_caller() -> None:
    assert route_message("tsk_9", None, WAITERS, 8) == NewTask()


def test_ambiguous_replies_are_named() -> None:
    mismatch = route_message("tsk_1", "ctx_b", WAITERS, 8)
    assert isinstance(mismatch, Ambiguous) and "ctx_a" in mismatch.reason and "ctx_b" in mismatch.reason
    twice = route_message(None, "ctx_a", [Waiter("tsk_1", "ctx_a"), Waiter("tsk_3", "ctx_a")], 8)
    assert isinstance(twice, Ambiguous) and "2 tasks of context ctx_a" in twice.reason
