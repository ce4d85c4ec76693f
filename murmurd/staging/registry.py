"""Artifact registries. One small interface; a file-based registry ships.

A file registry is a directory:

    index.json                      {"format": 1, "artifacts": {name: {version: {...}}}}
    <name>/<version>/murmur.yaml    the artifact's own manifest
    <name>/<version>/<payload>      <name>.wasm, or skill.md

Each index entry records the runtime, the payload file and its SHA-256; resolving verifies the
payload against that hash, so a registry whose bytes were changed is refused. A name the registry
does not hold at all raises `ArtifactNotFound`, which lets murmurd's bundled artifact of that
name stand in (`murmurd.staging.resolve.resolve_named`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Protocol

from murmurd.manifest.artifact import ArtifactManifestError, load_artifact_manifest
from murmurd.staging.artifacts import ArtifactNotFound, ResolveError, ResolvedArtifact, find_skill_file, sha256_file

INDEX = "index.json"


class Registry(Protocol):
    location: str

    def resolve(self, name: str, version: str | None) -> ResolvedArtifact: ...


def default_registry_root() -> Path:
    explicit = os.environ.get("MURMUR_REGISTRY")
    return Path(explicit) if explicit else Path.home() / ".murmur" / "registry"


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.replace("-", ".").split("."))


class FileRegistry:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def _index(self) -> dict:
        path = self.root / INDEX
        if not path.is_file():
            return {"format": 1, "artifacts": {}}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ResolveError(f"registry {self.root}: unreadable {INDEX}: {exc}") from exc

    def versions(self, name: str) -> list[str]:
        return sorted(self._index()["artifacts"].get(name, {}), key=_version_key)

    def resolve(self, name: str, version: str | None) -> ResolvedArtifact:
        versions = self.versions(name)
        if not versions:
            raise ArtifactNotFound(f"artifact {name!r}: not in registry {self.root}")
        chosen = version or versions[-1]
        entry = self._index()["artifacts"][name].get(chosen)
        if entry is None:
            raise ResolveError(f"artifact {name!r}: version {chosen} not in registry {self.root} (has {', '.join(versions)})")
        folder = self.root / name / chosen
        payload = folder / entry["payload"]
        try:
            manifest = load_artifact_manifest(folder / "murmur.yaml")
        except ArtifactManifestError as exc:
            raise ResolveError(str(exc)) from exc
        if not payload.is_file():
            raise ResolveError(f"artifact {name} {chosen}: payload {payload} is missing from the registry")
        actual = sha256_file(payload)
        if actual != entry["sha256"]:
            raise ResolveError(
                f"artifact {name} {chosen}: payload hash {actual[:16]}… does not match the registry's {entry['sha256'][:16]}…"
            )
        kind = manifest.role
        return ResolvedArtifact(name, chosen, kind, manifest, payload, actual, False, f"registry:{self.root}")

    def publish(self, artifact_dir: Path) -> ResolvedArtifact:
        """Copy a built artifact (its manifest and payload) in and record it in the index."""
        try:
            manifest = load_artifact_manifest(artifact_dir / "murmur.yaml")
        except ArtifactManifestError as exc:
            raise ResolveError(str(exc)) from exc
        if manifest.runtime == "skill":
            source = find_skill_file(artifact_dir)
            payload_name = "skill.md"
        else:
            source = artifact_dir / f"{manifest.name}.wasm"
            payload_name = f"{manifest.name}.wasm"
        if source is None or not source.is_file():
            raise ResolveError(f"{artifact_dir}: no payload to publish (expected {payload_name}; run `murmurd build` first)")
        if manifest.version.strip().lower() in ("latest", "stable", "edge"):  # upstream's E-REG-004
            raise ResolveError(f"error[E-REG-004]: version '{manifest.version}' is reserved and cannot be published\n"
                               "  hint: reserved strings: latest, stable, edge — use an explicit semver version")
        if manifest.version in self._index().get("artifacts", {}).get(manifest.name, {}):  # versions are immutable
            raise ResolveError(f"error[E-REG-003]: artifact {manifest.name}@{manifest.version} already exists in "
                               "registry\n  hint: use a new version string or remove the existing artifact")
        folder = self.root / manifest.name / manifest.version
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(artifact_dir / "murmur.yaml", folder / "murmur.yaml")
        shutil.copyfile(source, folder / payload_name)
        index = self._index()
        index.setdefault("artifacts", {}).setdefault(manifest.name, {})[manifest.version] = {
            "runtime": manifest.runtime,
            "payload": payload_name,
            "sha256": sha256_file(folder / payload_name),
        }
        tmp = self.root / f".{INDEX}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(index, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.root / INDEX)
        return self.resolve(manifest.name, manifest.version)
