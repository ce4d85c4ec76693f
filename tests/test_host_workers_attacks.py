"""The WASM worker processes under attack (issue 29's review of murmurd/host/workers/): a
guest's chunk floods and sizes, long cancel reasons, a stopped or killed worker, a component
whose load failed, calls of several sessions on one worker, descriptors across many calls. Each
test asserts the behaviour a hostile guest or a broken worker must meet."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import threading
import time

import pytest
from wasmtime import wat2wasm

from hostile import SPIN, TOOL_SHIM, _TOOL_TYPES, tool_component
from murmurd.host import (
    CallCancelled,
    CallGrant,
    CallGuard,
    CallTrap,
    ComponentHost,
    DeadlineExceeded,
    HostError,
    HostImportError,
    Limits,
    SessionContext,
    ToolInput,
    ToolStatus,
)
from murmurd.host.workers.processes import start_workers

WAIT = 60


def _in_thread(target):  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11])


def _spinning(pid: int, ticks: int = 5) -> None:
    deadline = time.monotonic() + WAIT
    start = _cpu_ticks(pid)
    while _cpu_ticks(pid) - start < ticks:
        assert time.monotonic() < deadline, "the worker never ran the call"
        time.sleep(0.02)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# A tool whose body can call `emit-chunk` ($emit ptr len) on memory it owns.
_CHUNKS_TEMPLATE = """
(component
  (import "murmur:text/chunks@0.1.0" (instance $chunks
      (export "emit-chunk" (func (param "chunk" string)))
      (export "emit-thinking-chunk" (func (param "chunk" string)))))
  (core module $libc
    (memory (export "memory") {pages})
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024))
  (core instance $libc (instantiate $libc))
  (core func $emit (canon lower (func $chunks "emit-chunk") (memory (core memory $libc "memory"))))
  (core module $m
    (import "libc" "memory" (memory 1))
    (import "host" "emit" (func $emit (param i32 i32)))
    (func (export "run") (param i32 i32 i32 i32 i32 i32) (result i32)
      (local $i i32)
      {body}))
  (core instance $i (instantiate $m
     (with "libc" (instance $libc))
     (with "host" (instance (export "emit" (func $emit))))))
  {outer_types}
  (func $run (param "input" $input) (result $result)
    (canon lift (core func $i "run") (memory (core memory $libc "memory")) (realloc (core func $libc "realloc"))))
{shim}  (export "murmur:tool/run@0.1.0" (instance $inst))
)
"""


def chunk_tool(count: int, size: int, *, fill: int = 0x61, then: str = "unreachable") -> bytes:
    """Emit `count` chunks of `size` bytes (all `fill`), then `then` (trap by default)."""
    pages = max(1, (size + 65535) // 65536 + 1)
    body = f"""
      (memory.fill (i32.const 0) (i32.const {fill}) (i32.const {size}))
      (block $done (loop $l
        (br_if $done (i32.ge_u (local.get $i) (i32.const {count})))
        (call $emit (i32.const 0) (i32.const {size}))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $l)))
      {then}"""
    return wat2wasm(_CHUNKS_TEMPLATE.format(pages=pages, body=body, outer_types=_TOOL_TYPES, shim=TOOL_SHIM))


def test_chunk_tool_works(workers: ComponentHost) -> None:
    tool = workers.load_bytes(chunk_tool(3, 4), name="chunky")
    got: list[str] = []
    with pytest.raises(CallTrap):
        workers.call_tool_sync(tool, ToolInput(), on_chunk=got.append)
    assert got == ["aaaa"] * 3


def test_a_flood_of_chunks_is_backpressured_not_buffered(workers: ComponentHost) -> None:
    """The daemon's sink stalls: the worker must block, neither side buffering the flood."""
    assert workers.workers is not None
    wpid = workers.workers.pids[0]
    tool = workers.load_bytes(chunk_tool(20000, 64 * 1024), name="flood")  # 1.3 GB of chunks
    gate = threading.Event()
    seen = [0]

    def sink(text: str) -> None:
        seen[0] += 1
        if seen[0] == 10:
            gate.wait(WAIT)

    guard = CallGuard(600)
    thread, out = _in_thread(lambda: workers.call_tool_sync(tool, ToolInput(), on_chunk=sink, guard=guard))
    deadline = time.monotonic() + WAIT
    while seen[0] < 10:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(2)
    rss = int(open(f"/proc/{wpid}/status").read().split("VmRSS:")[1].split()[0])
    assert rss < 400 * 1024, f"worker RSS {rss} KiB while the daemon is not reading"
    guard.cancel("enough")
    gate.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert isinstance(out.get("error"), CallCancelled), out


