"""What an allowlisted binary needs to run: its real path, its ELF interpreter and the transitive
closure of its shared libraries (`DT_NEEDED`), found the way the dynamic loader finds them.

This is the read+execute grant of the Full tier (`scoped`): Landlock lets a shell child open and
execute exactly these files (plus `interpreter_runtime` directories and the fixed devices), so
`/usr/bin/id` does not run when only `bash` is allowlisted and `/etc/passwd` cannot be read.

ELF parsing is pyelftools'. Library search follows glibc's `ld.so` order: `DT_RPATH` (when there
is no `DT_RUNPATH`), `DT_RUNPATH` (with `$ORIGIN`, `$LIB`, `$PLATFORM` expanded), the
directories of `/etc/ld.so.conf` (with its `include`s), then the loader's built-in ones; a
candidate must have the same ELF class and machine as the object that needs it.
`LD_LIBRARY_PATH` plays no part: shell children never receive it. A script (`#!`) brings its
interpreter's closure. The loader's cache (`/etc/ld.so.cache`) is part of the interpreter's
grant: the loader reads it to find this same closure.

Computed in the daemon (never in the child), cached per file identity (device, inode, mtime).
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

LOADER_CACHE = "/etc/ld.so.cache"
LD_SO_CONF = "/etc/ld.so.conf"
_MULTIARCH = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu", "EM_386": "i386-linux-gnu",
              "EM_RISCV": "riscv64-linux-gnu", "EM_PPC64": "powerpc64le-linux-gnu", "EM_S390": "s390x-linux-gnu"}
_MAX_SHEBANG = 256
# Where `#!/usr/bin/env NAME` finds NAME for a shell.allow script: the shell children's default PATH.
SCRIPT_SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
_MAX_OBJECTS = 4096  # a closure larger than this is a malformed or hostile tree


@dataclass(frozen=True)
class _Object:
    """What one ELF file asks of the loader."""

    elf_class: int
    machine: str
    interpreter: str | None
    needed: tuple[str, ...]
    search: tuple[str, ...]  # RPATH/RUNPATH directories, expanded


def closure(binaries: Iterable[str]) -> tuple[str, ...]:
    """The real paths every one of `binaries` needs to run (themselves included), sorted. A file
    that is missing or unreadable is left out: running it fails as it would anyway."""
    found: set[str] = set()
    for binary in binaries:
        real = os.path.realpath(binary)
        try:
            st = os.stat(real)
        except OSError:
            continue
        found.update(_closure_of(real, st.st_dev, st.st_ino, st.st_mtime_ns))
    return tuple(sorted(found))


@functools.lru_cache(maxsize=256)
def _closure_of(path: str, _dev: int, _ino: int, _mtime: int) -> frozenset[str]:
    found: set[str] = set()
    _walk(path, found, depth=0)
    return frozenset(found)


def _walk(path: str, found: set[str], depth: int) -> None:
    if path in found or len(found) > _MAX_OBJECTS or depth > 4:
        return
    found.add(path)
    interpreters = script_interpreters(path, SCRIPT_SEARCH_PATH)
    if interpreters is not None:
        for interpreter in interpreters:
            _walk(interpreter, found, depth + 1)
        return
    obj = _read(path)
    if obj is None:
        return
    if obj.interpreter:
        found.add(os.path.realpath(obj.interpreter))
        if os.path.exists(LOADER_CACHE):
            found.add(os.path.realpath(LOADER_CACHE))
    pending = [(path, obj)]
    while pending:
        where, current = pending.pop()
        for name in current.needed:
            library = _resolve(name, where, current)
            if library is None or library in found:
                continue
            found.add(library)
            needed = _read(library)
            if needed is not None:
                pending.append((library, needed))


def script_interpreters(path: str, search_path: str) -> tuple[str, ...] | None:
    """What a `#!` script runs, as real paths: `#!/bin/sh` -> (sh,); `#!/usr/bin/env node` -> (env,
    node found on `search_path`, its absolute entries only). None for a binary or an unreadable file."""
    try:
        with open(path, "rb") as source:
            head = source.read(_MAX_SHEBANG)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = [os.fsdecode(w) for w in head[2:].split(b"\n", 1)[0].split()]
    if not words or not words[0].startswith("/"):
        return ()
    first = os.path.realpath(words[0])
    if os.path.basename(words[0]) != "env":
        return (first,)
    named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    found = shutil.which(named[0], path=os.pathsep.join(p for p in search_path.split(os.pathsep) if os.path.isabs(p))) if named else None
    return (first, os.path.realpath(found)) if found is not None else (first,)


@functools.lru_cache(maxsize=2048)
def _read(path: str) -> _Object | None:
    try:
        with open(path, "rb") as source:
            elf = ELFFile(source)
            interpreter = None
            for segment in elf.iter_segments():
                if segment["p_type"] == "PT_INTERP":
                    interpreter = segment.get_interp_name()
            needed: list[str] = []
            rpath: list[str] = []
            runpath: list[str] = []
            for section in elf.iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_RPATH":
                        rpath += tag.rpath.split(":")
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        runpath += tag.runpath.split(":")
            elf_class, machine = elf.elfclass, elf["e_machine"]
    except (OSError, ELFError, ValueError, KeyError):
        return None
    origin = os.path.dirname(path)
    lib = "lib64" if elf_class == 64 else "lib"
    raw = runpath if runpath else rpath  # RPATH is ignored when RUNPATH is present
    search = tuple(entry.replace("$ORIGIN", origin).replace("${ORIGIN}", origin).replace("$LIB", lib)
                   .replace("${LIB}", lib) for entry in raw if entry)
    return _Object(elf_class, machine, interpreter, tuple(needed), search)


def _resolve(name: str, needed_by: str, obj: _Object) -> str | None:
    """Where the loader finds library `name` for `obj` (or None)."""
    if "/" in name:
        candidates: Iterable[str] = [name if os.path.isabs(name) else os.path.join(os.path.dirname(needed_by), name)]
    else:
        candidates = (os.path.join(d, name) for d in (*obj.search, *_system_dirs(obj.machine, obj.elf_class)))
    for candidate in candidates:
        if not os.path.isfile(candidate):
            continue
        real = os.path.realpath(candidate)
        library = _read(real)
        if library is not None and (library.elf_class, library.machine) == (obj.elf_class, obj.machine):
            return real
    return None


@functools.lru_cache(maxsize=16)
def _system_dirs(machine: str, elf_class: int) -> tuple[str, ...]:
    """`/etc/ld.so.conf` (and its includes), then the loader's built-in directories."""
    dirs = _conf_dirs(LD_SO_CONF, depth=0)
    triplet = _MULTIARCH.get(machine)
    builtin = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    builtin += ["/lib64", "/usr/lib64"] if elf_class == 64 else []
    builtin += ["/lib", "/usr/lib"]
    ordered: list[str] = []
    for d in [*dirs, *builtin]:
        if d not in ordered:
            ordered.append(d)
    return tuple(ordered)


def _conf_dirs(path: str, depth: int) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as conf:
            lines = conf.read().splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("include") and depth < 4:
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for included in sorted(glob.glob(pattern)):
                found += _conf_dirs(included, depth + 1)
        elif line.startswith("/"):
            found.append(line.split()[0])
    return found
