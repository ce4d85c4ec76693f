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
    payload: Path  # the .wasm component, or the skill's markdown
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
    def installed_name(self) -> str:
        """The payload's file name under `tools/<name>/`."""
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
