"""The `.mur.zip` archive: read entries by name within a decompression ceiling; pack one.

Reading never extracts the archive: each entry murmurd needs (`murmur.yaml`, the root wasm,
`skill.md`) is looked up by its exact name and streamed into memory, counting the bytes as they
are inflated (the size a header claims is not trusted), and refused past the ceiling
(`MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES`, default 500 MiB). An entry whose name starts with `/`
or has a `..` component is never selected, a symlink entry is never read, and a name that occurs
twice in the archive is refused rather than guessed at. Before the zip reader parses the central
directory, its end record is checked: more than `MAX_ENTRIES` entries, or a directory larger than
`MAX_DIRECTORY_BYTES` (the reader walks the directory by its size, whatever count the end record
claims), is refused, so a small archive of empty entries cannot cost gigabytes of records.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from murmurd.manifest.artifact import ArtifactManifest
from murmurd.manifest.reading import YamlRefused, load_yaml
from murmurd.registry.errors import RegistryError

MANIFEST_ENTRY = "murmur.yaml"
CAPSULE_WASM = "capsule.wasm"
SKILL_ENTRY = "skill.md"
DEFAULT_CEILING = 500 * 1024 * 1024
CEILING_ENV = "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES"
_CHUNK = 1 << 16
MAX_ENTRIES = 10_000  # an artifact holds a manifest, a component or skill and its listed files
MAX_DIRECTORY_BYTES = 2 * 1024 * 1024


class ArchiveError(RegistryError):
    """The archive cannot be used (bad zip, unsafe or missing entry, ceiling): `E-IO-003`."""

    def __init__(self, message: str) -> None:
        super().__init__("E-IO-003", message)
        self.reason = message


def decompression_ceiling(env: Mapping[str, str] = os.environ) -> int:
    """The per-entry ceiling in bytes: the variable when it is an unsigned integer, else 500 MiB."""
    raw = env.get(CEILING_ENV, "").strip()
    return int(raw) if raw.isdigit() else DEFAULT_CEILING


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unsafe_reason(name: str) -> str | None:
    """Why an entry name may not be selected (a leading `/`, a `..`, a drive or backslash), or None."""
    if name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "is absolute"
    if ".." in PurePosixPath(name).parts:
        return "contains a '..' component"
    if "\x00" in name:
        return "contains a NUL byte"
    return None


def registry_runtime(manifest: ArtifactManifest) -> str:
    """Upstream's packaging type: explicit `execution:` wins; skill is static; native tool native; else wasm."""
    extra = manifest.model_extra or {}
    execution = extra.get("execution")
    if isinstance(execution, str) and execution in ("wasm", "native", "static"):
        return execution
    if manifest.runtime == "skill":
        return "static"
    if manifest.is_native:
        return "native"
    return "wasm"


def native_entry(manifest: ArtifactManifest, names: list[str]) -> str | None:
    """A native tool's executable among `names`: `bin/<name>` (upstream's packaging), else
    `bin/run` (the python-native guide), else the one `bin/` file `requires_files` lists."""
    for candidate in (f"bin/{manifest.name}", "bin/run"):
        if candidate in names:
            return candidate
    listed = (manifest.model_extra or {}).get("requires_files") or []
    in_bin = [n for n in listed if isinstance(n, str) and n.startswith("bin/") and n in names]
    return in_bin[0] if len(in_bin) == 1 else None


def role_of(manifest: ArtifactManifest) -> str:
    """The role murmurd stages the artifact as: tool, driver, hook or skill."""
    return manifest.role


@dataclass(frozen=True)
class Archive:
    """An opened `.mur.zip` held in memory, with its sha256 and its own manifest."""

    data: bytes
    sha256: str
    manifest: ArtifactManifest
    ceiling: int

    def read(self, name: str) -> bytes:
        with _open(self.data) as archive:
            return read_entry(archive, name, self.ceiling)

    def payload(self) -> tuple[str, bytes]:
        """The entry staging installs: `skill.md` for a skill, a native tool's executable, else the root wasm."""
        with _open(self.data) as archive:
            if registry_runtime(self.manifest) == "native":
                names = [info.filename for info in archive.infolist()]
                name = native_entry(self.manifest, names)
                if name is None:
                    raise ArchiveError(f"{self.manifest.name} is a native tool but its archive holds no "
                                       f"bin/{self.manifest.name} (nor bin/run, nor one bin/ entry in requires_files)")
                return name, read_entry(archive, name, self.ceiling)
            name = SKILL_ENTRY if self.manifest.runtime == "skill" else select_root_wasm(archive)
            return name, read_entry(archive, name, self.ceiling)


def _directory_bounds(stream: io.BytesIO) -> None:
    """Refuse an end record announcing too many entries or too large a central directory."""
    end = zipfile._EndRecData(stream)  # type: ignore[attr-defined]  # what ZipFile reads first
    if end is None:
        return  # ZipFile itself refuses it
    entries, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
    if entries > MAX_ENTRIES:
        raise ArchiveError(f"the archive holds {entries} entries (at most {MAX_ENTRIES})")
    if size > MAX_DIRECTORY_BYTES:
        raise ArchiveError(f"the archive's central directory is {size} bytes (at most {MAX_DIRECTORY_BYTES})")


def _open(data: bytes) -> zipfile.ZipFile:
    try:
        stream = io.BytesIO(data)
        _directory_bounds(stream)
        return zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        raise ArchiveError(f"not a zip archive: {exc}") from None


