"""Component function types read once, for calls into and out of guests.

wasmtime-py converts every argument and result by walking the function's type through the C
API again at every call: each `fields`, `cases`, `element`, `ok` or `err` is a fresh round of
FFI calls that builds new type objects (freed again by their finalizers), and a variant's
conversion asks for its cases several times. One call of a driver that makes one `wasi:http`
request built and freed about 80 type objects that way, most for wasi:http's `error-code` (39
cases) in `result<own<future-incoming-response>, error-code>`, which `handle` passes twice
(`docs/benchmarks.md`, "Issue 29: component types read once").

Here a type is read once into a frozen copy: the same wasmtime-py classes, whose questions
(`fields`, `cases`, ...) are answered from Python lists, so every conversion is still
wasmtime-py's own code. A function's frozen shape is kept where its type cannot change:

- an export of one loaded component (`PreLinked`, the forwarder): its type is the component's;
- a host function: the type the importing component gives it, which wasmtime passes at every
  call and which any component may choose. The shape is used only when that type is equal to
  the one it was read from (`wasmtime_component_valtype_equal`, wasmtime's own structural
  comparison); another type is read afresh, as wasmtime-py would, so a component importing a
  name with a different signature never has its values converted by the wrong shape.

A guest chooses its types, and named types shared inside one unfold into up to a million
parts: a shape holds at most `MAX_FROZEN_PARTS`, and a function whose types are larger is
called with wasmtime-py's own types, read as far as its values need (`LAZY`). A host function's
failure is a trap that names it, never an exception parked in wasmtime-py's process-wide
`LAST_EXCEPTION`, where another thread's call could raise it.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, pointer
from dataclasses import dataclass
from collections.abc import Callable, Hashable
from typing import Any

from wasmtime import WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime._slab import Slab
from wasmtime.component import Func
from wasmtime.component._enter import catch_exceptions, enter_wasm
from wasmtime.component._linker import LinkerInstance
from wasmtime.component._types import (
    FuncType, ListType, OptionType, RecordType, ResultType, TupleType, ValType, VariantLikeType, VariantType,
)

MAX_SHAPES = 4  # signatures kept per host function; past that each call reads its type afresh
MAX_FROZEN_PARTS = 4096  # parts of a function's types a shape holds (wasi:http's `handle`: 106)


class _FrozenList(ListType):
    element = None  # shadows the property: the instance holds the frozen element type


class _FrozenRecord(RecordType):
    fields = None


class _FrozenTuple(TupleType):
    elements = None


class _FrozenTagged:
    """Whether a variant-like type's values are `Variant`s, worked out once at its freeze."""

    tagged = False

    def _tagged(self) -> bool:
        return self.tagged


class _FrozenVariant(_FrozenTagged, VariantType):
    cases = None


class _FrozenOption(_FrozenTagged, OptionType):
    payload = None


class _FrozenResult(_FrozenTagged, ResultType):
    ok = None
    err = None


class TypeTooLarge(Exception):
    """A type with more parts than a frozen shape may hold (`MAX_FROZEN_PARTS`)."""


class _Budget:
    """Parts a freeze may still read: a guest chooses its types, and named types shared inside
    one (`tuple<t, t>` of `tuple<u, u>` ...) unfold into up to a million parts, which wasmtime-py
    would read only as far as a value needs."""

    def __init__(self, parts: int) -> None:
        self.left = parts

    def take(self, parts: int) -> None:
        self.left -= parts
        if self.left < 0:
            raise TypeTooLarge()


