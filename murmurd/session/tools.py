"""The model-visible tools of a staged capsule and how a tool call is carried out.

Resolution order (upstream's dispatch): a native tool (`implementation: native`,
murmurd/session/native.py), a shell binary in `capabilities.shell.allow`, a skill
(`tools/<name>/skill.md`, returned verbatim), then a WASM tool. Anything else is an error
result fed back to the model; the loop goes on.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from murmurd.host import ComponentHost, HostError, ToolInput, ToolStatus
from murmurd.session.data_path import DataPathError, read_data_path
from murmurd.session.driver_protocol import DEFAULT_PARAMETERS, ToolSpec
from murmurd.session.failures import SessionEnded, raise_if_aborted
from murmurd.session.native import NativeToolError, call_native
from murmurd.session.own_thread import on_own_thread
from murmurd.session.rlimits import ShellLimits
from murmurd.session.shell import display_command, prepare_shell, run_prepared, split_command
from murmurd.session.shell_egress import refusal_reporter, shell_egress_grant
from murmurd.session.shell_model import (
    ShellFailed,
    ShellInvocation,
    ShellOutcome,
    ShellPolicy,
    ShellRefused,
    WorkdirExceeded,
)
from murmurd.session.shell_output import format_shell_result
from murmurd.session.workdir_guard import WorkdirGuard
from murmurd.staging.grants import containment_plan
from murmurd.staging.stage import SHELL_TOOL_SCHEMA, StagedCapsule
from murmurd.workdir import log_file

RESERVED_METADATA = ("state_effect", "resource_id")


@dataclass
class ToolOutcome:
    """What one tool call produced: the text the model sees and what the trace records."""

    text: str
    is_error: bool
    event_type: str  # tool_call | skill_call | shell
    trace: dict[str, Any] = field(default_factory=dict)
    shell: ShellOutcome | None = None


@dataclass(frozen=True)
class ShellCall:
    """A shell call checked and resolved once, off the event loop: what the decision point
    describes and what then runs. `refusal` when the call is refused before anything runs."""

    args: list[str]
    script: str | None
    command: str  # as the model wrote it
    invocation: ShellInvocation | None
    refusal: str | None = None

    @property
    def shape(self) -> ShellShape | None:
        if self.invocation is None:
            return None
        return ShellShape(self.invocation.binary_path, display_command(self.args, self.script),
                          self.invocation.argv, self.script)


@dataclass(frozen=True)
class ShellShape:
    """A shell call as `shell-event` describes it, before it runs."""

    binary: str  # canonical absolute path, or the bare name when nothing resolved
    command: str  # display string, cut at 200 characters
    argv: list[str]  # untruncated, argv[0] included
    script: str | None  # the `-c` body for a shell interpreter


def model_tools(staged: StagedCapsule, *, release_prompt_artifact: bool = False) -> list[ToolSpec]:
    """Every tool the model may call: WASM tools, skills (but the system-prompt skill, unless
    `--system-prompt` released it for this run), shell. Hooks and drivers are never among them."""
    inference = staged.manifest.inference
    prompt_skill = inference.system_prompt_artifact if inference and not release_prompt_artifact else None
    specs: list[ToolSpec] = []
    for artifact in staged.artifacts.values():
        own = artifact.resolved.manifest
        if artifact.kind == "tool":
            specs.append(ToolSpec(artifact.ref.name, own.description, own.input_schema or dict(DEFAULT_PARAMETERS)))
        elif artifact.kind == "skill" and artifact.ref.name != prompt_skill:
            specs.append(ToolSpec(artifact.ref.name, own.description))
    for binary in shell_allow(staged):
        description = staged.shell_descriptions.get(binary) or f"Run the allowlisted binary `{binary}`."
        specs.append(ToolSpec(binary, description, SHELL_TOOL_SCHEMA))
    return specs


def shell_allow(staged: StagedCapsule) -> list[str]:
    shell = staged.manifest.capabilities.shell
    return list(shell.allow) if shell else []


def shell_policy(staged: StagedCapsule, egress_denied: Any = None) -> ShellPolicy:
    """The shell rules of a staged capsule: its allowlist and environment, its resource limits
    (upstream's defaults filled in), the containment this host achieves for it, and the
    `network.allow` its children reach through the egress relay (each refusal to `egress_denied`)."""
    capabilities = staged.manifest.capabilities
    limits = ShellLimits.from_resources(capabilities.resources)
    return ShellPolicy.from_capability(capabilities.shell, staged.workdir.root,
                                       limits=limits,
                                       workdir_guard=WorkdirGuard(staged.workdir.root, limits.workdir_max_bytes),
                                       containment=staged.once("containment_plan",
                                                               lambda: containment_plan(staged.manifest, staged.host_env)),
                                       egress=shell_egress_grant(staged.grants.capsule.network),
                                       runtime_env=tuple(staged.identity.items()),
                                       on_egress_refused=refusal_reporter(egress_denied))


def _shell_args(binary: str, tool_input: Any) -> tuple[list[str], str | None, str]:
    if isinstance(tool_input, dict) and isinstance(tool_input.get("args"), list):
        args = [str(a) for a in tool_input["args"]]
        return args, None, " ".join(args)
    command = tool_input.get("command") if isinstance(tool_input, dict) else tool_input
    if not isinstance(command, str):
        raise ShellRefused(f"shell tool {binary}: input needs a string \"command\" (or an \"args\" list)")
    args, script = split_command(binary, command)
    return args, script, command


def resolve_shell_call(policy: ShellPolicy, binary: str, tool_input: Any, host_env: Any) -> ShellCall:
    """Check and resolve a shell call (PATH lookup, environment): blocking, run it on a worker thread."""
    try:
        args, script, command = _shell_args(binary, tool_input)
    except ShellRefused as exc:
        return ShellCall([], None, "", None, str(exc))
    try:
        invocation = prepare_shell(policy, binary, args, (), host_env)
    except ShellRefused as exc:
        return ShellCall(args, script, command, None, str(exc))
    return ShellCall(args, script, command, invocation)


async def _off_loop_shell(policy: ShellPolicy, invocation: ShellInvocation) -> ShellOutcome:
    """Run a resolved shell call on a thread of its own (`own_thread`: it may run for minutes).
    Cancelling the awaiter (tasks/cancel, shutdown) cannot stop the thread, so it sets the call's
    cancel flag: the process group dies."""
    cancel = threading.Event()
    try:
        return await on_own_thread(run_prepared, policy, invocation, cancel)
    except asyncio.CancelledError:
        cancel.set()
        raise


class ToolRunner:
    """Carries out the model's tool calls for one staged capsule."""

    def __init__(self, staged: StagedCapsule, host: ComponentHost, session: Any, include_output: bool = False) -> None:
        self.staged = staged
        self.host = host
        self.session = session  # the SessionContext host imports reach (request-input, invoke, ...)
        self.include_output = include_output
        # One policy per session where the services have one: one workdir guard for both shell paths.
        shared = getattr(session, "shell_policy", None)
        self.policy = shared if isinstance(shared, ShellPolicy) else shell_policy(
            staged, getattr(session, "egress_denied", None))

    def kind_of(self, name: str) -> str | None:
        artifact = self.staged.artifacts.get(name)
        if artifact is not None and artifact.kind == "tool" and artifact.resolved.native:
            return "native"
        if name in self.policy.allow:
            return "shell"
        if artifact is not None and artifact.kind in ("skill", "tool"):
            return artifact.kind
        return None

    async def resolve_shell(self, name: str, tool_input: Any) -> ShellCall:
        """A shell call checked and resolved off the event loop, once: the decision point's
        `shell-event` and the run both use it."""
        return await asyncio.to_thread(resolve_shell_call, self.policy, name, tool_input, self.staged.host_env)

    def shell_tool_call(self, name: str, tool_input: Any, outcome: ToolOutcome) -> dict[str, Any]:
        """The `tool_call` fields upstream writes for a shell command, ahead of its `shell` line:
        `error` when it could not run or exited non-zero."""
        failed = outcome.is_error or outcome.trace.get("exit_code") != 0
        fields: dict[str, Any] = {
            "tool_name": name, "input": tool_input, "input_bytes": len(json.dumps(tool_input).encode()),
            "output_bytes": len(outcome.text.encode()), "duration_ms": outcome.trace.get("duration_ms", 0),
            "status": "error" if failed else "ok",
        }
        if self.include_output:
            fields["output"] = outcome.text
        return fields

    async def run(self, name: str, tool_input: Any, on_chunk: Any = None, on_thinking: Any = None,
                  shell_call: ShellCall | None = None) -> ToolOutcome:
        """Carry out one call; a shell call already resolved for the decision point is passed in."""
        kind = self.kind_of(name)
        started = time.monotonic()
        guard = self.policy.workdir_guard
        if guard is not None and guard.breach is not None:  # passed during a component's shell call
            raise SessionEnded(guard.breach)
        if kind == "native":
            return await self._native(name, tool_input, started)
        if kind == "shell":
            call = shell_call or await self.resolve_shell(name, tool_input)
            return await self._shell(name, tool_input, call, started)
        if kind == "skill":
            return await asyncio.to_thread(self._skill, name, started)
        if kind == "tool":
            return await self._wasm(name, tool_input, started, on_chunk, on_thinking)
        return ToolOutcome(f"error: unknown tool {name!r}", True, "tool_call", {
            "tool_name": name, "input": tool_input, "input_bytes": len(json.dumps(tool_input)),
            "output_bytes": 0, "duration_ms": 0, "status": "error",
        })

    async def _shell(self, binary: str, tool_input: Any, call: ShellCall, started: float) -> ToolOutcome:
        try:
            if call.invocation is None:
                raise ShellRefused(call.refusal or f"shell: {binary!r} refused")
            outcome = await _off_loop_shell(self.policy, call.invocation)
        except WorkdirExceeded as exc:
            raise SessionEnded(str(exc)) from None
        except (ShellRefused, ShellFailed) as exc:
            # what the model asked for: the -c script, the argument list, else its input as given
            shown = display_command(call.args, call.script) if call.args else display_command([], str(tool_input))
            return ToolOutcome(f"error: {exc}", True, "shell", {
                "binary": binary, "command": shown, "exit_code": -1,
                "stdout_bytes": 0, "stderr_bytes": 0, "duration_ms": _ms(started),
            })
        return ToolOutcome(format_shell_result(call.command, outcome), False, "shell", {
            "binary": outcome.binary_path, "command": display_command(call.args, call.script), "exit_code": outcome.exit_code,
            "stdout_bytes": outcome.stdout_bytes, "stderr_bytes": outcome.stderr_bytes, "duration_ms": _ms(started),
            "resource_limit": outcome.resource_limit,
        }, shell=outcome)

    async def _native(self, name: str, tool_input: Any, started: float) -> ToolOutcome:
        """A native tool: one contained process, one JSON request in, one JSON result out."""
        data = json.dumps(tool_input)
        trace: dict[str, Any] = {"tool_name": name, "input": tool_input, "input_bytes": len(data.encode())}
        cancel = threading.Event()
        try:
            result = await on_own_thread(call_native, self.staged, self.policy, name, data, cancel)
        except asyncio.CancelledError:
            cancel.set()
            raise
        except WorkdirExceeded as exc:
            raise SessionEnded(str(exc)) from None
        except (NativeToolError, ShellRefused, ShellFailed) as exc:
            text, is_error = f"error: {exc}", True
        else:
            text, is_error = _result_text(result.data, result.data_path, result.summary,
                                          result.status != "passed", self.staged.workdir.root)
            for key in RESERVED_METADATA:
                if result.metadata.get(key):
                    trace[key] = result.metadata[key]
        trace.update(output_bytes=len(text.encode()), duration_ms=_ms(started), status="error" if is_error else "ok")
        if self.include_output:
            trace["output"] = text
        return ToolOutcome(text, is_error, "tool_call", trace)

    def _skill(self, name: str, started: float) -> ToolOutcome:
        artifact = self.staged.artifacts[name]
        try:
            text = self.staged.read_installed(name)
            ok = True
        except (OSError, UnicodeDecodeError) as exc:
            text, ok = f"error: skill {name}: {exc}", False
        return ToolOutcome(text, not ok, "skill_call", {
            "skill_name": name, "output_bytes": len(text.encode()), "duration_ms": _ms(started),
            "status": "ok" if ok else "error",
        })

    async def _wasm(self, name: str, tool_input: Any, started: float, on_chunk: Any, on_thinking: Any) -> ToolOutcome:
        artifact = self.staged.artifacts[name]
        data = json.dumps(tool_input)
        trace: dict[str, Any] = {"tool_name": name, "input": tool_input, "input_bytes": len(data.encode())}
        grant = self.staged.call_grant(name, log_name=f"tool-{name}.log")
        try:
            result = await self.host.call_tool(
                artifact.component, ToolInput(data=data, log_path=log_file(f"tool-{name}.log")),
                grant=grant, session=self.session, on_chunk=on_chunk, on_thinking=on_thinking,
            )
        except HostError as exc:
            raise_if_aborted(exc)
            text, is_error = f"error: {exc}", True
        else:
            is_error = result.status is not ToolStatus.PASSED
            if result.data is not None:
                text = result.data
            elif result.data_path:
                root = grant.preopen or self.staged.workdir.root
                try:
                    text = read_data_path(root, result.data_path)
                except DataPathError as exc:
                    text, is_error = f"error: {exc}", True
            else:
                text = result.summary or ""
            if is_error and result.summary and result.summary not in text:
                text = f"{result.summary}\n{text}".strip()
            for key in RESERVED_METADATA:
                value = next((v for k, v in result.metadata if k == key and v), None)
                if value is not None:
                    trace[key] = value
        trace.update(output_bytes=len(text.encode()), duration_ms=_ms(started), status="error" if is_error else "ok")
        if self.include_output:
            trace["output"] = text
        return ToolOutcome(text, is_error, "tool_call", trace)


def _result_text(data: str | None, data_path: str | None, summary: str | None, is_error: bool,
                 root: Any) -> tuple[str, bool]:
    """The text the model sees for a native tool's result, as for a WASM tool's: `data`, else the
    `data_path` file's text, else the summary; a failure's summary leads when `data` lacks it."""
    if data is not None:
        text = data
    elif data_path:
        try:
            text = read_data_path(root, data_path)
        except DataPathError as exc:
            return f"error: {exc}", True
    else:
        text = summary or ""
    if is_error and summary and summary not in text:
        text = f"{summary}\n{text}".strip()
    return text, is_error


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
