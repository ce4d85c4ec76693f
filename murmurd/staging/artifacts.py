"""A resolved artifact: its own manifest and payload, wherever it came from."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from murmurd.manifest.artifact import ArtifactManifest

SKILL_FILE = "skill.md"


class ResolveError(RuntimeError):
    """An artifact could not be found or does not match what was asked for."""


class ArtifactNotFound(ResolveError):
    """The registry holds no version at all of this name (the bundled artifacts are tried next)."""


@dataclass(frozen=True)
class ResolvedArtifact:
    name: str
    version: str
    kind: str  # tool | driver | hook | skill
    manifest: ArtifactManifest
    payload: Path  # the .wasm component, the skill's markdown, or a native tool's executable
    sha256: str  # of the payload bytes; of the whole `.mur.zip` when `archived`
    local: bool
    origin: str
    bare: bool = False  # a .wasm with no manifest of its own: `manifest` is synthetic (W-HOOK-002 for a hook)
    archived: bool = False  # from a `.mur.zip` in a store (murmurd.registry)

    @property
    def payload_kind(self) -> str:
        """The key of this payload's hash in `murmur.lock`: `wasm` (upstream's one key, the
        archive's hash, for every role of a `.mur.zip`), or `skill` for a bare skill file."""
        return "skill" if self.kind == "skill" and not self.archived else "wasm"

    @property
    def native(self) -> bool:
        """A native tool (`implementation: native`): `payload` is the executable the session runs."""
        return self.kind == "tool" and self.manifest.is_native

    @property
    def installed_name(self) -> str:
        """The payload's file name under `tools/<name>/` (a native tool's copy there is inventory:
        the session executes `payload`, outside the workdir, which no capsule process can rewrite)."""
        if self.native:
            return self.name
        return SKILL_FILE if self.kind == "skill" else f"{self.name}.wasm"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_skill_file(directory: Path) -> Path | None:
    """`skill.md` in any casing."""
    for child in sorted(directory.iterdir()):
        if child.is_file() and child.name.lower() == SKILL_FILE:
            return child
    return None


def native_executable(directory: Path, manifest: ArtifactManifest) -> Path:
    """A native tool directory's executable: `bin/<name>`, else `bin/run`, else the one `bin/`
    file in `requires_files`. ResolveError when none is a regular executable file."""
    candidates = [directory / "bin" / manifest.name, directory / "bin" / "run"]
    listed = (manifest.model_extra or {}).get("requires_files") or []
    in_bin = [n for n in listed if isinstance(n, str) and n.startswith("bin/")]
    if len(in_bin) == 1:
        candidates.append(directory / in_bin[0])
    for path in candidates:
        if path.is_file() and not path.is_symlink():
            if not path.stat().st_mode & 0o111:
                raise ResolveError(f"artifact {manifest.name}: native tool {path} is not executable (chmod 755 it)")
            return path
    raise ResolveError(f"artifact {manifest.name}: a native tool needs an executable bin/{manifest.name} "
                       f"(or bin/run) in {directory}")
