"""The project store (`<project>/.murmur/artifacts/`) and the global store (`~/.murmur/artifacts/`).

Per artifact, `<name>/<version>/` holds `<name>-<version>.mur.zip` (the archive bytes,
unchanged), `<name>-<version>.sha256` (lowercase hex, no newline) and
`<name>-<version>.meta.json`; a platform variant is `<name>-<version>-<platform>.mur.zip` with
its own `.sha256`. Names and versions never become paths unchecked: each must be a plain file
name component. Writes go to dot-prefixed temp files, then renames.
"""

from __future__ import annotations

import json
import os
import platform as _platform
import re
from dataclasses import dataclass
from pathlib import Path

from murmurd.registry.archive import archive_name, sha256_hex
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.versions import version_key

ARTIFACTS = Path(".murmur") / "artifacts"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
PLATFORMS = ("darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64")


def write_atomic(target: Path, data: bytes) -> None:
    """`data` at `target` by a dot-prefixed temp file and a rename (readers see all or nothing)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


def host_platform() -> str:
    system = {"Linux": "linux", "Darwin": "darwin"}.get(_platform.system())
    machine = {"x86_64": "x86_64", "AMD64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(_platform.machine())
    value = f"{system}-{machine}" if system and machine else "unknown"
    return value if value in PLATFORMS else "unknown"


def check_component(kind: str, value: str) -> str:
    """A name, version or platform that is safe as one path component (no `..`, no `/`)."""
    if not NAME.fullmatch(value) or ".." in value:
        raise RegistryError("E-IO-003", f"invalid artifact {kind} '{value}'")
    return value


def home_dir() -> Path:
    home = os.environ.get("HOME") or os.environ.get("USERPROFILE")
    if not home:
        raise RegistryError("E-IO-001", "no home directory (HOME is not set)")
    return Path(home).absolute()


def global_root() -> Path:
    return home_dir() / ARTIFACTS


def find_project_root(start: Path) -> Path | None:
    """The nearest directory at or above `start` holding `murmur.yaml`."""
    start = start.absolute()
    for directory in (start, *start.parents):
        if (directory / "murmur.yaml").is_file():
            return directory
    return None


def project_root_or_error(start: Path) -> Path:
    root = find_project_root(start)
    if root is None:
        raise RegistryError("E-IO-001", "no project root found (no murmur.yaml in current or parent directories)",
                            "use `murmurd install -g <ref>` to install into the global store instead")
    return root


@dataclass(frozen=True)
class StoredArtifact:
    name: str
    version: str
    archive: Path
    sha256: str  # the sidecar's value
    scope: str  # project | global | a directory

    def hash_on_disk(self) -> str:
        return sha256_hex(self.archive.read_bytes())

    def read_verified(self) -> bytes:
        """The archive bytes, checked against the sidecar (`E-REG-002` when they differ)."""
        data = self.archive.read_bytes()
        if sha256_hex(data) != self.sha256:
            raise RegistryError("E-REG-002", f"artifact integrity check failed for {self.name}@{self.version}",
                                "the archive does not match its .sha256 sidecar; reinstall it")
        return data


class Store:
    """One store root (project, global, or the directory `murmurd registry serve` keeps)."""

    def __init__(self, root: Path, scope: str) -> None:
        self.root = root
        self.scope = scope

    def _folder(self, name: str, version: str) -> Path:
        return self.root / check_component("name", name) / check_component("version", version)

    def versions(self, name: str) -> list[str]:
        try:
            folder = self.root / check_component("name", name)
        except RegistryError:
            return []
        if not folder.is_dir() or folder.is_symlink():
            return []
        found = [v.name for v in folder.iterdir() if NAME.fullmatch(v.name) and self._present(name, v.name, None)]
        return sorted(found, key=version_key)

    def _pair(self, name: str, version: str, platform: str | None) -> tuple[Path, Path]:
        folder = self._folder(name, version)
        base = archive_name(name, version, platform)[: -len(".mur.zip")]
        return folder / f"{base}.mur.zip", folder / f"{base}.sha256"

    def _present(self, name: str, version: str, platform: str | None) -> bool:
        zip_path, sidecar = self._pair(name, version, platform)
        return (zip_path.is_file() and sidecar.is_file() and not zip_path.is_symlink()
                and not sidecar.is_symlink()) or (platform is None and self._present_variant(name, version))

    def _present_variant(self, name: str, version: str) -> bool:
        return any(self._pair(name, version, p)[0].is_file() for p in PLATFORMS)

    def lookup(self, name: str, version: str, platform: str | None = None) -> StoredArtifact:
        """The platform variant when there is one, else the generic pair; `NotFound` otherwise."""
        platform = platform or host_platform()
        for candidate in ([platform] if platform in PLATFORMS else []) + [None]:  # never an unknown name
            zip_path, sidecar = self._pair(name, version, candidate)
            if zip_path.is_file() and sidecar.is_file() and not zip_path.is_symlink() and not sidecar.is_symlink():
                digest = sidecar.read_text(encoding="ascii", errors="replace").strip().lower()
                if not digest:
                    raise RegistryError("E-REG-002", f"artifact {name}@{version} has an empty sha256 sidecar")
                return StoredArtifact(name, version, zip_path, digest, self.scope)
        raise NotFound(f"artifact {name}@{version} not found in {self.scope} store {self.root}")

    def meta(self, name: str, version: str) -> dict:
        path = self._folder(name, version) / f"{name}-{version}.meta.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))["meta"]
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError, KeyError, TypeError):
            return {"name": name, "version": version, "runtime": "wasm", "artifact_runtime": "", "platforms": [],
                    "description": None, "tags": []}

    def entries(self) -> list[dict]:
        """Every stored artifact's meta (what `GET /v1/artifacts` lists)."""
        if not self.root.is_dir():
            return []
        rows = []
        for folder in sorted(self.root.iterdir()):
            if NAME.fullmatch(folder.name) and folder.is_dir() and not folder.is_symlink():
                rows += [{**self.meta(folder.name, v), "name": folder.name, "version": v} for v in self.versions(folder.name)]
        return rows

    def put(self, name: str, version: str, data: bytes, sha256: str, meta: dict | None,
            *, platform: str | None = None, overwrite: bool) -> StoredArtifact:
        """Write the archive, its sidecar and (generic only) its meta; refuse an existing version
        unless `overwrite` (install overwrites, publish never does). Bytes are verified first."""
        if sha256_hex(data) != sha256:
            raise RegistryError("E-REG-002", f"artifact integrity check failed for {name}@{version}")
        if platform is not None:
            check_component("platform", platform)
        zip_path, sidecar = self._pair(name, version, platform)
        if not overwrite and (zip_path.exists() or sidecar.exists()):
            raise RegistryError("E-REG-003", f"artifact {name}@{version} already exists in registry",
                                "use a new version string or remove the existing artifact")
        folder = zip_path.parent
        if folder.is_symlink() or folder.parent.is_symlink():
            raise RegistryError("E-IO-003", f"store folder {folder} is a symlink")
        writes = [(zip_path, data), (sidecar, sha256.encode("ascii"))]
        if meta is not None:  # one meta file per version, under the unsuffixed name
            writes.append((folder / f"{name}-{version}.meta.json", json.dumps({"meta": meta}, indent=2).encode()))
        for target, content in writes:  # the archive first: a sidecar never names bytes not yet there
            write_atomic(target, content)
        return StoredArtifact(name, version, zip_path, sha256, self.scope)


def meta_for(manifest_runtime: str, role: str, name: str, version: str, platforms: list[str] | None = None,
             description: str | None = None, tags: list[str] | None = None) -> dict:
    return {
        "name": name, "version": version, "runtime": manifest_runtime, "artifact_runtime": role,
        "platforms": [p.split("-", 1) for p in (platforms or [])], "description": description, "tags": tags or [],
    }
