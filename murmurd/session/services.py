"""`CapsuleServices`: the `SessionContext` of a staged capsule.

It is what every murmur host import of a session reaches: the tool registry (exactly the
installed artifacts), the artifact manager, and, as later layers add them, shell, peer
messaging and request-input.
"""

from __future__ import annotations

from murmurd.host import ComponentHost, ImportFailed, SessionContext, ToolInput, ToolResult
from murmurd.host.context import ArtifactInfo, ArtifactSummary, RuntimeState
from murmurd.staging.manager import ArtifactManager
from murmurd.staging.stage import StagedCapsule


class CapsuleServices(SessionContext):
    def __init__(self, staged: StagedCapsule, host: ComponentHost) -> None:
        self.staged = staged
        self.host = host
        self.manager = ArtifactManager(staged, host)

    # murmur:tool-registry/invoke: only installed WASM tools; anything else is an error result.
    def invoke_tool(self, name: str, tool_input: ToolInput) -> ToolResult:
        artifact = self.staged.artifacts.get(name)
        if artifact is None or artifact.kind != "tool" or artifact.component is None:
            raise ImportFailed(f"tool-registry: {name!r} is not a declared tool of this capsule")
        grant = self.staged.call_grant(name, log_name=f"tool-{name}.log")
        return self.host.call_tool_sync(artifact.component, tool_input, grant=grant, session=self)

    # murmur:artifact-manager/manage
    def artifacts_list(self) -> list[ArtifactSummary]:
        return self.manager.list()

    def artifact_describe(self, name: str) -> ArtifactInfo:
        return self.manager.describe(name)

    def artifact_pull(self, name: str, version: str) -> ArtifactSummary:
        return self.manager.pull(name, version)

    def diagnostics(self) -> RuntimeState:
        return self.manager.diagnostics()