@pytest.mark.parametrize("reason", ["\U0001F4A5" * 2000, "\x01" * 2000, '"' * 3000])
def test_a_long_cancel_reason_must_not_kill_the_worker(workers: ComponentHost, reason: str) -> None:
    """send_control cuts the reason to 1024 *characters*, but the JSON can still exceed the
    receiver's 4096-byte buffer (4-byte UTF-8, \\u0001 escapes, \\" escapes): recv truncates the
    SEQPACKET message, the worker's serve() sees a FrameError, returns, and the worker exits,
    failing every call of every session on it."""
    assert workers.workers is not None
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    victim_guard, attacker_guard = CallGuard(600), CallGuard(600)
    victim, vout = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=victim_guard))
    attacker, aout = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=attacker_guard))
    _spinning(workers.workers.pids[0], 10)
    attacker_guard.cancel(reason)
    attacker.join(WAIT)
    assert isinstance(aout.get("error"), CallCancelled), aout
    time.sleep(1)
    try:
        assert victim.is_alive(), f"the other call ended too: {vout}"
        assert workers.workers.pids and workers.workers._workers[0].alive()
    finally:
        victim_guard.cancel("done")
        victim.join(WAIT)


def test_a_sink_failure_with_a_long_message_must_not_kill_the_worker(workers: ComponentHost) -> None:
    """The same through `_import`: the cancel reason is `host import failed: {exc!r}`."""
    assert workers.workers is not None
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    tool = workers.load_bytes(chunk_tool(1, 4), name="chunky")
    victim_guard = CallGuard(600)
    victim, vout = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=victim_guard))
    _spinning(workers.workers.pids[0], 10)

    def sink(text: str) -> None:
        raise RuntimeError("\U0001F4A5" * 2000)

    with pytest.raises(HostImportError):
        workers.call_tool_sync(tool, ToolInput(), on_chunk=sink)
    time.sleep(1)
    try:
        assert victim.is_alive(), f"the other call ended too: {vout}"
    finally:
        victim_guard.cancel("done")
        victim.join(WAIT)


def test_a_stopped_worker_must_not_hang_a_call_past_its_deadline(workers: ComponentHost) -> None:
    """Deadlines run only in the worker: the daemon's reader has no timeout of its own."""
    assert workers.workers is not None
    pid = workers.workers.pids[0]
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    grant = CallGrant(limits=Limits(deadline_seconds=2))
    thread, out = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), grant=grant))
    _spinning(pid, 5)
    os.kill(pid, signal.SIGSTOP)
    try:
        thread.join(15)  # 7x the call's deadline
        assert not thread.is_alive(), "a 2 s call still blocked after 15 s (worker stopped)"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the daemon may have stopped it already
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)
        thread.join(WAIT)


def test_a_stopped_worker_must_not_block_the_thread_that_cancels(workers: ComponentHost) -> None:
    """guard.cancel() runs on the event loop (session/loop.py, host._on_worker). It sends on the
    worker's SEQPACKET control socket under control_lock; once the socket's buffer is full of
    unread control messages (a stuck worker) every open_call and every cancel blocks - the cancel on the event loop thread included.
    (The queue holds ~278 small messages here; the pool has 8 threads, so in the daemon the
    calls wedge long before: a stuck worker takes every call routed to it, forever.)"""
    assert workers.workers is not None
    pid = workers.workers.pids[0]
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    first = CallGuard(600)
    threads = [_in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=first))]
    _spinning(pid, 5)
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(300):  # 300 more calls: each an open_call on the control socket
            threads.append(_in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=CallGuard(600))))
        time.sleep(2)
        canceller, cout = _in_thread(lambda: first.cancel("task cancelled"))
        canceller.join(10)
        assert not canceller.is_alive(), "guard.cancel() blocked for 10 s (the event loop would be wedged)"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
        for thread, _ in threads:
            thread.join(WAIT)


