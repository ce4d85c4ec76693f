"""Staging's registry: the project store, the global store, murmurd's directory registry, and —
for a declared version neither the stores nor the bundled set can meet — an install from the
configured sources into the project store, pinned against `murmur.lock` byte for byte.

The archive's payload (the root wasm, or `skill.md`) is read by name within the ceiling and kept
in the cache under the archive's sha256, so the host compiles a file no one else writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from murmurd.paths import cache_dir
from murmurd.registry.archive import SKILL_ENTRY, open_archive, role_of
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.install import Fetcher, install_one
from murmurd.registry.lock import read_lock
from murmurd.registry.stores import ARTIFACTS, Store, StoredArtifact, global_root, write_atomic
from murmurd.registry.versions import best, is_exact, satisfies
from murmurd.staging.artifacts import ArtifactNotFound, ResolveError, ResolvedArtifact
from murmurd.staging.bundled import find_bundled
from murmurd.staging.registry import FileRegistry, default_registry_root

Progress = Callable[[str], None]
ROLES = ("tool", "driver", "hook", "skill")


def materialize(stored: StoredArtifact, env: Mapping[str, str] = os.environ) -> ResolvedArtifact:
    """Verify a stored archive against its sidecar, read its manifest and payload, and describe it."""
    archive = open_archive(stored.read_verified(), env)
    manifest = archive.manifest
    if manifest.name != stored.name or manifest.version != stored.version:
        raise RegistryError("E-IO-003", f"failed to read artifact archive for {stored.name}@{stored.version}: "
                                        f"its murmur.yaml says {manifest.name}@{manifest.version}")
    role = role_of(manifest)
    if role not in ROLES:
        raise RegistryError("E-IO-003", f"artifact {stored.name}@{stored.version}: runtime '{manifest.runtime}' "
                                        "cannot be staged as an artifact")
    try:
        _entry, payload = archive.payload()
    except RegistryError as exc:
        raise RegistryError("E-IO-003", f"failed to read artifact archive for {stored.name}@{stored.version}: "
                                        f"{exc.message}") from None
    folder = cache_dir() / "archives" / archive.sha256
    native = manifest.is_native
    target = folder / (SKILL_ENTRY if role == "skill" else "native-tool" if native else "component.wasm")
    if not _holds(target, payload):  # whatever wrote the cache, staging stages the archive's own bytes
        write_atomic(target, payload)
    if native:
        target.chmod(0o755)  # the cache's own copy, outside every workdir: what the session executes
    return ResolvedArtifact(stored.name, stored.version, role, manifest, target, archive.sha256, False,
                            f"{stored.scope}:{stored.archive}", archived=True)


def _holds(target: Path, payload: bytes) -> bool:
    """Is `target` a regular file (not a symlink) holding exactly `payload`?"""
    try:
        return target.is_file() and not target.is_symlink() and target.read_bytes() == payload
    except OSError:
        return False


class StoreRegistry:
    """The `Registry` staging resolves named artifacts through (upstream's order, then murmurd's)."""

    def __init__(self, project: Path, *, env: Mapping[str, str] = os.environ, progress: Progress | None = None,
                 directory_registry: FileRegistry | None = None, install_missing: bool = True) -> None:
        self.project = project
        self.env = env
        self.progress = progress or (lambda _m: None)
        self.stores = [Store(project / ARTIFACTS, "project")]
        try:
            self.stores.append(Store(global_root(), "global"))
        except RegistryError:
            pass  # no home directory: the project store only
        self.directory = directory_registry or FileRegistry(default_registry_root())
        self.install_missing = install_missing
        self.location = ", ".join(str(s.root) for s in self.stores) + f", {self.directory.location}"

    def _stored(self, name: str, version: str | None) -> StoredArtifact | None:
        for store in self.stores:
            chosen = version if is_exact(version) else best(version, store.versions(name))
            if chosen is None:
                continue
            try:
                return store.lookup(name, chosen)
            except NotFound:
                continue  # only NotFound falls through from project to global
        return None

    def _resolved(self, stored: StoredArtifact) -> ResolvedArtifact:
        try:
            return materialize(stored, self.env)
        except RegistryError as exc:
            raise ResolveError(str(exc)) from None

    def resolve(self, name: str, version: str | None) -> ResolvedArtifact:
        stored = self._stored(name, version)
        if stored is not None:
            return self._resolved(stored)
        try:
            return self.directory.resolve(name, version if is_exact(version) else None)
        except ArtifactNotFound:
            pass
        bundled = find_bundled(name)
        if bundled is not None and satisfies(version, bundled.manifest.version):
            raise ArtifactNotFound(f"artifact {name!r}: in no store")  # murmurd's bundled artifact stands in
        if not self.install_missing or version is None:
            raise ArtifactNotFound(f"artifact {name}@{version or 'latest'} is in neither the project nor the "
                                   f"global store, nor the registry {self.directory.location}")
        return self._install(name, version)

    def _install(self, name: str, version: str) -> ResolvedArtifact:
        """Fetch from the registry / sources into the project store, checked against the lock."""
        try:
            lock = read_lock(self.project)
            fetcher = Fetcher(self.project, self.env, progress=self.progress, skip_local_registry=True)
            self.progress(f"installing {name}@{version} (missing from the stores)")
            fetched = install_one(fetcher, self.stores[0], lock, name, version)
        except NotFound as exc:
            raise ArtifactNotFound(str(exc)) from None
        except RegistryError as exc:
            raise ResolveError(str(exc)) from None
        self.progress(f"installed {name}@{fetched.version} from {fetched.origin} (sha256 {fetched.archive.sha256})")
        return self._resolved(self.stores[0].lookup(name, fetched.version))


def default_registry(capsule_dir: Path, env: Mapping[str, str] = os.environ,
                     progress: Progress | None = None) -> StoreRegistry:
    return StoreRegistry(capsule_dir, env=env, progress=progress)
