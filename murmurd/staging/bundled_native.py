"""murmurd's bundled native tools (issue 28): Python programs shipped as package data and laid
down at first use, never downloaded.

`murmurd/bundled/<name>/` holds `murmur.yaml` (upstream's published manifest: `implementation:
native`), a README and the program's modules with a `__main__.py`; `_nativekit/nativekit` holds
what the tools share. At first use they are packed into ONE executable file, a zipapp
(`bin/<name>` in the cache, keyed by the sources and the interpreter), whose `#!` line names the
daemon's own interpreter: the tool imports the libraries murmurd installed (tree-sitter's
bindings and grammar wheels for code-graph) and nothing at run time. One file, so the shell
containment's grant on the executable covers the whole program; `native_runtime` adds what the
daemon's interpreter loads besides its standard library (its site-packages, `pyvenv.cfg`, the
shared objects of the extension modules the tools import).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import zipapp
from pathlib import Path

from murmurd import __version__
from murmurd.paths import cache_dir

NATIVE_KIT = Path(__file__).resolve().parent.parent / "bundled" / "_nativekit" / "nativekit"
# Extension modules the bundled tools import: their shared objects (and so their DT_NEEDED
# closure, e.g. libsqlite3) are granted read+exec beside the interpreter's own closure.
EXTENSION_MODULES = ("_sqlite3", "tree_sitter._binding", "tree_sitter_python._binding", "tree_sitter_rust._binding")


def interpreter_line() -> str:
    """The zipapp's `#!` line: the daemon's interpreter, isolated from PYTHON* variables and the
    user site (`-I` would drop the archive's own path, so `-Es`)."""
    return f"{sys.executable} -Es"


def _sources(directory: Path) -> list[tuple[str, Path]]:
    """(archive name, file) of a tool's modules and the shared kit, sorted."""
    own = [(p.name, p) for p in sorted(directory.glob("*.py"))]
    kit = [(f"nativekit/{p.name}", p) for p in sorted(NATIVE_KIT.glob("*.py"))]
    return own + kit


def native_key(directory: Path) -> str:
    """The lay-down's cache key: the sources' names and bytes, the interpreter, murmurd's version."""
    digest = hashlib.sha256(f"{__version__}\0{interpreter_line()}\0".encode())
    for name, path in _sources(directory):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def lay_down(name: str, version: str, directory: Path) -> Path:
    """The tool's executable in the cache, packed now when it is not there yet. Written through
    a private temporary name and a rename, so a concurrent daemon sees it whole or not at all."""
    if not (directory / "__main__.py").is_file():
        raise ValueError(f"bundled native tool {name}: no __main__.py in {directory}")
    target = cache_dir() / "bundled" / name / version / native_key(directory)[:32] / "bin" / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".lay-", dir=target.parent) as scratch:
        source = Path(scratch) / "src"
        (source / "nativekit").mkdir(parents=True)
        for archived, path in _sources(directory):
            shutil.copyfile(path, source / archived)
        packed = Path(scratch) / name
        zipapp.create_archive(source, packed, interpreter=interpreter_line())
        packed.chmod(0o755)
        os.replace(packed, target)
    return target


def _shebang_interpreter(executable: Path) -> str | None:
    try:
        with open(executable, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words else None


def native_runtime(executable: Path) -> tuple[tuple[str, bool], ...]:
    """Read grants for a native script run by the daemon's own interpreter (a bundled tool): the
    venv's `pyvenv.cfg` and its site-packages, listed. Nothing for any other executable."""
    if _shebang_interpreter(executable) != sys.executable:
        return ()
    grants: list[tuple[str, bool]] = []
    config = Path(sys.prefix) / "pyvenv.cfg"
    if config.is_file():
        grants.append((str(config), False))
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path) and (path, True) not in grants:
            grants.append((path, True))
    return tuple(grants)


def native_extensions(executable: Path) -> tuple[str, ...]:
    """The shared objects of the extension modules a bundled tool imports (their closure is
    granted read+exec); nothing for an executable the daemon's interpreter does not run."""
    if _shebang_interpreter(executable) != sys.executable:
        return ()
    found: list[str] = []
    for module in EXTENSION_MODULES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            found.append(os.path.realpath(spec.origin))
    return tuple(found)


# Binaries a declared one runs in turn: git runs its transport helpers (`git-upload-pack` for a
# local clone or fetch) through `sh`.
HELPER_BINARIES = {"git": ("sh",)}


def declared_binaries(manifest_extra: dict | None, path_env: str | None) -> tuple[str, ...]:
    """What a native tool's own manifest says it runs (`capabilities.shell.allow`, e.g. `git` for
    murmur-tool-git), found on the child's `PATH`: exec grants for the tool's process only, so a
    capsule needs no such binary in its own `shell.allow`."""
    capabilities = (manifest_extra or {}).get("capabilities")
    shell = capabilities.get("shell") if isinstance(capabilities, dict) else None
    allow = shell.get("allow") if isinstance(shell, dict) else None
    names = [b for b in (allow if isinstance(allow, list) else []) if isinstance(b, str) and b and "/" not in b]
    names += [helper for name in names for helper in HELPER_BINARIES.get(name, ()) if helper not in names]
    search = os.pathsep.join(p for p in (path_env or os.defpath).split(os.pathsep) if os.path.isabs(p))
    found: list[str] = []
    for binary in names:
        located = shutil.which(binary, path=search)
        if located is not None and os.path.realpath(located) not in found:
            found.append(os.path.realpath(located))
    return tuple(found)


# Binaries that run their own helpers from a directory beside them (git's exec path: `git stash`
# runs `git update-index` from there; `share/git-core` holds `git init`'s templates), derived
# from the binary's path alone, never by running it.
HELPER_DIRS = {"git": ("lib/git-core", "libexec/git-core", "share/git-core")}


def helper_runtime(paths: tuple[str, ...] | list[str]) -> tuple[tuple[str, bool], ...]:
    """Read+exec grants for the helper directories of the binaries among `paths`."""
    grants: list[tuple[str, bool]] = []
    for path in paths:
        for relative in HELPER_DIRS.get(os.path.basename(path), ()):
            directory = Path(path).parent.parent / relative
            if directory.is_dir() and (str(directory), True) not in grants:
                grants.append((str(directory), True))
    return tuple(grants)
