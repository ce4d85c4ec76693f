"""A component linked once, instantiated per call: murmurd's `InstancePre`.

wasmtime's Rust API splits instantiation into `Linker::instantiate_pre` (resolve and type-check
every import against the linker, once) and `InstancePre::instantiate` (per store). wasmtime-py
50 exposes that split for core modules only; for components, `Linker.instantiate` does both on
every call. So what a fresh store need not rebuild is kept here instead, built once per loaded
component and shared by every call and thread:

- the linker, with WASI, wasi:http and the murmur host functions defined once per role and
  wasi:http version (`ComponentHost.linker_for`), never per call;
- the component-level export indices of the functions the host calls, resolved once (an index
  from `Component.get_export_index` is valid in every instance of that component), so a call
  reaches its function with one lookup instead of three;
- the wasi:http versions the component imports (parsed from 50-odd import names once, not at
  every call).

What stays per call is everything a guest could observe or change: the `Store` (its memories,
globals and tables), its WASI context (environment, preopen, output files), its limits and its
`CallGuard`. Isolation is the store's: two calls through one `PreLinked` share no guest state.

Instantiation is tried again when the kernel refuses, for a moment, what wasmtime needs for a
module's first instance in this process: its copy-on-write memory image is a sealed memfd, and
sealing fails with EBUSY while the kernel still holds the just-written pages (seen on a loaded
two-core machine, where a driver's first turn failed with "cannot add seals to the memfd").
wasmtime builds that image lazily and keeps no failure, so a second try builds it afresh.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from wasmtime import Store, WasmtimeError
from wasmtime.component import Component, ExportIndex, Func, Instance, Linker

from murmurd.host.errors import ContractError
from murmurd.host.frozen_types import ExportShapes, FuncShape, invoke

log = logging.getLogger("murmurd.host.prelinked")

INSTANTIATE_ATTEMPTS = 3
_PASSING_REFUSALS = ("cannot add seals to the memfd", "cannot create a memfd")


def instantiate(linker: Linker, store: Store, component: Component, name: str) -> Instance:
    """`linker.instantiate`, tried again (up to `INSTANTIATE_ATTEMPTS` in all) when the kernel
    refused the memory image's memfd for a moment. Any other failure is raised at once."""
    for attempt in range(1, INSTANTIATE_ATTEMPTS):
        try:
            return linker.instantiate(store, component)
        except WasmtimeError as exc:
            refusal = next((r for r in _PASSING_REFUSALS if r in str(exc)), None)
            if refusal is None:
                raise
            log.warning("instantiating %s: %s (attempt %d of %d); trying again",
                        name, refusal, attempt, INSTANTIATE_ATTEMPTS)
    return linker.instantiate(store, component)


@dataclass
class LinkStats:
    """How often the host built what it should build once (read by tests and benches)."""

    linkers: int = 0  # `Linker` objects constructed (one per role / wasi:http versions)
    prelinked: int = 0  # `PreLinked` built (one per loaded component)


@dataclass
class PreLinked:
    """One component with its shared linker and its resolved exports."""

    name: str
    component: Component
    linker: Linker
    http_versions: tuple[str, ...]
    _indices: dict[tuple[str, str], ExportIndex | None] = field(default_factory=dict)
    _shapes: ExportShapes = field(default_factory=ExportShapes)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def http_version(self) -> str | None:
        return self.http_versions[0] if self.http_versions else None

    def instantiate(self, store: Store) -> Instance:
        """A new instance of the component in `store` (a fresh store per call, or a hook's)."""
        return instantiate(self.linker, store, self.component, self.name)

    def export_index(self, interface: str, function: str) -> ExportIndex | None:
        """The component-level index of `interface#function`, resolved at its first use."""
        key = (interface, function)
        with self._lock:
            if key in self._indices:
                return self._indices[key]
            outer = self.component.get_export_index(interface)
            index = self.component.get_export_index(function, outer) if outer is not None else None
            self._indices[key] = index
            return index

    def func(self, store: Store, instance: Instance, interface: str, function: str) -> Func:
        """The instance's `interface#function`, or a `ContractError` naming what is missing."""
        index = self.export_index(interface, function)
        func = instance.get_func(store, index) if index is not None else None
        if func is None:
            raise ContractError(self.name, f"does not export {interface}#{function}")
        return func

    def shape(self, store: Store, func: Func, interface: str, function: str) -> FuncShape:
        """The type of `interface#function` (`func`, in any instance of this component), read
        at its first use and kept (`frozen_types.py`)."""
        return self._shapes.of((interface, function), store, func)

    def call(self, store: Store, instance: Instance, interface: str, function: str, *args: Any) -> Any:
        """Call the instance's `interface#function` with `args` and finish it (`post_return`)."""
        func = self.func(store, instance, interface, function)
        result = invoke(func, store, self.shape(store, func, interface, function), *args)
        func.post_return(store)
        return result
