"""`murmur.lock`: pins for registry artifacts (runtime-notes §5).

Created when absent; once present it is only verified (launch) or upserted (`murmurd install`).
A version or hash that disagrees with a pin is refused before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from murmurd.manifest.reading import YamlRefused, load_yaml, read_text_file
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.artifacts import ResolvedArtifact

LOCK_FILE = "murmur.lock"


class LockError(RuntimeError):
    """The lock file is unreadable, or a resolved artifact disagrees with its pin."""


class Pin(BaseModel):
    name: str
    resolved_version: str
    sha256: dict[str, str] = Field(default_factory=dict)


class LockFile(BaseModel):
    lock_version: int = 1
    artifacts: list[Pin] = Field(default_factory=list)

    def pin(self, name: str) -> Pin | None:
        return next((p for p in self.artifacts if p.name == name), None)

    def upsert(self, artifact: ResolvedArtifact) -> None:
        pin = Pin(name=artifact.name, resolved_version=artifact.version, sha256={artifact.payload_kind: artifact.sha256})
        self.artifacts = [p for p in self.artifacts if p.name != artifact.name] + [pin]


def load_lock(manifest_dir: Path) -> LockFile | None:
    path = manifest_dir / LOCK_FILE
    if not path.is_file():
        return None
    try:
        return LockFile.model_validate(load_yaml(read_text_file(path)) or {})
    except (OSError, yaml.YAMLError, YamlRefused, ValidationError) as exc:
        raise LockError(f"{path}: unreadable lock file: {exc}") from exc


def save_lock(manifest_dir: Path, lock: LockFile) -> None:
    path = manifest_dir / LOCK_FILE
    tmp = path.with_name(f".{LOCK_FILE}.{os.getpid()}.tmp")
    tmp.write_text(dump_yaml(lock.model_dump()), encoding="utf-8")
    os.replace(tmp, path)


def check_pin(pin: Pin, artifact: ResolvedArtifact) -> None:
    """Raise LockError when `artifact` disagrees with `pin` (version or payload hash)."""
    if pin.resolved_version != artifact.version:
        raise LockError(
            f"artifact {artifact.name}: version {artifact.version} disagrees with the murmur.lock pin "
            f"{pin.resolved_version}"
        )
    pinned = pin.sha256.get(artifact.payload_kind)
    if pinned is not None and pinned != artifact.sha256 and artifact.archived:  # upstream's words and code
        raise LockError(f"error[E-REG-002]: artifact integrity check failed for {artifact.name}@{artifact.version}\n"
                        "  hint: artifact on disk does not match murmur.lock — re-publish or delete the lock")
    if pinned is not None and pinned != artifact.sha256:
        raise LockError(
            f"artifact {artifact.name} {artifact.version}: sha256 {artifact.sha256[:16]}… disagrees with the "
            f"murmur.lock pin {pinned[:16]}…"
        )
