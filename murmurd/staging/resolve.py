"""Resolve every artifact a capsule declares: a local source, else the registry, else murmurd's
bundled artifact of that name; named artifacts are verified against `murmur.lock`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from murmurd.authoring.build import BuildError, build_artifact
from murmurd.manifest.artifact import ArtifactManifest, ArtifactManifestError, load_artifact_manifest
from murmurd.manifest.capsule import ArtifactRef
from murmurd.staging.artifacts import (
    ArtifactNotFound,
    ResolveError,
    ResolvedArtifact,
    find_skill_file,
    native_executable,
    sha256_file,
)
from murmurd.staging.bundled import bundled_artifacts, find_bundled, resolve_bundled
from murmurd.staging.lock import LockError, LockFile, check_pin
from murmurd.staging.registry import Registry
from murmurd.registry.versions import is_exact, satisfies

Progress = Callable[[str], None]


def _synthetic_manifest(ref: ArtifactRef) -> ArtifactManifest:
    return ArtifactManifest(name=ref.name, version=ref.version or "0.0.0-local", runtime=ref.kind)


def _local(ref: ArtifactRef, path: Path, kind: str, manifest: ArtifactManifest, payload: Path,
           bare: bool = False) -> ResolvedArtifact:
    return ResolvedArtifact(ref.name, manifest.version, kind, manifest, payload, sha256_file(payload), True,
                            f"local:{path}", bare)


def manifest_beside(wasm: Path, kind: str) -> ArtifactManifest | None:
    """The hook's own manifest for a `.wasm` source: the `murmur.yaml` beside it (what `murmurd
    build` leaves: `<dir>/<name>.wasm` next to `<dir>/murmur.yaml`) when it names this very
    component (`name` is the file's stem) and is a `runtime: hook` manifest, else None (a capsule's
    manifest beside its hooks is not theirs). Only hooks: their contract lives there."""
    beside = wasm.parent / "murmur.yaml"
    if kind != "hook" or not beside.is_file():
        return None
    try:
        manifest = load_artifact_manifest(beside)
    except ArtifactManifestError:
        return None
    return manifest if manifest.name == wasm.stem and manifest.runtime == "hook" else None


def resolve_local(ref: ArtifactRef, manifest_dir: Path, progress: Progress | None = None) -> ResolvedArtifact:
    """A `local_source: true` artifact: a .wasm, an artifact directory, or a skill file/directory."""
    assert ref.source is not None
    path = (manifest_dir / ref.source).resolve()
    if not path.exists():
        raise ResolveError(f"artifact {ref.name}: source {ref.source} does not exist ({path})")
    if path.is_file():
        if ref.kind == "skill" or path.name.lower() == "skill.md":
            return _local(ref, path, "skill", _synthetic_manifest(ref), path)
        if path.suffix != ".wasm":
            raise ResolveError(f"artifact {ref.name}: source {ref.source} is neither a .wasm component nor a skill.md")
        own = manifest_beside(path, ref.kind)
        if own is not None:
            return _local(ref, path, ref.kind, own, path)
        return _local(ref, path, ref.kind, _synthetic_manifest(ref), path, bare=True)

    manifest_path = path / "murmur.yaml"
    manifest = None
    if manifest_path.is_file():
        try:
            manifest = load_artifact_manifest(manifest_path)
        except ArtifactManifestError as exc:
            raise ResolveError(f"artifact {ref.name}: {exc}") from exc
    if ref.kind == "skill":
        skill = find_skill_file(path)
        if skill is None:
            raise ResolveError(f"artifact {ref.name}: {ref.source} holds no skill.md")
        return _local(ref, path, "skill", manifest or _synthetic_manifest(ref), skill)
    if manifest is None:
        raise ResolveError(f"artifact {ref.name}: {ref.source} has no murmur.yaml")
    if manifest.is_native:  # a host executable (any language: a Python script with a shebang)
        payload = native_executable(path, manifest)
    elif (path / "app.py").is_file():  # a Python artifact: build it (content-addressed, usually a cache hit)
        try:
            payload = build_artifact(path, progress=progress).output
        except BuildError as exc:
            raise ResolveError(f"artifact {ref.name}: {exc}") from exc
    else:
        payload = path / f"{manifest.name}.wasm"
        if not payload.is_file():
            wasm = sorted(path.glob("*.wasm"))
            if len(wasm) != 1:
                raise ResolveError(f"artifact {ref.name}: {ref.source} holds no single .wasm payload")
            payload = wasm[0]
    kind = manifest.role
    return _local(ref, path, kind, manifest, payload)


def _check_declared(ref: ArtifactRef, artifact: ResolvedArtifact) -> None:
    if artifact.kind != ref.kind:
        raise ResolveError(
            f"artifact {ref.name}: declared as runtime {ref.kind!r} but its own manifest says {artifact.kind!r}"
        )
    if ref.version is not None and not artifact.local and not satisfies(ref.version, artifact.version):
        raise ResolveError(f"artifact {ref.name}: declared version {ref.version}, resolved {artifact.version}")


def resolve_named(registry: Registry, name: str, declared: str | None, pinned: str | None = None,
                  progress: Progress | None = None) -> ResolvedArtifact:
    """A name without a source: the registry's artifact, else murmurd's bundled one of that name.

    The registry is asked for the declared version, else the pinned one; a bundled artifact has
    one version, checked against the declared one here and against the pin by `check_pin`.
    """
    if pinned is not None and not is_exact(declared) and satisfies(declared, pinned):
        declared_or_pinned = pinned  # a requirement or channel alias stages what the lock pinned
    else:
        declared_or_pinned = declared or pinned
    try:
        return registry.resolve(name, declared_or_pinned)
    except ArtifactNotFound as exc:
        bundled = find_bundled(name)
        if bundled is None:
            from murmurd.staging.launch_checks import did_you_mean

            known = sorted(a.manifest.name for a in bundled_artifacts())
            raise ResolveError(f"{exc}, and murmurd bundles no artifact of that name (see `murmurd list`)"
                               f"{did_you_mean(name, known)}") from None
        return resolve_bundled(bundled, declared if is_exact(declared) else None, progress)


def resolve_artifact(
    ref: ArtifactRef,
    manifest_dir: Path,
    registry: Registry,
    lock: LockFile | None,
    progress: Progress | None = None,
) -> ResolvedArtifact:
    """Resolve one declared artifact and verify it against its lock pin (named artifacts: registry or bundled)."""
    if ref.is_local:
        artifact = resolve_local(ref, manifest_dir, progress)
        _check_declared(ref, artifact)
        return artifact
    pin = lock.pin(ref.name) if lock is not None else None
    if lock is not None and pin is None:
        raise LockError(f"error[E-RUN-003]: murmur.lock missing artifact entry for '{ref.name}'\n"
                        "  hint: run `murmurd install` to pin it")
    artifact = resolve_named(registry, ref.name, ref.version, pin.resolved_version if pin else None, progress)
    _check_declared(ref, artifact)
    if pin is not None:
        check_pin(pin, artifact)
    return artifact