class Answer(SessionContext):
    def __init__(self, text: str, hold: threading.Event | None = None) -> None:
        self.text, self.hold = text, hold
        self.asked = threading.Event()

    def request_input(self, prompt: str) -> str:
        self.asked.set()
        if self.hold is not None:
            self.hold.wait(WAIT)
        return f"{self.text}|{prompt}"


def test_replies_and_chunks_reach_their_own_calls(workers: ComponentHost, artifacts) -> None:
    """Many concurrent calls of a *new* component (load race) on one worker, each session
    answering its own prompt: no reply, chunk or result crosses calls."""
    ask = workers.load(artifacts.fixture("ask"), name="ask-race")
    echo = workers.load(artifacts.example("echo"), name="echo-race")
    results: dict[int, object] = {}
    barrier = threading.Barrier(16)

    def one(n: int) -> None:
        barrier.wait(WAIT)
        if n % 2:
            r = workers.call_tool_sync(ask, ToolInput(data=f'{{"prompt": "p{n}"}}'), session=Answer(f"s{n}"))
            results[n] = r.data
        else:
            chunks: list[str] = []
            r = workers.call_tool_sync(echo, ToolInput(data=f'{{"text": "e{n}"}}'), on_chunk=chunks.append)
            results[n] = (r.data, chunks)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    for n in range(16):
        if n % 2:
            assert results[n] == f"s{n}|p{n}"
        else:
            assert results[n] == (f'{{"text": "e{n}"}}', [f"echo: e{n}"])


def test_a_cancel_reaches_only_its_own_call(workers: ComponentHost) -> None:
    assert workers.workers is not None
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    guards = [CallGuard(600) for _ in range(4)]
    calls = [_in_thread(lambda g=g: workers.call_tool_sync(spin, ToolInput(), guard=g)) for g in guards]
    deadline = time.monotonic() + WAIT
    while not workers.workers._workers[0].ready:  # its imports burn CPU too
        assert time.monotonic() < deadline, "the worker never became ready"
        time.sleep(0.02)
    _spinning(workers.workers.pids[0], 10)
    guards[2].cancel("only me")
    calls[2][0].join(WAIT)
    assert isinstance(calls[2][1].get("error"), CallCancelled)
    time.sleep(1)
    assert all(calls[i][0].is_alive() for i in (0, 1, 3))
    for g in guards:
        g.cancel("end")
    for t, out in calls:
        t.join(WAIT)
        assert isinstance(out.get("error"), CallCancelled), out


def test_a_long_request_input_does_not_hold_the_worker(workers: ComponentHost, artifacts) -> None:
    """One call waits on its session (clock stopped, run-gate place given up): another call on
    the same worker runs and its deadline holds."""
    ask = workers.load(artifacts.fixture("ask"))
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    echo = workers.load(artifacts.example("echo"))
    hold = threading.Event()
    session = Answer("late", hold)
    asker, aout = _in_thread(lambda: workers.call_tool_sync(
        ask, ToolInput(data="q"), session=session, grant=CallGrant(limits=Limits(deadline_seconds=3))))
    assert session.asked.wait(WAIT)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        workers.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=1)))
    assert time.monotonic() - started < 20
    assert workers.call_tool_sync(echo, ToolInput(data="{}")).status is ToolStatus.PASSED
    time.sleep(3.5)  # longer than the asker's deadline: its clock is stopped while it waits
    hold.set()
    asker.join(WAIT)
    assert getattr(aout.get("result"), "data", None) == "late|q", aout


def test_a_cancel_while_request_input_waits(workers: ComponentHost, artifacts) -> None:
    ask = workers.load(artifacts.fixture("ask"))
    hold = threading.Event()
    session = Answer("x", hold)
    guard = CallGuard(600)
    asker, aout = _in_thread(lambda: workers.call_tool_sync(ask, ToolInput(data="q"), session=session, guard=guard))
    assert session.asked.wait(WAIT)
    guard.cancel("stop now")
    hold.set()  # the session's wait ends (as a cancelled task's does)
    asker.join(WAIT)
    assert isinstance(aout.get("error"), CallCancelled), aout


