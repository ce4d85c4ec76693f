"""`murmur.lock` as upstream reads and writes it for store artifacts: `lock_version: 1`, one entry
per artifact, `sha256.wasm` the sha256 of the whole `.mur.zip` (skills too). The file model is
`murmurd.staging.lock.LockFile`; these are the checks with upstream's codes."""

from __future__ import annotations

from pathlib import Path

from murmurd.registry.errors import RegistryError
from murmurd.staging.lock import LOCK_FILE, LockError, LockFile, Pin, load_lock, save_lock

__all__ = ["LOCK_FILE", "LockFile", "Pin", "read_lock", "save_lock", "check_conflict", "upsert", "pinned_sha"]


def read_lock(project: Path) -> LockFile | None:
    """The project's lock, validated (`E-RUN-003 invalid murmur.lock: ...`), or None."""
    try:
        lock = load_lock(project)
    except LockError as exc:
        raise RegistryError("E-RUN-003", f"invalid murmur.lock: {exc}") from None
    if lock is None:
        return None
    if lock.lock_version != 1:
        raise RegistryError("E-RUN-003", f"invalid murmur.lock: unsupported lock_version {lock.lock_version} (expected 1)")
    for pin in lock.artifacts:
        if not pin.name or not pin.resolved_version or not pin.sha256.get("wasm", pin.sha256.get("skill")):
            raise RegistryError("E-RUN-003", f"invalid murmur.lock: entry '{pin.name}' needs name, "
                                             "resolved_version and sha256.wasm")
    return lock


def pinned_sha(pin: Pin) -> str | None:
    return pin.sha256.get("wasm")


def check_conflict(lock: LockFile | None, name: str, version: str, sha256: str) -> None:
    """`E-REG-005` when the lock pins `name` at another version or sha256; nothing is written."""
    pin = lock.pin(name) if lock is not None else None
    if pin is None:
        return
    if pin.resolved_version != version or pinned_sha(pin) != sha256:
        raise RegistryError(
            "E-REG-005",
            f"murmur.lock conflict for '{name}': pinned {name}@{pin.resolved_version} (sha256 {pinned_sha(pin)}), "
            f"but the registry now resolves {name}@{version} (sha256 {sha256})",
            "if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again",
        )


def upsert(lock: LockFile, name: str, version: str, sha256: str) -> None:
    """Pin `name` at `version` / `sha256`, keeping every other entry in its place."""
    pin = Pin(name=name, resolved_version=version, sha256={"wasm": sha256})
    names = [p.name for p in lock.artifacts]
    if name in names:
        lock.artifacts[names.index(name)] = pin
    else:
        lock.artifacts.append(pin)