def freeze(ty: ValType | None, budget: _Budget) -> ValType | None:
    """A copy of `ty` whose structure is read now, once (types without structure stay as they
    are); `TypeTooLarge` once `budget` runs out, counted before each list of parts is read."""
    if ty is None:
        return None
    budget.take(1)
    frozen: Any
    if isinstance(ty, ListType):
        frozen = _FrozenList.__new__(_FrozenList)
        frozen.element = freeze(ty.element, budget)
    elif isinstance(ty, RecordType):
        budget.take(ffi.wasmtime_component_record_type_field_count(ty.ptr()))
        frozen = _FrozenRecord.__new__(_FrozenRecord)
        frozen.fields = [(name, freeze(field, budget)) for name, field in ty.fields]
    elif isinstance(ty, TupleType):
        budget.take(ffi.wasmtime_component_tuple_type_types_count(ty.ptr()))
        frozen = _FrozenTuple.__new__(_FrozenTuple)
        frozen.elements = [freeze(element, budget) for element in ty.elements]
    elif isinstance(ty, VariantType):
        budget.take(ffi.wasmtime_component_variant_type_case_count(ty.ptr()))
        frozen = _FrozenVariant.__new__(_FrozenVariant)
        frozen.cases = [(name, freeze(case, budget)) for name, case in ty.cases]
    elif isinstance(ty, OptionType):
        frozen = _FrozenOption.__new__(_FrozenOption)
        frozen.payload = freeze(ty.payload, budget)
    elif isinstance(ty, ResultType):
        frozen = _FrozenResult.__new__(_FrozenResult)
        frozen.ok, frozen.err = freeze(ty.ok, budget), freeze(ty.err, budget)
    else:  # primitives, enums, flags, resources: nothing is read from them at a conversion
        return ty
    if isinstance(frozen, VariantLikeType):
        frozen.tagged = VariantLikeType._tagged(frozen)  # on the frozen cases: read once too
    return frozen


@dataclass(frozen=True)
class FuncShape:
    """A function's parameter and result types, frozen; or, for a function whose types are too
    large to freeze (`lazy`), nothing: its calls convert with wasmtime-py's own types."""

    params: tuple[ValType, ...] = ()
    result: ValType | None = None
    lazy: bool = False

    @classmethod
    def of(cls, ty: FuncType) -> FuncShape:
        budget = _Budget(MAX_FROZEN_PARTS)
        try:
            params = tuple(freeze(param, budget) for _name, param in ty.params)
            return cls(params, freeze(ty.result, budget))  # type: ignore[arg-type]
        except TypeTooLarge:
            return LAZY


LAZY = FuncShape(lazy=True)


class ExportShapes:
    """The shapes of one component's exports, each read at its first call and kept: an
    export's type is its component's, the same in every instance and store."""

    def __init__(self) -> None:
        self._shapes: dict[Hashable, FuncShape] = {}
        self._lock = threading.Lock()

    def of(self, key: Hashable, store: Any, func: Func) -> FuncShape:
        """The shape of `func`, the export `key` names (in any instance of the component)."""
        shape = self._shapes.get(key)
        if shape is None:
            with func.type(store) as ty:
                shape = FuncShape.of(ty)
            with self._lock:
                shape = self._shapes.setdefault(key, shape)
        return shape


def invoke(func: Func, store: Any, shape: FuncShape, *params: Any) -> Any:
    """`func(store, *params)` as wasmtime-py's `Func.__call__` does it, with `shape` for types.
    `shape` must be the type of `func` (`FuncShape.of(func.type(store))` of the same export)."""
    if shape.lazy:  # too large to freeze: wasmtime-py reads the types, only as far as the values need
        return func(store, *params)
    if len(params) != len(shape.params):
        raise TypeError(f"wrong number of parameters provided: given {len(params)}, expected {len(shape.params)}")
    param_capi = (ffi.wasmtime_component_val_t * len(params))()
    lowered = 0
    try:
        for ty, value in zip(shape.params, params):
            ty.convert_to_c(store, value, pointer(param_capi[lowered]))
            lowered += 1
        result_space = ffi.wasmtime_component_val_t() if shape.result is not None else None
        result_capi = byref(result_space) if result_space is not None else None
        enter_wasm(lambda: ffi.wasmtime_component_func_call(
            byref(func._func), store._context(), param_capi, lowered, result_capi, 1 if result_space is not None else 0))
        if result_space is None:
            return None
        return shape.result.convert_from_c(result_space)  # type: ignore[union-attr]
    finally:
        for index in range(lowered):
            ffi.wasmtime_component_val_delete(byref(param_capi[index]))


