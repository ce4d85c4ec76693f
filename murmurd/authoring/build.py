"""`murmurd build`: compile a Python artifact (`murmur.yaml` + `app.py`) with componentize-py.

Builds are content-addressed: the key covers the artifact's files, the WIT it compiles
against (the bundled WIT, or the artifact's own with `wit: <dir>`), the world, and the
componentize-py version, so an unchanged artifact is copied out of the cache instead of being
rebuilt (a build takes several seconds).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from murmurd.contract import WORLDS, wit_root
from murmurd.manifest.artifact import ArtifactManifest, load_artifact_manifest
from murmurd.paths import cache_dir
from murmurd.progress import Ticker

ENTRY_MODULE = "app"
_SKIPPED_DIRS = {"__pycache__", "workdir", ".murmur-build"}

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """A build that did not produce a component; the message names the file and the cause."""


@dataclass(frozen=True)
class BuildResult:
    manifest: ArtifactManifest
    output: Path
    cached: bool
    seconds: float


def world_for(manifest: ArtifactManifest, artifact_dir: Path | None = None) -> tuple[Path, str]:
    """The (WIT directory, world) an artifact compiles against.

    By default a world of the bundled WIT (`world:`, else the runtime's). An artifact with
    `wit: <dir>` compiles against that directory of its own, inside the artifact, and
    must then name one of its worlds with `world:`.
    """
    if manifest.wit is not None:
        label = f"artifact {manifest.name!r}: wit: {manifest.wit!r}"
        if artifact_dir is None:
            raise BuildError(f"{label} needs the artifact directory")
        root = artifact_dir.resolve()
        wit_dir = (root / manifest.wit).resolve()
        if not wit_dir.is_relative_to(root):
            raise BuildError(f"{label} is outside the artifact directory")
        if not wit_dir.is_dir():
            raise BuildError(f"{label}: no such directory {wit_dir}")
        if not manifest.world:
            raise BuildError(f"{label} needs `world:` naming a world in it")
        return wit_dir, manifest.world
    key = manifest.world or manifest.runtime
    if key not in WORLDS:
        raise BuildError(
            f"artifact {manifest.name!r}: no WIT world for {key!r} "
            f"(known: {', '.join(sorted(WORLDS))})"
        )
    family, world = WORLDS[key]
    return wit_root() / family, world


def python_path_for(manifest: ArtifactManifest, artifact_dir: Path) -> list[Path]:
    """The extra module directories an artifact names with `python_path:`, resolved against it.

    Relative only (an absolute path would make a build depend on one machine's layout); each
    must be an existing directory. They join the build key, so editing a shared module rebuilds
    every artifact that imports it.
    """
    found = []
    for entry in manifest.python_path:
        label = f"artifact {manifest.name!r}: python_path entry {entry!r}"
        if Path(entry).is_absolute():
            raise BuildError(f"{label} must be relative to the artifact directory")
        directory = (artifact_dir / entry).resolve()
        if not directory.is_dir():
            raise BuildError(f"{label}: no such directory {directory}")
        found.append(directory)
    return found


def _source_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in _SKIPPED_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and path.suffix != ".wasm":
            yield path


def build_key(artifact_dir: Path, wit_dir: Path, world: str, python_path: Sequence[Path] = ()) -> str:
    """The content hash a build is cached under."""
    digest = hashlib.sha256()
    digest.update(f"componentize-py {metadata.version('componentize-py')}\0world {world}\0".encode())
    roots = [("src", artifact_dir), ("wit", wit_dir), *((f"py{i}", p) for i, p in enumerate(python_path))]
    for label, root in roots:
        for path in _source_files(root):
            digest.update(f"{label}:{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _wit_label(wit_dir: Path, artifact_dir: Path) -> str:
    """`guest` for the bundled WIT, the relative path for an artifact's own."""
    for root in (artifact_dir, wit_root()):
        if wit_dir.is_relative_to(root):
            return wit_dir.relative_to(root).as_posix()
    return str(wit_dir)


def _cause(output: str) -> str:
    """componentize-py's own message, without the Rust stack backtrace it appends."""
    text = output.split("Stack backtrace:", 1)[0].strip()
    return text or "componentize-py failed without a message"


def _run_with_progress(cmd: list[str], cwd: Path, label: str, progress: Progress) -> subprocess.CompletedProcess[str]:
    """Run componentize-py, reporting the elapsed time every few seconds until it finishes."""
    ticker = Ticker(progress, f"building {label}", f"built {label}", first=f"building {label}: componentize-py")
    ticker.start()
    try:
        env = {**os.environ, "RUST_BACKTRACE": "0"}
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    finally:
        ticker.stop(ok=False)  # the caller says "built" (or why not) itself


def _snapshot(artifact_dir: Path, dest: Path) -> Path:
    """Copy the files the build key covers into `dest`, symlinks followed: the component is built
    from exactly what its key hashed (an example whose `app.py` links to a bundled artifact's
    builds, which componentize-py would not do from the link itself)."""
    for path in _source_files(artifact_dir):
        copy = dest / path.relative_to(artifact_dir)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    return dest


def _publish(source: Path, dest: Path) -> None:
    """Copy `source` to `dest` through a private temporary name and a rename, so a reader (a
    daemon staging the artifact, a concurrent build) sees the old file or the new one whole,
    never a half-written component."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _check_native(artifact_dir: Path, manifest: ArtifactManifest, report: Progress) -> BuildResult:
    """A native tool has nothing to compile: its executable (`bin/<name>`, e.g. a Python script with
    a `#!/usr/bin/env python3` line) is checked, and `murmurd build` then packs it."""
    from murmurd.staging.artifacts import ResolveError, native_executable

    started = time.monotonic()
    try:
        executable = native_executable(artifact_dir, manifest)
    except ResolveError as exc:
        raise BuildError(str(exc)) from None
    with open(executable, "rb") as handle:
        head = handle.read(4)
    if not (head.startswith(b"#!") or head == b"\x7fELF"):
        raise BuildError(f"{executable}: a native tool is an ELF binary or a script starting with #! "
                         "(e.g. #!/usr/bin/env python3)")
    report(f"native tool {manifest.name}: {executable.relative_to(artifact_dir)}")
    return BuildResult(manifest, executable, False, time.monotonic() - started)


def build_artifact(
    artifact_dir: Path,
    *,
    progress: Progress | None = None,
    builds_dir: Path | None = None,
    output: Path | None = None,
) -> BuildResult:
    """Build `artifact_dir` into `output` (default `<artifact_dir>/<name>.wasm`), through the build
    cache. A read-only source (a bundled artifact in site-packages) names an `output` elsewhere."""
    report = progress or (lambda _msg: None)
    artifact_dir = artifact_dir.resolve()
    manifest_path = artifact_dir / "murmur.yaml"
    manifest = load_artifact_manifest(manifest_path)
    if manifest.is_native:
        return _check_native(artifact_dir, manifest, report)
    entry = artifact_dir / f"{ENTRY_MODULE}.py"
    if not entry.is_file():
        raise BuildError(f"{entry}: missing; a Python artifact's entry module is {ENTRY_MODULE}.py")
    wit_dir, world = world_for(manifest, artifact_dir)
    extra_path = python_path_for(manifest, artifact_dir)
    output = output or artifact_dir / f"{manifest.name}.wasm"
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    key = build_key(artifact_dir, wit_dir, world, extra_path)
    store = (builds_dir or cache_dir() / "builds") / f"{key}.wasm"
    if store.is_file():
        _publish(store, output)
        report(f"built {manifest.name} (cached)")
        return BuildResult(manifest, output, True, time.monotonic() - started)

    report(f"building {manifest.name} against {_wit_label(wit_dir, artifact_dir)}/{world}")
    store.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="murmurd-build-") as scratch:
        target = Path(scratch) / "out.wasm"
        sources = _snapshot(artifact_dir, Path(scratch) / "src")
        cmd = [
            sys.executable, "-c", "import componentize_py, sys; sys.exit(componentize_py.script())",
            "-q", "-d", str(wit_dir), "-w", world,
            "componentize", "-p", str(sources), *(arg for p in extra_path for arg in ("-p", str(p))),
            ENTRY_MODULE, "-o", str(target),
        ]
        proc = _run_with_progress(cmd, artifact_dir, manifest.name, report)
        if proc.returncode != 0 or not target.is_file():
            raise BuildError(f"{entry}: build failed:\n{_cause(proc.stderr + proc.stdout)}")
        _publish(target, store)
    _publish(store, output)
    seconds = time.monotonic() - started
    report(f"built {manifest.name} in {seconds:.1f}s -> {output}")
    return BuildResult(manifest, output, False, seconds)