def test_no_descriptor_leaks_across_many_calls_including_failing_ones(workers: ComponentHost, artifacts) -> None:
    assert workers.workers is not None
    wpid = workers.workers.pids[0]
    echo = workers.load(artifacts.example("echo"))
    ask = workers.load(artifacts.fixture("ask"))
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    chunky = workers.load_bytes(chunk_tool(2, 8), name="chunky")
    quick = CallGrant(limits=Limits(deadline_seconds=0.1))

    def bad_sink(_t: str) -> None:
        raise RuntimeError("sink gone")

    class Raising(SessionContext):
        def request_input(self, prompt: str) -> str:
            raise RuntimeError("no")

    def round_() -> None:
        workers.call_tool_sync(echo, ToolInput(data="{}"))
        for call in (
            lambda: workers.call_tool_sync(spin, ToolInput(), grant=quick),
            lambda: workers.call_tool_sync(chunky, ToolInput()),
            lambda: workers.call_tool_sync(chunky, ToolInput(), on_chunk=bad_sink),
            lambda: workers.call_tool_sync(ask, ToolInput(data="q"), session=Raising()),
        ):
            with pytest.raises(HostError):
                call()
        g = CallGuard(600)
        g.cancel("early")
        with pytest.raises(CallCancelled):
            workers.call_tool_sync(spin, ToolInput(), guard=g)

    round_()
    time.sleep(0.5)
    daemon_before, worker_before = _fds(os.getpid()), _fds(wpid)
    for _ in range(15):
        round_()
    time.sleep(0.5)
    gc.collect()
    assert _fds(os.getpid()) <= daemon_before + 2
    assert _fds(wpid) <= worker_before + 2
    threads_in_worker = len(os.listdir(f"/proc/{wpid}/task"))
    assert threads_in_worker < 40, threads_in_worker


def test_a_killed_worker_fails_all_its_calls_restarts_and_leaves_no_zombie(workers: ComponentHost, artifacts) -> None:
    assert workers.workers is not None
    pid = workers.workers.pids[0]
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    ask = workers.load(artifacts.fixture("ask"))
    hold = threading.Event()
    session = Answer("x", hold)
    calls = [_in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=CallGuard(600))) for _ in range(3)]
    asker = _in_thread(lambda: workers.call_tool_sync(ask, ToolInput(data="q"), session=session))
    assert session.asked.wait(WAIT)
    _spinning(pid, 10)
    os.kill(pid, signal.SIGKILL)
    for t, out in calls:
        t.join(WAIT)
        assert isinstance(out.get("error"), CallTrap), out
    hold.set()
    asker[0].join(WAIT)
    assert isinstance(asker[1].get("error"), CallTrap), asker[1]
    time.sleep(0.5)
    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] if os.path.exists(f"/proc/{pid}") else "gone"
    echo = workers.load(artifacts.example("echo"))
    assert workers.call_tool_sync(echo, ToolInput(data="{}")).status is ToolStatus.PASSED
    assert not os.path.exists(f"/proc/{pid}")  # reaped at the next pick
    print("dead worker's state before the next call:", state)


def test_closing_the_host_with_calls_in_flight(artifacts) -> None:
    host = ComponentHost()
    start_workers(host, 1)
    assert host.workers is not None
    pid = host.workers.pids[0]
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    calls = [_in_thread(lambda: host.call_tool_sync(spin, ToolInput(), guard=CallGuard(600))) for _ in range(2)]
    _spinning(pid, 10)
    started = time.monotonic()
    host.close()
    took = time.monotonic() - started
    for t, out in calls:
        t.join(WAIT)
        assert not t.is_alive()
        assert isinstance(out.get("error"), HostError), out
    assert not os.path.exists(f"/proc/{pid}")
    with pytest.raises(HostError):
        host.call_tool_sync(spin, ToolInput())
    print("close took", took, [type(out.get("error")).__name__ + str(out.get("error")) for _, out in calls])