class _Signature:
    """A host function type's parameter and result value types, as wasmtime's C values, for
    comparing another type with it in wasmtime itself."""

    def __init__(self, raw: Any) -> None:
        self.types: list[Any] = []
        count = ffi.wasmtime_component_func_type_param_count(raw)
        for index in range(count):
            name, length, valtype = ctypes.POINTER(ctypes.c_char)(), ctypes.c_size_t(), ffi.wasmtime_component_valtype_t()
            if not ffi.wasmtime_component_func_type_param_nth(raw, index, byref(name), byref(length), byref(valtype)):
                raise TypeError("a host function's type lost a parameter")
            self.types.append(valtype)
        result = ffi.wasmtime_component_valtype_t()
        self.has_result = bool(ffi.wasmtime_component_func_type_result(raw, byref(result)))
        if self.has_result:
            self.types.append(result)

    def equals(self, other: _Signature) -> bool:
        return (self.has_result == other.has_result and len(self.types) == len(other.types)
                and all(ffi.wasmtime_component_valtype_equal(byref(a), byref(b)) for a, b in zip(self.types, other.types)))

    def close(self) -> None:
        for valtype in self.types:
            ffi.wasmtime_component_valtype_delete(byref(valtype))
        self.types = []

    def __del__(self) -> None:
        self.close()


class _HostFunction:
    """A host function and the shapes of the signatures components have imported it with."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self._shapes: tuple[tuple[_Signature, FuncShape], ...] = ()
        self._lock = threading.Lock()

    def shape(self, raw: Any) -> FuncShape:
        """The shape of the type wasmtime passed for this call (`raw`, the importer's)."""
        signature, kept = _Signature(raw), False
        try:
            for known, shape in self._shapes:
                if known.equals(signature):
                    return shape
            with FuncType._from_ptr(raw, owner=self) as ty:  # wasmtime's for the call: not freed here
                shape = FuncShape.of(ty)
            with self._lock:  # another thread may have kept this very signature meanwhile
                if len(self._shapes) < MAX_SHAPES and not any(known.equals(signature) for known, _ in self._shapes):
                    self._shapes, kept = (*self._shapes, (signature, shape)), True
            return shape
        finally:
            if not kept:
                signature.close()


_FUNCTIONS: Slab[_HostFunction] = Slab()


@ffi.wasmtime_component_func_callback_t  # type: ignore[misc]
def _trampoline(idx: Any, context: Any, ty_raw: Any, args: Any, nargs: int, results: Any, nresults: int) -> Any:
    def run(store: Any) -> None:
        host = _FUNCTIONS.get(idx or 0)
        try:
            shape = host.shape(ty_raw)
            if not shape.lazy:
                _answer(host.function, store, shape.params, shape.result, args, nargs, results, nresults)
                return
            with FuncType._from_ptr(ty_raw, owner=host) as ty:  # wasmtime's for the call: not freed here
                _answer(host.function, store, tuple(param for _name, param in ty.params), ty.result,
                        args, nargs, results, nresults)
        except WasmtimeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a trap that names it, never wasmtime-py's process-wide LAST_EXCEPTION
            raise WasmtimeError(f"host function failed: {exc!r}"[:4096]) from None
    return catch_exceptions(context, run)


def _answer(function: Callable[..., Any], store: Any, params: tuple[ValType, ...], result_type: ValType | None,
            args: Any, nargs: int, results: Any, nresults: int) -> None:
    """One host function call: its arguments lifted with `params`, its answer lowered with `result_type`."""
    if len(params) != nargs or (result_type is None) != (nresults == 0):
        raise TypeError("a host function's values do not match its type")
    values = [ty.convert_from_c(args[index]) for index, ty in enumerate(params)]
    result = function(store, *values)
    if result_type is None:
        if result is not None:
            raise TypeError("a host function without a result returned a value")
    else:
        result_type.convert_to_c(store, result, results)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _finalize(idx: Any) -> None:
    if _FUNCTIONS:
        _FUNCTIONS.deallocate(idx or 0)


def add_func(instance: LinkerInstance, name: str, function: Callable[..., Any]) -> None:
    """`instance.add_func(name, function)`, converting through frozen shapes."""
    instance._assert_not_locked()
    name_bytes = name.encode("utf-8")
    idx = _FUNCTIONS.allocate(_HostFunction(function))
    error = ffi.wasmtime_component_linker_instance_add_func(
        instance.ptr(), ctypes.create_string_buffer(name_bytes), len(name_bytes), _trampoline, idx, _finalize)
    if error:
        raise WasmtimeError._from_ptr(error)
