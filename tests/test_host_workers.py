"""Tool and driver calls in WASM worker processes (murmurd/host/workers/, issue 29): what the
guest asks of its session comes back to the daemon's thread, a cancel or a deadline of the
call or of a call it is nested in stops the guest in the worker, and a worker that dies fails
only its own calls and is started again. The behaviour every call shares (isolation, limits,
the network grant) runs in both forms in test_host_isolation, test_host_limits and
test_host_network."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time

import pytest

from hostile import SPIN, tool_component
from murmurd.host import (
    AbortTask,
    CallCancelled,
    CallGrant,
    CallGuard,
    CallTrap,
    ComponentHost,
    DeadlineExceeded,
    HostImportError,
    Limits,
    SessionContext,
    ToolInput,
    ToolStatus,
)
from murmurd.host.workers.processes import start_workers
from murmurd.host.workers import frames

WAIT = 60  # what a test waits at most for an event that must happen (a loaded machine)


class Supervisor(SessionContext):
    """Answers request-input as a session would, from the thread that made the call."""

    def __init__(self, answer: str | BaseException) -> None:
        self.answer = answer
        self.prompts: list[tuple[str, int]] = []

    def request_input(self, prompt: str) -> str:
        self.prompts.append((prompt, threading.get_ident()))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _in_thread(target) -> tuple[threading.Thread, list[BaseException]]:  # type: ignore[no-untyped-def]
    raised: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def _running(host: ComponentHost) -> None:
    """Wait until the worker holds a call (its CPU shows the spinner running)."""
    assert host.workers is not None
    pid = host.workers.pids[0]
    deadline = time.monotonic() + WAIT

    def ticks() -> int:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11])

    while not host.workers._workers[0].ready:  # its imports burn CPU too
        assert time.monotonic() < deadline, "the worker never became ready"
        time.sleep(0.02)
    start = ticks()
    while ticks() - start < 5:  # 5 clock ticks of guest code
        assert time.monotonic() < deadline, "the worker never ran the call"
        time.sleep(0.02)


def test_a_call_runs_in_the_worker_and_its_chunks_reach_the_caller(workers: ComponentHost, artifacts) -> None:
    echo = workers.load(artifacts.example("echo"))
    chunks: list[tuple[str, int]] = []
    result = workers.call_tool_sync(echo, ToolInput(data='{"text": "hi"}'),
                                    on_chunk=lambda text: chunks.append((text, threading.get_ident())))
    assert result.status is ToolStatus.PASSED and result.data == '{"text": "hi"}'
    assert chunks == [("echo: hi", threading.get_ident())]  # on the calling thread, as in-process
    assert workers.workers is not None and workers.workers.started == 1
    assert workers.workers.pids[0] != os.getpid()


def test_request_input_is_answered_by_the_callers_session(workers: ComponentHost, artifacts) -> None:
    ask = workers.load(artifacts.fixture("ask"))
    supervisor = Supervisor("yes, go on")
    result = workers.call_tool_sync(ask, ToolInput(data='{"prompt": "may I?"}'), session=supervisor)
    assert result.status is ToolStatus.PASSED and result.data == "yes, go on"
    assert supervisor.prompts == [("may I?", threading.get_ident())]


@pytest.mark.parametrize("form", ["in-process", "worker process"])
def test_a_reply_holding_a_lone_surrogate_reaches_the_guest_as_a_replacement_character(
        form: str, host: ComponentHost, worker_host: ComponentHost, artifacts) -> None:
    """No UTF-8 holds half an emoji pair: the reply is made valid where it enters, as a model's
    text is (murmurd/text.py), instead of failing the call outside `HostError`."""
    runner = host if form == "in-process" else worker_host
    ask = runner.load(artifacts.fixture("ask"))
    result = runner.call_tool_sync(ask, ToolInput(data="which?"), session=Supervisor("half \ud83d of it"))
    assert result.status is ToolStatus.PASSED and result.data == "half \ufffd of it"


def test_a_failure_of_the_sessions_answer_ends_the_call_with_that_failure(workers: ComponentHost, artifacts) -> None:
    """As in-process: the import's exception is the call's cause (`input-timeout` aborts the task)."""
    ask = workers.load(artifacts.fixture("ask"))
    abort = AbortTask("input-timeout: no reply within 5 s")
    with pytest.raises(HostImportError) as raised:
        workers.call_tool_sync(ask, ToolInput(data="anyone?"), session=Supervisor(abort))
    assert raised.value.failure is abort
    assert "input-timeout" in str(raised.value)
    echo = workers.load(artifacts.example("echo"))  # the worker goes on
    assert workers.call_tool_sync(echo, ToolInput(data="{}")).status is ToolStatus.PASSED


def test_a_chunk_sink_that_raises_ends_the_call_with_that_failure(workers: ComponentHost, artifacts) -> None:
    echo = workers.load(artifacts.example("echo"))

    def sink(_text: str) -> None:
        raise RuntimeError("the stream is gone")

    with pytest.raises(HostImportError, match="the stream is gone") as raised:
        workers.call_tool_sync(echo, ToolInput(data='{"text": "x"}'), on_chunk=sink)
    assert isinstance(raised.value.failure, RuntimeError)


def test_many_calls_at_once_all_pass(workers: ComponentHost, artifacts) -> None:
    """16 callers, 20 calls each: the worker answers some before the daemon's thread has done
    writing on the call's socket (a small request goes before the socket is passed), and no
    call may read that as a lost worker."""
    echo = workers.load(artifacts.example("echo"))
    failures: list[object] = []

    def caller(k: int) -> None:
        for i in range(20):
            try:
                result = workers.call_tool_sync(echo, ToolInput(data=f'{{"text": "{k}.{i}"}}'))
                if result.data != f'{{"text": "{k}.{i}"}}':
                    failures.append(result)
            except Exception as exc:  # noqa: BLE001 - the test reads them
                failures.append(exc)

    callers = [threading.Thread(target=caller, args=(k,)) for k in range(16)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(WAIT * 5)
    assert not any(thread.is_alive() for thread in callers)
    assert failures == []


class HeldSupervisor(SessionContext):
    """Answers request-input once `answer` is set: a supervisor taking its time."""

    def __init__(self) -> None:
        self.asked = threading.Semaphore(0)
        self.answer = threading.Event()

    def request_input(self, prompt: str) -> str:
        self.asked.release()
        assert self.answer.wait(WAIT)
        return "now"


def test_calls_waiting_for_input_or_spinning_do_not_hold_up_the_others(workers: ComponentHost, artifacts) -> None:
    """The worker runs its calls on its run gate's places (runners.py): three calls waiting for
    a supervisor and one guest spinning until cancelled, and still every other call runs."""
    ask, echo = workers.load(artifacts.fixture("ask")), workers.load(artifacts.example("echo"))
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    supervisor = HeldSupervisor()
    waiting = [_in_thread(lambda: workers.call_tool_sync(ask, ToolInput(data="go?"), session=supervisor))
               for _ in range(3)]
    for _ in waiting:
        assert supervisor.asked.acquire(timeout=WAIT), "a call never asked"
    spin_guard = CallGuard(600)
    spinner, spin_raised = _in_thread(lambda: workers.call_tool_sync(
        spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=spin_guard))
    _running(workers)
    try:
        results = [workers.call_tool_sync(echo, ToolInput(data=f'{{"text": "{i}"}}')) for i in range(10)]
        assert [r.data for r in results] == [f'{{"text": "{i}"}}' for i in range(10)]
        assert not supervisor.answer.is_set() and spinner.is_alive()
    finally:
        supervisor.answer.set()
        spin_guard.cancel("done")
    for thread, raised in waiting:
        thread.join(WAIT)
        assert not thread.is_alive() and not raised
    spinner.join(WAIT)
    assert len(spin_raised) == 1 and isinstance(spin_raised[0], CallCancelled)


def test_a_cancel_of_the_call_stops_the_guest_in_the_worker(workers: ComponentHost) -> None:
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    guard = CallGuard(600)
    spinner, raised = _in_thread(lambda: workers.call_tool_sync(
        spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=600)), guard=guard))
    _running(workers)
    guard.cancel("the supervisor said stop")
    spinner.join(WAIT)
    assert not spinner.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], CallCancelled), raised
    assert "the supervisor said stop" in str(raised[0])
    assert guard._tickers == set()  # the call's link to the worker went with it


def test_a_cancel_of_the_call_it_is_nested_in_reaches_the_worker(workers: ComponentHost) -> None:
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    outer = CallGuard(600)
    guard = CallGuard(600, parent=outer)
    spinner, raised = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=guard))
    _running(workers)
    outer.cancel("the capsule was cancelled")
    spinner.join(WAIT)
    assert len(raised) == 1 and isinstance(raised[0], CallCancelled), raised
    assert "the capsule was cancelled" in str(raised[0])


def test_a_cancel_before_the_call_starts_stops_it_at_once(workers: ComponentHost) -> None:
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    guard = CallGuard(600)
    guard.cancel("cancelled before it began")
    with pytest.raises(CallCancelled, match="cancelled before it began"):
        workers.call_tool_sync(spin, ToolInput(), guard=guard)


def test_the_deadline_of_the_call_it_is_nested_in_holds_in_the_worker(workers: ComponentHost) -> None:
    """A tool keeps to its capsule's deadline: 1 s left of the outer call's 30 s."""
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    outer = CallGuard(30)
    outer.deadline_at = time.monotonic() + 1.0  # its clock started 29 s ago
    with pytest.raises(DeadlineExceeded, match="spin: deadline exceeded after 30 s"):
        workers.call_tool_sync(spin, ToolInput(), guard=CallGuard(600, parent=outer))


def test_a_worker_that_dies_fails_its_call_and_another_starts(workers: ComponentHost, artifacts) -> None:
    assert workers.workers is not None
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    guard = CallGuard(600)
    spinner, raised = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=guard))
    _running(workers)
    os.kill(workers.workers.pids[0], signal.SIGKILL)
    spinner.join(WAIT)
    assert len(raised) == 1 and isinstance(raised[0], CallTrap), raised
    assert "the WASM worker process running the call ended" in str(raised[0])
    echo = workers.load(artifacts.example("echo"))
    assert workers.call_tool_sync(echo, ToolInput(data='{"n": 1}')).data == '{"n": 1}'
    assert workers.workers.started == 2


def test_sigint_and_sigterm_to_the_group_leave_the_worker_to_the_daemon(workers: ComponentHost, artifacts) -> None:
    """A terminal's Ctrl-C or a service manager's stop reaches every process of the group: the
    daemon drains its running calls, so the worker must not end before it is told."""
    assert workers.workers is not None
    pid = workers.workers.pids[0]
    echo = workers.load(artifacts.example("echo"))
    assert workers.call_tool_sync(echo, ToolInput(data="{}")).status is ToolStatus.PASSED  # it is up
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    assert workers.call_tool_sync(echo, ToolInput(data="{}")).status is ToolStatus.PASSED
    assert workers.workers.pids == [pid] and workers.workers.started == 1


def test_closing_the_host_ends_its_workers(artifacts) -> None:
    host = ComponentHost()
    start_workers(host, 2)
    assert host.workers is not None
    pids = host.workers.pids
    host.close()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_frame_over_the_limit_or_not_of_the_protocol_is_refused() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack(">I", frames.MAX_FRAME + 1))
        with pytest.raises(frames.FrameError, match="over the"):
            frames.receive(ours, frames.FromWorker)
        body = b'{"kind": "done", "status": "passed"}'  # fields missing
        theirs.sendall(struct.pack(">I", len(body)) + body)
        with pytest.raises(frames.FrameError, match="not a frame of this protocol"):
            frames.receive(ours, frames.FromWorker)
        theirs.close()
        with pytest.raises(frames.FrameError, match="closed"):
            frames.receive(ours, frames.FromWorker)


def test_one_components_bytes_under_two_names_keep_their_names(workers: ComponentHost) -> None:
    """The worker keeps components by digest and name: a failure names the artifact called."""
    wasm = tool_component(SPIN)
    first, second = workers.load_bytes(wasm, name="first"), workers.load_bytes(wasm, name="second")
    quick = CallGrant(limits=Limits(deadline_seconds=0.2))
    for loaded in (first, second, first):
        with pytest.raises(DeadlineExceeded, match=f"^{loaded.name}: deadline exceeded after 0.2 s"):
            workers.call_tool_sync(loaded, ToolInput(), grant=quick)


def _children(pid: int) -> list[int]:
    return [int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in open(f"/proc/{pid}/task/{task}/children").read().split()]


@pytest.mark.parametrize("processes", [None, "0", "2"])
def test_serve_runs_its_driver_in_as_many_workers_as_asked(tmp_path, processes: str | None) -> None:
    """`murmurd serve` starts one worker per two cores by default (at least one), as many as
    `--wasm-processes` says, or none; the task's answer is the same either way, and the
    workers end with the daemon."""
    from a2akit import chaos_capsule, serving

    args = () if processes is None else ("--wasm-processes", processes)
    with serving(chaos_capsule(tmp_path), tmp_path / "state", *args) as served:
        task = served.send("hello there")
        done = served.wait_state(task["id"], "completed", timeout=120)
        assert "hello there" in json.dumps(done)
        workers = _children(served.proc.pid)
        expected = max(1, (os.cpu_count() or 2) // 2) if processes is None else int(processes)
        assert len(workers) == expected, workers
        for pid in workers:
            assert "murmurd.host.workers.worker" in open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    deadline = time.monotonic() + WAIT
    for pid in workers:  # the daemon has exited: its workers end with their control sockets
        while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
            assert time.monotonic() < deadline, f"worker {pid} outlived its daemon"
            time.sleep(0.05)
