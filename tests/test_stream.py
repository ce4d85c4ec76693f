"""The per-capsule event log: replay, gaps, fan-out, slow subscribers (issue 5, runtime-notes §6)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import aclosing

import pytest

from murmurd.a2a.core.stream import HEARTBEAT_SECONDS, EventLog, StreamEvent, Subscription, sse_frame

pytestmark = pytest.mark.anyio

TASK = "tsk_" + "a" * 32
OTHER = "tsk_" + "b" * 32


def text(log: EventLog, seq: int, task_id: str = TASK) -> StreamEvent:
    return log.publish("text", task_id, {"id": task_id, "text": f"chunk {seq}", "final": False})


def final_status(log: EventLog, task_id: str = TASK) -> StreamEvent:
    return log.publish("status", task_id, {"id": task_id, "context_id": "ctx_1",
                                            "status": {"state": "completed", "message": "done"}, "final": True})


async def take(sub: Subscription, n: int, timeout: float = 5.0) -> list[StreamEvent]:
    out: list[StreamEvent] = []

    async def run() -> None:
        async for event in sub:
            out.append(event)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def drain(sub: Subscription, timeout: float = 5.0) -> list[StreamEvent]:
    """Everything until the subscription ends by itself."""
    async def run() -> list[StreamEvent]:
        return [event async for event in sub]

    return await asyncio.wait_for(run(), timeout)


async def nothing_within(sub: Subscription, seconds: float = 0.05) -> bool:
    try:
        await asyncio.wait_for(sub.__anext__(), seconds)
    except TimeoutError:
        return True
    return False


async def test_ids_are_monotonic_from_one_and_final_only_for_status() -> None:
    log = EventLog()
    assert log.last_id == 0
    first = text(log, 0)
    closing_text = log.publish("text", TASK, {"id": TASK, "text": "", "final": True})
    status = final_status(log)
    assert (first.id, closing_text.id, status.id) == (1, 2, 3)
    assert log.last_id == 3
    assert not first.final and not closing_text.final and status.final
    assert not log.publish("status", TASK, {"final": True}, final=False).final
    with pytest.raises(ValueError):
        log.publish("gap", TASK, {})


async def test_replay_after_id_then_live() -> None:
    log = EventLog()
    for i in range(10):
        text(log, i)
    sub = log.subscribe(after_id=4, task_id=TASK)
    assert [e.id for e in await take(sub, 6)] == [5, 6, 7, 8, 9, 10]
    for i in range(10, 13):
        text(log, i)
    assert [e.id for e in await take(sub, 3)] == [11, 12, 13]
    sub.close()
    assert log.subscriber_count == 0

    whole = log.subscribe(after_id=0)
    assert [e.id for e in await take(whole, 13)] == list(range(1, 14))
    whole.close()


async def test_resume_with_last_event_id_while_events_keep_arriving() -> None:
    """Disconnect and reconnect several times mid-stream: every id exactly once, in order."""
    log = EventLog(buffer_size=4096)
    total = 2000

    async def produce() -> None:
        for i in range(total - 1):
            text(log, i)
            if i % 7 == 0:
                await asyncio.sleep(0)
        final_status(log)

    producer = asyncio.create_task(produce())
    seen: list[int] = []
    last_event_id: int | None = None
    reconnects = 0
    while True:
        sub = log.subscribe(after_id=last_event_id, task_id=TASK)
        if last_event_id is None:
            last_event_id = sub.resume_after  # a fresh client starts where the log is now
            seen.extend(range(1, last_event_id + 1))
        got = 0
        ended = True
        async for event in sub:
            assert event.type != "gap"
            assert event.id is not None
            seen.append(event.id)
            last_event_id = event.id
            got += 1
            if got == 150:  # the client drops the connection
                ended = False
                break
        sub.close()
        if ended:
            break
        reconnects += 1
        await asyncio.sleep(0)
    await producer
    assert reconnects >= 5
    assert seen == list(range(1, total + 1))
    assert log.subscriber_count == 0


async def test_replay_to_live_switch_has_no_duplicates_or_loss() -> None:
    """Events published between subscribing and the first read land once, after the replay."""
    log = EventLog()
    for i in range(20):
        text(log, i)
    sub = log.subscribe(after_id=10, task_id=TASK)
    for i in range(20, 30):  # queued live while the replay is still unread
        text(log, i)
    final_status(log)
    events = await drain(sub)
    assert [e.id for e in events] == list(range(11, 32))
    assert events[-1].final


async def test_gap_after_eviction() -> None:
    log = EventLog(buffer_size=10)
    for i in range(30):
        text(log, i)
    assert log.first_available_id == 21

    sub = log.subscribe(after_id=5, task_id=TASK)
    events = await take(sub, 11)
    gap = events[0]
    assert (gap.type, gap.id, gap.data) == ("gap", None, {"first_available_id": 21})
    assert [e.id for e in events[1:]] == list(range(21, 31))
    text(log, 30)
    assert [e.id for e in await take(sub, 1)] == [31]
    sub.close()

    exact = log.subscribe(after_id=21, task_id=TASK)  # 22.. are all still buffered: no gap
    assert [e.id for e in await take(exact, 10)] == list(range(22, 32))
    exact.close()

    one_evicted = log.subscribe(after_id=20)  # 21 was evicted when 31 came in
    assert [(e.type, e.id) for e in await take(one_evicted, 2)] == [("gap", None), ("text", 22)]
    one_evicted.close()

    stale = log.subscribe(after_id=10_000)  # a Last-Event-ID from before a restart
    events = await take(stale, 11)
    assert events[0].type == "gap" and events[0].data == {"first_available_id": 22}
    assert [e.id for e in events[1:]] == list(range(22, 32))
    stale.close()


async def test_fifty_watchers_of_one_task_receive_every_event_in_order() -> None:
    log = EventLog()
    subs = [log.subscribe(task_id=TASK) for _ in range(50)]
    readers = [asyncio.create_task(drain(sub, timeout=10)) for sub in subs]
    expected: list[int] = []
    for i in range(499):
        expected.append(text(log, i).id or 0)
        if i % 3 == 0:
            text(log, i, task_id=OTHER)  # another task's events are not theirs
        if i % 50 == 0:
            await asyncio.sleep(0)
    expected.append(final_status(log).id or 0)
    text(log, 999)  # after the final status: nobody is listening any more

    results = await asyncio.gather(*readers)
    for events in results:
        assert [e.id for e in events] == expected
        assert all(e.task_id == TASK for e in events)
        assert events[-1].final and events[-1].type == "status"
    assert log.subscriber_count == 0
    assert not any(sub.lagged for sub in subs)


async def test_a_subscriber_that_stops_reading_does_not_stall_the_task() -> None:
    queue = 32
    log = EventLog(buffer_size=1024, subscriber_queue=queue)
    stuck = log.subscribe(task_id=TASK)
    live = log.subscribe(task_id=TASK)
    reader = asyncio.create_task(drain(live))

    started = time.perf_counter()
    for i in range(10 * queue - 1):
        text(log, i)  # synchronous; returns at once whatever the stuck subscriber does
        if i % 8 == 0:
            await asyncio.sleep(0)  # let the healthy reader run
    final_status(log)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5

    received = await reader
    assert [e.id for e in received] == list(range(1, 10 * queue + 1))
    assert stuck.lagged and stuck.pending <= queue
    assert log.subscriber_count == 0  # the stuck one was dropped, the live one closed on final

    # When it finally reads, it gets what it had queued, ends, and resumes without loss.
    first_part = await drain(stuck)
    assert [e.id for e in first_part] == list(range(1, queue + 1))
    resumed = await drain(log.subscribe(after_id=stuck.resume_after, task_id=TASK))
    assert [e.id for e in first_part + resumed] == list(range(1, 10 * queue + 1))


async def test_a_burst_with_many_stuck_subscribers_stays_bounded_and_fast() -> None:
    log = EventLog(buffer_size=256, subscriber_queue=64)
    stuck = [log.subscribe() for _ in range(100)]
    started = time.perf_counter()
    for i in range(20_000):
        text(log, i)
        assert len(log.buffered()) <= 256
    assert time.perf_counter() - started < 1.0
    assert log.subscriber_count == 0
    assert all(sub.lagged and sub.pending == 64 for sub in stuck)
    assert len(log.buffered()) == 256
    assert log.buffered()[0].id == 20_000 - 255


async def test_follow_resumes_a_lagged_subscription_by_itself() -> None:
    log = EventLog(buffer_size=4096, subscriber_queue=16)
    got: list[int] = []

    async def read() -> None:
        async with aclosing(log.follow(task_id=TASK)) as events:
            async for event in events:
                assert event.id is not None
                got.append(event.id)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    for i in range(999):  # one synchronous burst: the reader lags many times over
        text(log, i)
    final_status(log)
    await asyncio.wait_for(reader, 5)
    assert got == list(range(1, 1001))
    assert log.subscriber_count == 0


async def test_follow_reports_a_gap_when_it_fell_behind_the_buffer() -> None:
    log = EventLog(buffer_size=50, subscriber_queue=10)
    events: list[StreamEvent] = []

    async def read() -> None:
        async with aclosing(log.follow(task_id=TASK)) as stream:
            async for event in stream:
                events.append(event)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    for i in range(199):
        text(log, i)
    final_status(log)
    await asyncio.wait_for(reader, 5)
    ids = [e.id for e in events]
    assert ids[:10] == list(range(1, 11))
    assert events[10].type == "gap" and events[10].data == {"first_available_id": 151}
    assert ids[11:] == list(range(151, 201))


async def test_watch_subscriber_sees_every_task_and_stays_open() -> None:
    log = EventLog()
    watch = log.subscribe(task_id=None, close_on_final=False)
    published = [text(log, 0, TASK), final_status(log, TASK), text(log, 0, OTHER), final_status(log, OTHER)]
    events = await take(watch, 4)
    assert events == published
    assert [e.task_id for e in events] == [TASK, TASK, OTHER, OTHER]
    assert await nothing_within(watch)
    assert log.subscriber_count == 1
    later = text(log, 1, "tsk_" + "c" * 32)
    assert await take(watch, 1) == [later]
    watch.close()
    assert log.subscriber_count == 0
    assert await drain(watch) == []


async def test_close_ends_a_waiting_iteration() -> None:
    log = EventLog()
    sub = log.subscribe(task_id=TASK)
    waiting = asyncio.create_task(drain(sub))
    await asyncio.sleep(0.01)
    sub.close()
    assert await waiting == []
    async with log.subscribe() as scoped:
        assert log.subscriber_count == 1
    assert scoped.closed and log.subscriber_count == 0


async def test_publish_threadsafe_from_worker_threads_preserves_order() -> None:
    log = EventLog(buffer_size=8192, subscriber_queue=8192)
    loop = asyncio.get_running_loop()
    watch = log.subscribe(close_on_final=False)
    per_thread = 1000

    def worker(task_id: str) -> None:
        for i in range(per_thread):
            log.publish_threadsafe(loop, "thinking" if i % 2 else "text", task_id,
                                   {"id": task_id, "text": str(i), "final": False})

    threads = [threading.Thread(target=worker, args=(t,)) for t in (TASK, OTHER)]
    for thread in threads:
        thread.start()
    events = await take(watch, 2 * per_thread)
    for thread in threads:
        thread.join()
    watch.close()
    assert [e.id for e in events] == list(range(1, 2 * per_thread + 1))
    for task_id in (TASK, OTHER):
        assert [int(e.data["text"]) for e in events if e.task_id == task_id] == list(range(per_thread))


async def test_sse_frames() -> None:
    log = EventLog(buffer_size=1)
    event = log.publish("artifact", TASK, {"id": TASK, "artifact": {"tool_name": "fetch", "content": "é"}})
    frame = sse_frame(event)
    assert frame == {"id": "1", "event": "artifact", "data": frame["data"]}
    assert json.loads(frame["data"]) == {"id": TASK, "artifact": {"tool_name": "fetch", "content": "é"}}
    text(log, 1)
    gap = (await take(log.subscribe(after_id=0), 1))[0]
    assert sse_frame(gap) == {"event": "gap", "data": '{"first_available_id":2}'}
    assert HEARTBEAT_SECONDS == 15
