"""Gap frames on the A2A framings (issue 29): what a subscriber that fell behind is told."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from murmurd.a2a import wire
from murmurd.a2a.core.stream import EventLog
from murmurd.a2a.core.tasks import TaskRecord, TaskState, new_context_id, new_task_id
from murmurd.a2a.wire import Dialect


def _working() -> TaskRecord:
    return TaskRecord(id=new_task_id(), context_id=new_context_id(), state=TaskState.WORKING)


def _event(dialect: Dialect, rendered: dict) -> dict:
    return rendered["statusUpdate"] if dialect is Dialect.V10 else rendered


@pytest.mark.parametrize("dialect", [Dialect.V02, Dialect.V03, Dialect.V10])
def test_a_gap_renders_as_a_non_final_status_update_saying_what_was_dropped(dialect: Dialect) -> None:
    record = _working()
    renderer = wire.StreamRenderer(dialect)
    rendered = renderer.render("gap", record, {"first_available_id": 120, "after_id": 40})
    assert rendered is not None
    event = _event(dialect, rendered)
    assert event["metadata"] == {"murmurd": {"gap": {"firstAvailableId": 120, "afterId": 40}}}
    assert event.get("final", False) is False
    text = "".join(part["text"] for part in event["status"]["message"]["parts"])
    assert "events 41 to 119" in text and "complete result" in text
    assert event["status"]["state"] in ("working", "TASK_STATE_WORKING")


def test_one_event_lost_is_said_in_the_singular() -> None:
    rendered = wire.render_stream_event(Dialect.V03, "gap", _working(), {"first_available_id": 12, "after_id": 10})
    text = rendered["status"]["message"]["parts"][0]["text"]
    assert "event 11 of this capsule's stream was dropped" in text and "events" not in text.split(";")[0]


def test_the_a2a_sdk_reads_the_1_0_gap_frame_as_a_status_update_with_its_metadata() -> None:
    rendered = wire.render_stream_event(Dialect.V10, "gap", _working(), {"first_available_id": 9, "after_id": 3})
    parsed = json_format.ParseDict(rendered, pb.StreamResponse())
    assert parsed.WhichOneof("payload") == "status_update"
    assert json_format.MessageToDict(parsed.status_update.metadata) == {
        "murmurd": {"gap": {"firstAvailableId": 9, "afterId": 3}}}


@pytest.mark.parametrize("dialect", [Dialect.V02, Dialect.V03, Dialect.V10])
def test_a_gap_from_an_earlier_run_says_so_and_never_reads_as_final(dialect: Dialect) -> None:
    finished = TaskRecord(id=new_task_id(), context_id=new_context_id(), state=TaskState.COMPLETED,
                          result_text="done")
    event = _event(dialect, wire.render_stream_event(dialect, "gap", finished, {"first_available_id": 7}))
    assert event["metadata"]["murmurd"]["gap"] == {"firstAvailableId": 7}
    assert event.get("final", False) is False and "COMPLETED" not in str(event["status"]["state"]).upper()
    assert "earlier daemon run" in event["status"]["message"]["parts"][0]["text"]


def test_the_log_s_gap_carries_the_resume_point() -> None:
    async def scenario() -> None:
        log = EventLog(buffer_size=4)
        for n in range(10):
            log.publish("text", "t1", {"text": f"w{n}", "final": False})
        sub = log.subscribe(after_id=2, task_id="t1")
        gap = await sub.__anext__()
        assert (gap.type, gap.after_id, gap.data) == ("gap", 2, {"first_available_id": 7})
        assert [e.id for e in sub.take_ready(10)] == [7, 8, 9, 10]
        stale = log.subscribe(after_id=99, task_id="t1")  # an id from an earlier run
        assert (await stale.__anext__()).after_id is None

    asyncio.run(scenario())
