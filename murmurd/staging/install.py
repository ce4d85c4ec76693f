"""`murmurd install`: resolve a capsule's named artifacts (registry or bundled) and upsert their pins."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from murmurd.manifest.validate import load_capsule
from murmurd.staging.lock import LockFile, load_lock, save_lock
from murmurd.staging.registry import Registry
from murmurd.staging.resolve import Progress, resolve_named
from murmurd.staging.stage import StagingError


def install_pins(capsule_dir: Path, registry: Registry, env: Mapping[str, str] = os.environ,
                 progress: Progress | None = None) -> LockFile:
    """Pin every named artifact (registry, else bundled) at what resolves now; keep other pins as they are."""
    manifest, report = load_capsule(capsule_dir, env)
    if manifest is None:
        raise StagingError([d.to_text() for d in report.errors], report)
    lock = load_lock(capsule_dir) or LockFile()
    for ref in manifest.artifacts:
        if not ref.is_local:
            lock.upsert(resolve_named(registry, ref.name, ref.version, progress=progress))
    save_lock(capsule_dir, lock)
    return lock
