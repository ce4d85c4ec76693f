"""Compiled-component cache: compile once per machine, never trust a damaged entry.

Entries live in `<cache>/compiled/<key>.cwasm`, keyed by the SHA-256 of the component bytes,
the wasmtime version and the engine's configuration. Each file carries the SHA-256 of its own
payload; an entry whose digest does not match, or that wasmtime refuses to deserialize, is
deleted and rebuilt from the component bytes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from wasmtime import Engine, WasmtimeError
from wasmtime.component import Component

log = logging.getLogger("murmurd.host.cache")

_MAGIC = b"MURMURD-CWASM\x01"
_DIGEST = 32


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    discarded: int = 0


class CompileCache:
    """Turns component bytes into a compiled `Component`, through memory and disk caches."""

    def __init__(self, engine: Engine, directory: Path | None, fingerprint: str, memory_entries: int = 32) -> None:
        self._engine = engine
        self._dir = directory / "compiled" if directory is not None else None
        self._salt = f"wasmtime {metadata.version('wasmtime')}\0{fingerprint}"
        self._memory: OrderedDict[str, Component] = OrderedDict()
        self._memory_entries = memory_entries
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.stats = CacheStats()

    def key(self, wasm: bytes) -> str:
        inner = hashlib.sha256(wasm).hexdigest()
        return hashlib.sha256(f"{inner}\0{self._salt}".encode()).hexdigest()

    def load(self, wasm: bytes, on_compile: Callable[[], None] | None = None) -> Component:
        """The compiled component for `wasm`. Raises WasmtimeError if the bytes do not compile.

        `on_compile` is called just before a real compile (seconds for a large component), so a
        caller can say why it is waiting."""
        key = self.key(wasm)
        with self._lock:
            cached = self._remember(key)
            if cached is not None:
                self.stats.memory_hits += 1
                return cached
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key, even when several threads ask at once
            with self._lock:
                cached = self._remember(key)
                if cached is not None:
                    self.stats.memory_hits += 1
                    return cached
            component = self._from_disk(key)
            if component is None:
                if on_compile is not None:
                    on_compile()
                component = Component(self._engine, wasm)
                self.stats.compiles += 1
                log.info("compiled component %s", key[:16])
                self._to_disk(key, component)
            with self._lock:
                self._memory[key] = component
                while len(self._memory) > self._memory_entries:
                    self._memory.popitem(last=False)
            return component

    def _remember(self, key: str) -> Component | None:
        component = self._memory.get(key)
        if component is not None:
            self._memory.move_to_end(key)
        return component

    def _path(self, key: str) -> Path | None:
        return self._dir / f"{key}.cwasm" if self._dir is not None else None

    def _from_disk(self, key: str) -> Component | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            blob = path.read_bytes()
        except OSError as exc:
            log.warning("compile cache entry %s unreadable (%s); rebuilding", path, exc)
            return None
        header, digest, payload = blob[: len(_MAGIC)], blob[len(_MAGIC) : len(_MAGIC) + _DIGEST], blob[len(_MAGIC) + _DIGEST :]
        if header != _MAGIC or hashlib.sha256(payload).digest() != digest:
            self._discard(path, "digest mismatch")
            return None
        try:
            component = Component.deserialize(self._engine, payload)
        except WasmtimeError as exc:
            self._discard(path, f"wasmtime refused it: {exc}")
            return None
        self.stats.disk_hits += 1
        log.info("compile cache hit %s", key[:16])
        return component

    def _discard(self, path: Path, why: str) -> None:
        self.stats.discarded += 1
        log.warning("discarding compile cache entry %s: %s", path.name, why)
        path.unlink(missing_ok=True)

    def _to_disk(self, key: str, component: Component) -> None:
        path = self._path(key)
        if path is None:
            return
        try:
            payload = bytes(component.serialize())
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except (OSError, WasmtimeError) as exc:  # a cache that cannot be written is only slower
            log.warning("cannot write compile cache entry %s: %s", path, exc)
