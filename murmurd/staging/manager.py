"""`murmur:artifact-manager/manage` for capsule components, over a staged capsule.

`pull` resolves from the session's registry, verifies the registry hash and any `murmur.lock`
pin, compiles and role-checks the component, and only then installs it under `tools/<name>/`
and records the pin. A failure at any step writes nothing.
"""

from __future__ import annotations

import json
import threading

from murmurd.host import ComponentHost, HostError, ImportFailed
from murmurd.host.context import ArtifactInfo, ArtifactSummary, RuntimeState
from murmurd.manifest.capsule import ArtifactRef
from murmurd.manifest.checks.artifacts import ARTIFACT_NAME
from murmurd.staging.artifacts import ResolveError
from murmurd.staging.lock import LockError, LockFile, check_pin, load_lock, save_lock
from murmurd.staging.stage import KIND_ROLES, InstalledArtifact, StagedCapsule, install_artifact


def _summary(artifact: InstalledArtifact) -> ArtifactSummary:
    return ArtifactSummary(artifact.resolved.name, artifact.resolved.version, _runtime(artifact))


def _runtime(artifact: InstalledArtifact) -> str:
    """The WIT `runtime-type`: `native` for a native tool, else `wasm`."""
    return "native" if artifact.resolved.native else "wasm"


class ArtifactManager:
    def __init__(self, staged: StagedCapsule, host: ComponentHost) -> None:
        self.staged = staged
        self.host = host
        self._lock = threading.Lock()

    def list(self) -> list[ArtifactSummary]:
        return [_summary(a) for a in self.staged.artifacts.values()]

    def describe(self, name: str) -> ArtifactInfo:
        artifact = self.staged.artifacts.get(name)
        if artifact is None:
            raise ImportFailed(f"artifact-manager: no artifact named {name!r} is installed")
        own = artifact.resolved.manifest
        return ArtifactInfo(
            name=own.name,
            version=artifact.resolved.version,
            description=own.description,
            tags=list(own.tags),
            runtime=_runtime(artifact),
            input_schema=json.dumps(own.input_schema) if own.input_schema is not None else None,
            output_schema=json.dumps(own.output_schema) if own.output_schema is not None else None,
        )

    def diagnostics(self) -> RuntimeState:
        return RuntimeState(
            capsule_id=self.staged.session_id,
            installed=self.list(),
            capabilities=json.dumps(self.staged.grants.capsule.to_json(), sort_keys=True),
        )

    def pull(self, name: str, version: str) -> ArtifactSummary:
        staged = self.staged
        if not ARTIFACT_NAME.fullmatch(name):
            raise ImportFailed(f"artifact-manager: pull {name!r}: not a plain artifact name")
        with self._lock:
            try:
                artifact = staged.registry.resolve(name, version or None)
                lock = load_lock(staged.manifest_dir)
                pin = lock.pin(name) if lock is not None else None
                if pin is not None:
                    check_pin(pin, artifact)
            except (ResolveError, LockError) as exc:
                raise ImportFailed(f"artifact-manager: pull {name} {version}: {exc}") from exc
            component = None
            if artifact.kind != "skill":
                try:
                    component = self.host.load(artifact.payload, name=artifact.name, expected=KIND_ROLES[artifact.kind])
                except HostError as exc:
                    raise ImportFailed(f"artifact-manager: pull {name} {version}: {exc}") from exc
            try:
                install_artifact(staged.workdir, artifact)
            except OSError as exc:  # e.g. a tool planted a symlink at tools/<name>
                raise ImportFailed(f"artifact-manager: pull {name} {version}: cannot install: {exc}") from None
            lock = lock or LockFile()
            lock.upsert(artifact)
            save_lock(staged.manifest_dir, lock)
            ref = ArtifactRef(name=artifact.name, version=artifact.version, runtime=artifact.kind)
            installed = InstalledArtifact(ref, artifact, component)
            staged.artifacts[name] = installed
            return _summary(installed)