def _info(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    reason = unsafe_reason(name)
    if reason is not None:
        raise ArchiveError(f"zip entry '{name}' has an unsafe path: {reason}")
    matches = [info for info in archive.infolist() if info.filename == name]
    if not matches:
        if name == SKILL_ENTRY:
            raise ArchiveError(f"missing {SKILL_ENTRY} in skill archive")
        raise ArchiveError(f"missing zip entry '{name}'")
    if len(matches) > 1:
        raise ArchiveError(f"zip entry '{name}' occurs {len(matches)} times")
    info = matches[0]
    if stat.S_ISLNK(info.external_attr >> 16):
        raise ArchiveError(f"zip entry '{name}' is a symlink")
    if info.is_dir():
        raise ArchiveError(f"zip entry '{name}' is a directory")
    return info


def read_entry(archive: zipfile.ZipFile, name: str, ceiling: int) -> bytes:
    """Entry `name` (exact), inflated and counted as it is read; past `ceiling` bytes it is refused."""
    info = _info(archive, name)
    out = bytearray()
    try:
        with archive.open(info) as stream:
            while True:
                chunk = stream.read(min(_CHUNK, ceiling + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
                if len(out) > ceiling:
                    raise ArchiveError(f"zip entry '{name}' exceeds the {ceiling}-byte decompression ceiling")
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(f"zip entry '{name}' cannot be read: {exc}") from None
    return bytes(out)


def _root_wasm_candidate(name: str) -> bool:
    return name.endswith(".wasm") and "/" not in name and "\\" not in name and unsafe_reason(name) is None


def select_root_wasm(archive: zipfile.ZipFile) -> str:
    """`capsule.wasm`, else the one root `*.wasm` (upstream's rule and messages)."""
    names = {info.filename for info in archive.infolist()}
    if CAPSULE_WASM in names:
        return CAPSULE_WASM
    candidates = sorted(n for n in names if _root_wasm_candidate(n))
    if not candidates:
        raise ArchiveError("missing root .wasm file (expected capsule.wasm or one root *.wasm)")
    if len(candidates) > 1:
        raise ArchiveError(f"multiple root .wasm files found: {', '.join(candidates)}")
    return candidates[0]


def parse_manifest(text: str) -> ArtifactManifest:
    """An archive's `murmur.yaml`: `name`, `version` and `runtime` must be strings."""
    try:
        raw = load_yaml(text)
    except (yaml.YAMLError, YamlRefused) as exc:
        raise ArchiveError(f"murmur.yaml is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ArchiveError("murmur.yaml: expected a mapping at the top level")
    for key in ("name", "version", "runtime"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ArchiveError(f"murmur.yaml: missing string field '{key}'")
    try:
        return ArtifactManifest.model_validate(raw)
    except ValueError as exc:
        raise ArchiveError(f"murmur.yaml: {exc}") from None


def open_archive(data: bytes, env: Mapping[str, str] = os.environ) -> Archive:
    """Open `data` as a `.mur.zip` and read its manifest (within the ceiling)."""
    ceiling = decompression_ceiling(env)
    with _open(data) as archive:
        raw = read_entry(archive, MANIFEST_ENTRY, ceiling) if _has(archive, MANIFEST_ENTRY) else None
    if raw is None:
        raise ArchiveError("missing murmur.yaml at the archive root")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError("murmur.yaml is not UTF-8 text") from None
    return Archive(data, sha256_hex(data), parse_manifest(text), ceiling)


def _has(archive: zipfile.ZipFile, name: str) -> bool:
    return any(info.filename == name for info in archive.infolist())


# -- packing (`murmurd build`) --------------------------------------------------------------------


class BuildRefused(RegistryError):
    pass


def _requires_files(manifest: ArtifactManifest) -> list[str]:
    files = (manifest.model_extra or {}).get("requires_files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise BuildRefused("E-BLD-002", "requires_files must be a list of relative file paths")
    return files


def pack(artifact_dir: Path, manifest: ArtifactManifest, built: Path | None = None) -> bytes:
    """`murmur.yaml` first, then each `requires_files` entry (or, for an artifact naming none,
    the component `murmurd build` made, as `<name>.wasm`, or its `skill.md`), deflated."""
    entries: list[tuple[str, Path]] = []
    listed = _requires_files(manifest)
    for name in listed:
        reason = unsafe_reason(name)
        path = artifact_dir / name
        if reason is None and path.is_symlink():
            reason = "is a symlink"
        if reason is not None:
            raise BuildRefused("E-BLD-002", f"requires_files entry '{name}' {reason}")
        if not path.is_file():
            raise BuildRefused("E-IO-001", f"requires_files entry '{name}' not found in {artifact_dir}")
        entries.append((PurePosixPath(name).as_posix(), path))
    if not listed:
        if manifest.runtime == "skill":
            skill = artifact_dir / SKILL_ENTRY
            if skill.is_file() and not skill.is_symlink():
                entries.append((SKILL_ENTRY, skill))
        elif built is not None and manifest.is_native:
            entries.append((built.relative_to(artifact_dir).as_posix(), built))
        elif built is not None:
            entries.append((f"{manifest.name}.wasm", built))
    if manifest.runtime != "skill" and registry_runtime(manifest) == "wasm":
        roots = [n for n, _ in entries if n == CAPSULE_WASM or _root_wasm_candidate(n)]
        if not roots or (CAPSULE_WASM not in roots and len(roots) > 1):
            raise BuildRefused("E-BLD-003", "no selectable root wasm (expected capsule.wasm or one root *.wasm)")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.write(artifact_dir / MANIFEST_ENTRY, MANIFEST_ENTRY)
        for name, path in entries:
            archive.write(path, name)
    return buffer.getvalue()


def archive_name(name: str, version: str, platform: str | None = None) -> str:
    return f"{name}-{version}-{platform}.mur.zip" if platform else f"{name}-{version}.mur.zip"
