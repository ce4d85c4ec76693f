"""Host-import plumbing: one way to register an interface (instance name -> functions).

Implementations take the per-call `CallContext` first, then the WIT arguments. The adapter
finds that context through the store's data, converts a raised `ImportFailed` into `err(...)`
where the WIT result allows it, and turns any other exception into a trap whose cause is kept
on the call (never into a crash of the worker thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime import _value as wasm_value
from wasmtime.component import Linker

from murmurd.host.context import CallContext
from murmurd.host.frozen_types import add_func

HostFunction = Callable[..., Any]


@dataclass(frozen=True)
class HostInterface:
    """A versioned interface instance (`murmur:text/chunks@0.1.0`) and its functions."""

    name: str
    functions: Mapping[str, HostFunction]


def call_context(store: Any) -> CallContext:
    """The `CallContext` the running store was created with."""
    data = ffi.wasmtime_context_get_data(store._context())
    call = wasm_value._unintern(data) if data else None
    if not isinstance(call, CallContext):
        raise WasmtimeError("murmurd: host import called outside a murmurd call")
    return call


def _adapt(interface: str, function: str, impl: HostFunction) -> Callable[..., Any]:
    def host_function(store: Any, *args: Any) -> Any:
        call = call_context(store)
        try:
            return impl(call, *args)
        except WasmtimeError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure (cancellation too) becomes a trap
            call.import_failure = exc
            raise WasmtimeError(f"host import {interface}#{function} failed: {exc!r}") from None

    return host_function


def define(linker: Linker, interfaces: Iterable[HostInterface]) -> None:
    """Register every interface's functions on `linker` (each interface as one instance)."""
    with linker.root() as root:
        for interface in interfaces:
            with root.add_instance(interface.name) as instance:
                for function, impl in interface.functions.items():
                    add_func(instance, function, _adapt(interface.name, function, impl))

