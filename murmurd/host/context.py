"""The session context host imports call into, and the per-call context they receive.

`SessionContext` is the seam between the component host and the session core: every murmur
import a guest can call lands on one of its methods. This base class answers as a context
with no session would (no active task, no tools, no shell); the session loop and the A2A
daemon subclass it. Methods that may block run on a pool thread, never on the loop; one that
must wait for the event loop uses a `LoopBridge`. `egress_denied` and a call's chunk sinks
run on a pool thread or on the loop (a worker call read there) and must not block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from murmurd.host.hook_values import HookMessage, InferenceRequest, InferenceResponse  # importable from here too
from murmurd.host.http_egress import EgressDenial, HttpEgress
from murmurd.host.interrupt import CallGuard
from murmurd.host.values import ToolInput, ToolResult
from murmurd.host.wasi import CallOutput

ChunkSink = Callable[[str], None]

NO_ACTIVE_TASK = "error: request-input is available only while the capsule is running an A2A task"


class ImportFailed(Exception):
    """Raised by a context method to return `err(message)` to the guest."""


class AbortTask(Exception):
    """Raised by a context method to abort the guest and end the whole task with this message
    (for example `input-timeout`), rather than just failing the one call."""


@dataclass
class ShellResult:
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False
    full_output_path: str | None = None


@dataclass
class PeerTask:
    task_id: str
    context_id: str
    state: str


@dataclass
class ArtifactSummary:
    name: str
    version: str
    runtime: str = "wasm"  # "wasm" | "native"


@dataclass
class ArtifactInfo:
    name: str
    version: str
    description: str = ""
    tags: list[str] = field(default_factory=list)
    runtime: str = "wasm"
    input_schema: str | None = None
    output_schema: str | None = None


@dataclass
class RuntimeState:
    capsule_id: str
    installed: list[ArtifactSummary]
    capabilities: str


class SessionContext:
    """What guests reach through murmur imports. The base answers as 'no session'."""

    # murmur:task/task
    def request_input(self, prompt: str) -> str:
        """The reply text. Outside an A2A task the seed says: an error, immediately."""
        return NO_ACTIVE_TASK

    # murmur:tool-registry/invoke
    def invoke_tool(self, name: str, tool_input: ToolInput) -> ToolResult:
        raise ImportFailed(f"tool-registry: no tool named {name!r} in this context")

    # murmur:shell/execute
    def shell_run(
        self, binary: str, args: Sequence[str], env: Sequence[tuple[str, str]], cancel: CallGuard | None = None
    ) -> ShellResult:
        """`cancel` is the calling guest's guard: the command is killed once the call is
        cancelled or past its deadline."""
        raise ImportFailed(f"shell: {binary!r} is not in capabilities.shell.allow")

    # murmur:message/send
    def message_send(self, peer_url: str, message_id: str, context_id: str | None, text: str) -> PeerTask:
        raise ImportFailed(f"network policy: '{peer_url}' not in capabilities.network.allow")

    # wasi:http/outgoing-handler: not an import of its own; the host reports a refused request
    def egress_denied(self, denial: EgressDenial) -> None:
        """A request the egress policy refused (before any connection); a session traces it."""

    # murmur:artifact-manager/manage
    def artifacts_list(self) -> list[ArtifactSummary]:
        return []

    def artifact_describe(self, name: str) -> ArtifactInfo:
        raise ImportFailed(f"artifact-manager: no artifact named {name!r} is installed")

    def artifact_search(self, query: str) -> list[ArtifactSummary]:
        raise ImportFailed("artifact-manager: search is unimplemented")

    def artifact_pull(self, name: str, version: str) -> ArtifactSummary:
        raise ImportFailed("artifact-manager: no registry is configured for this context")

    def artifact_remove(self, name: str) -> bool:
        raise ImportFailed("artifact-manager: remove is unimplemented")

    def diagnostics(self) -> RuntimeState:
        raise ImportFailed("artifact-manager: no session")

    # murmur:runtime/* , murmur:task-io/read, murmur:conversation/read (hooks)
    def count_tokens(self, text: str) -> int:
        """`count-tokens` returns a bare u64: raising here (even `ImportFailed`) traps the hook."""
        raise ImportFailed("runtime: token counting is not available in this context")

    def run_inference(self, request: InferenceRequest) -> InferenceResponse:
        """Runs with the calling hook's deadline clock stopped (waiting on a driver is not its compute)."""
        raise ImportFailed("runtime: inference is not available in this context")

    def task_input(self) -> str:
        raise ImportFailed("task-io: no task is running")

    def task_result(self) -> str | None:
        raise ImportFailed("task-io: no task is running")

    def conversation_history(self) -> list[HookMessage]:
        raise ImportFailed("conversation: no conversation record in this context")


@dataclass
class CallContext:
    """One call's view: which artifact, which session, where chunks go, how to stop it."""

    artifact: str
    session: SessionContext
    guard: CallGuard
    output: CallOutput
    on_chunk: ChunkSink | None = None
    on_thinking: ChunkSink | None = None
    import_failure: BaseException | None = None
    stage: str = "instantiate"  # then "call": which step a failure happened in
    egress: HttpEgress | None = None  # the store's wasi:http policy (None: it imports no wasi:http)