def test_the_worker_inherits_secrets_but_the_guest_sees_only_its_grant(artifacts, monkeypatch) -> None:
    """The existing isolation test sets its secret after the session's worker started; here the
    secret is in the daemon's environment when the worker starts."""
    import json

    monkeypatch.setenv("MURMURD_TEST_SECRET2", "do-not-leak-2")
    host = ComponentHost()
    start_workers(host, 1)
    try:
        assert host.workers is not None
        probe = host.load(artifacts.fixture("probe"))
        result = host.call_tool_sync(probe, ToolInput(), grant=CallGrant(env={"ONLY": "this"}))
        # read once the worker surely runs (right after its exec the kernel may show no environment yet)
        assert b"do-not-leak-2" in open(f"/proc/{host.workers.pids[0]}/environ", "rb").read()
        assert json.loads(result.data)["env"] == {"ONLY": "this"}
        assert "do-not-leak-2" not in result.data
    finally:
        host.close()


def test_restarting_a_worker_does_not_stall_calls_on_the_others(artifacts, tmp_path, monkeypatch) -> None:
    """_pick starts a dead worker's replacement while holding WorkerProcesses._lock (up to
    READY_SECONDS = 120 s): meanwhile every call's _pick *and* _done wait, so a call that has
    already finished on a healthy worker cannot return."""
    import sys

    host = ComponentHost()
    start_workers(host, 2)
    try:
        assert host.workers is not None
        ask = host.load(artifacts.fixture("ask"))
        spin = host.load_bytes(tool_component(SPIN), name="spin")
        hold = threading.Event()
        session = Answer("x", hold)
        asker, aout = _in_thread(lambda: host.call_tool_sync(ask, ToolInput(data="q"), session=session))
        assert session.asked.wait(WAIT)
        busy = host.workers._workers[0] if host.workers._workers[0].in_flight else host.workers._workers[1]
        idle = [w for w in host.workers._workers if w is not busy][0]
        # The replacement worker takes 8 s to start (a loaded machine; a slow disk).
        (tmp_path / "sitecustomize.py").write_text(
            "import os, time\nif os.environ.get('ATTACK_SLOW_WORKER'):\n    time.sleep(8)\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("ATTACK_SLOW_WORKER", "1")
        idle.process.kill()
        idle.process.wait()
        starter, sout = _in_thread(lambda: host.call_tool_sync(
            spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.2))))
        time.sleep(1)  # _pick is now starting the replacement, under the lock
        released = time.monotonic()
        hold.set()
        asker.join(WAIT)
        took = time.monotonic() - released
        starter.join(WAIT)
        assert getattr(aout.get("result"), "data", None) == "x|q", aout
        assert took < 3, f"a finished call on the healthy worker returned {took:.1f} s after its reply"
    finally:
        host.close()


def _hwm_kib(pid: int) -> int:
    return int(open(f"/proc/{pid}/status").read().split("VmHWM:")[1].split()[0])


@pytest.mark.parametrize("fill", [0x61, 0x01])
def test_one_chunk_costs_the_processes_a_bounded_multiple_of_itself(workers: ComponentHost, fill: int) -> None:
    """A 40 MiB chunk (the guest's memory limit is 512 MiB). JSON-escaping a control character
    takes 6 bytes (\\u0001), and frames.send/receive copy the body again: measure the peak RSS
    growth of the worker and of the daemon against the chunk's size."""
    assert workers.workers is not None
    wpid = workers.workers.pids[0]
    size = 40 * 1024 * 1024
    tool = workers.load_bytes(chunk_tool(1, size, fill=fill), name=f"big{fill}")
    w0, d0 = _hwm_kib(wpid), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got: list[int] = []
    with pytest.raises(HostError) as raised:
        workers.call_tool_sync(tool, ToolInput(), on_chunk=lambda t: got.append(len(t)))
    w1, d1 = _hwm_kib(wpid), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    chunk_mib = size / 2**20
    print(f"\nfill={fill:#x}: chunk {chunk_mib:.0f} MiB; worker peak +{(w1 - w0) / 1024:.0f} MiB;"
          f" daemon peak +{(d1 - d0) / 1024:.0f} MiB; delivered {got and got[0] / 2**20} MiB; {raised.value!r}")
    assert got == [size]
    assert (d1 - d0) / 1024 < 3 * chunk_mib, "the daemon's peak grew more than 3x the chunk"
    # In-process, the same chunk grows the daemon's peak by about 5x (the guest's memory and
    # wasmtime-py's lifted copies: +202 MiB for 40 MiB); the frame adds its UTF-8 once.
    assert (w1 - w0) / 1024 < 7 * chunk_mib, "the worker's peak grew more than 7x the chunk"


