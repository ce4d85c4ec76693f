"""`CapsuleServices`: the `SessionContext` of a staged capsule.

It is what every murmur host import of a session reaches: the tool registry (exactly the
installed artifacts), the artifact manager, the shell (the same implementation model-visible
shell tools use), peer messaging, and request-input. The last two need the event loop; whoever
serves the session (the A2A daemon) plugs them in through `connect`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from murmurd.host import ComponentHost, ImportFailed, SessionContext, ToolInput, ToolResult, ToolStatus
from murmurd.host.bridge import LoopBridge
from murmurd.host.context import NO_ACTIVE_TASK, ArtifactInfo, ArtifactSummary, PeerTask, RuntimeState, ShellResult
from murmurd.host.http_egress import EgressDenial
from murmurd.host.interrupt import CallGuard
from murmurd.session.native import NativeToolError, call_native
from murmurd.session.shell import run_shell
from murmurd.session.shell_model import ShellError
from murmurd.session.tools import shell_policy
from murmurd.staging.grants import network_allows
from murmurd.staging.manager import ArtifactManager
from murmurd.staging.stage import StagedCapsule

AskForInput = Callable[[str], Awaitable[str]]
SendToPeer = Callable[[str, str, str | None, str], Awaitable[PeerTask]]


@dataclass
class LoopServices:
    """What the serving layer provides: the bridge, peer messaging, and (during an A2A task) input."""

    bridge: LoopBridge
    send_to_peer: SendToPeer | None = None
    ask_for_input: AskForInput | None = None


class CapsuleServices(SessionContext):
    def __init__(self, staged: StagedCapsule, host: ComponentHost) -> None:
        self.staged = staged
        self.host = host
        self.manager = ArtifactManager(staged, host)
        self.loop: LoopServices | None = None
        self.trace_egress: Callable[[EgressDenial], None] | None = None
        self.shell_policy = shell_policy(staged, self.egress_denied)  # the session's ToolRunner shares it

    def connect(self, loop: LoopServices | None) -> None:
        self.loop = loop

    # wasi:http: a refused request is traced by the session, once it has plugged in its writer
    # (`Session` does, as soon as its trace exists).
    def egress_denied(self, denial: EgressDenial) -> None:
        if self.trace_egress is not None:
            self.trace_egress(denial)

    # murmur:task/task: only while an A2A task runs; otherwise the seed's immediate error.
    def request_input(self, prompt: str) -> str:
        if self.loop is None or self.loop.ask_for_input is None:
            return NO_ACTIVE_TASK
        return self.loop.bridge.wait(self.loop.ask_for_input(prompt))

    # murmur:tool-registry/invoke: installed WASM and native tools; anything else is an error result.
    def invoke_tool(self, name: str, tool_input: ToolInput) -> ToolResult:
        artifact = self.staged.artifacts.get(name)
        if artifact is not None and artifact.kind == "tool" and artifact.resolved.native:
            try:
                result = call_native(self.staged, self.shell_policy, name, tool_input.data)
            except (NativeToolError, ShellError) as exc:
                raise ImportFailed(str(exc)) from None
            return ToolResult(ToolStatus(result.status), result.summary, result.data, result.data_path,
                              False, list(result.metadata.items()))
        if artifact is None or artifact.kind != "tool" or artifact.component is None:
            raise ImportFailed(f"tool-registry: {name!r} is not a declared tool of this capsule")
        grant = self.staged.call_grant(name, log_name=f"tool-{name}.log")
        return self.host.call_tool_sync(artifact.component, tool_input, grant=grant, session=self)

    # murmur:shell/execute
    def shell_run(
        self, binary: str, args: Sequence[str], env: Sequence[tuple[str, str]], cancel: CallGuard | None = None
    ) -> ShellResult:
        try:
            outcome = run_shell(self.shell_policy, binary, list(args), list(env), self.staged.host_env, cancel)
        except ShellError as exc:
            raise ImportFailed(str(exc)) from None
        return ShellResult(outcome.exit_code, outcome.stdout, outcome.stderr, outcome.truncated, outcome.full_output_path)

    # murmur:message/send: the allowlist is checked before anything touches the network.
    def message_send(self, peer_url: str, message_id: str, context_id: str | None, text: str) -> PeerTask:
        if not network_allows(peer_url, self.staged.grants.capsule.network):
            raise ImportFailed(f"network policy: '{peer_url}' not in capabilities.network.allow")
        if self.loop is None or self.loop.send_to_peer is None:
            raise ImportFailed("message/send: this session has no A2A client")
        try:
            return self.loop.bridge.wait(self.loop.send_to_peer(peer_url, message_id, context_id, text))
        except ImportFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - a peer failure is the guest's err, not a trap
            raise ImportFailed(f"message/send to {peer_url}: {exc}") from None

    # murmur:artifact-manager/manage
    def artifacts_list(self) -> list[ArtifactSummary]:
        return self.manager.list()

    def artifact_describe(self, name: str) -> ArtifactInfo:
        return self.manager.describe(name)

    def artifact_pull(self, name: str, version: str) -> ArtifactSummary:
        return self.manager.pull(name, version)

    def diagnostics(self) -> RuntimeState:
        return self.manager.diagnostics()