def test_a_component_whose_load_failed_once_is_not_poisoned_on_that_worker(artifacts, tmp_path, monkeypatch) -> None:
    """The daemon marks (digest, name) as sent once the bytes are written, before the worker has
    loaded them. If the worker's load fails (here: injected once, as ENOMEM under memory pressure
    would), the CompileError escapes _serve_call into the executor's future unreported, the
    daemon reports 'the WASM worker process running the call ended' although it did not, and
    keeps believing the worker has the component: every later call of it on that worker sends
    no bytes, waits LOAD_WAIT_SECONDS (120 s) in the worker, and fails."""
    flag = tmp_path / "fail-once"
    flag.write_text("")
    (tmp_path / "sitecustomize.py").write_text(
        "import os\n"
        "flag = os.environ.get('ATTACK_FAIL_LOAD_ONCE')\n"
        "if flag:\n"
        "    from murmurd.host.host import ComponentHost\n"
        "    original = ComponentHost.load_compiled\n"
        "    def load_compiled(self, compiled, *, name, sha256):\n"
        "        if name == 'victim' and os.path.exists(flag):\n"
        "            os.unlink(flag)\n"
        "            raise MemoryError('injected: cannot map the component')\n"
        "        return original(self, compiled, name=name, sha256=sha256)\n"
        "    ComponentHost.load_compiled = load_compiled\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ATTACK_FAIL_LOAD_ONCE", str(flag))
    host = ComponentHost()
    start_workers(host, 1)
    try:
        echo = host.load(artifacts.example("echo"), name="victim")
        with pytest.raises(HostError) as first:
            host.call_tool_sync(echo, ToolInput(data="{}"))
        print("\nfirst call:", repr(first.value))
        second, out = _in_thread(lambda: host.call_tool_sync(echo, ToolInput(data="{}")))
        second.join(20)
        assert not second.is_alive(), "the second call of the component is stuck waiting for bytes never sent"
        assert getattr(out.get("result"), "status", None) is ToolStatus.PASSED, out
    finally:
        host.close()


def test_a_call_queued_for_a_place_in_the_worker_honours_cancel_and_deadline(workers: ComponentHost) -> None:
    """The worker's run gate has cpu_count // 2 places (1 here): a call waiting behind a spinner
    must still end at its cancel, at its deadline, and at its outer call's cancel."""
    assert workers.workers is not None
    spin = workers.load_bytes(tool_component(SPIN), name="spin")
    hogs = [CallGuard(600) for _ in range(max(1, (os.cpu_count() or 2) // 2))]
    running = [_in_thread(lambda g=g: workers.call_tool_sync(spin, ToolInput(), guard=g)) for g in hogs]
    _spinning(workers.workers.pids[0], 10)
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            workers.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=1)))
        assert time.monotonic() - started < 15
        queued = CallGuard(600)
        t, out = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=queued))
        time.sleep(1)
        queued.cancel("stop waiting")
        t.join(15)
        assert isinstance(out.get("error"), CallCancelled), out
        outer = CallGuard(600)
        t, out = _in_thread(lambda: workers.call_tool_sync(spin, ToolInput(), guard=CallGuard(600, parent=outer)))
        time.sleep(1)
        outer.cancel("outer stop")
        t.join(15)
        assert isinstance(out.get("error"), CallCancelled), out
    finally:
        for g in hogs:
            g.cancel("end")
        for t, _ in running:
            t.join(WAIT)
