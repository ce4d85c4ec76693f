"""Component function types read once (murmurd/host/frozen_types.py), through real components.

A host function is one definition on a linker, and any component may import its name with a
signature of its own: each importer's values must be converted with its own type, never with a
shape read from another's. The rich types (records, variants, options, results, resources) are
exercised by every driver, tool, hook and wasi:http test, which all convert through these shapes.
"""

from __future__ import annotations

import pytest
from wasmtime import Engine, Store, WasmtimeError
from wasmtime.component import _enter as wasmtime_enter
from wasmtime.component import Component, Linker

from murmurd.host import frozen_types
from murmurd.host.frozen_types import MAX_SHAPES, FuncShape, invoke

# WIT type, core type of one value, a value and what the host function makes of it
SIGNATURES = [
    ("u32", "i32", 21, 42),
    ("f64", "f64", 1.25, 2.5),
    ("u64", "i64", 1 << 40, 1 << 41),
    ("s32", "i32", -7, -14),
    ("f32", "f32", 0.5, 1.0),
    ("u8", "i32", 100, 200),
]


def _component(engine: Engine, wit: str, core: str) -> Component:
    """Exports `run: func(x: T) -> T`, which returns the host's `test:frozen/host#twice(x)`."""
    return Component(engine, f"""
(component
  (import "test:frozen/host" (instance $host
    (export "twice" (func (param "x" {wit}) (result {wit})))))
  (core func $twice (canon lower (func $host "twice")))
  (core module $M
    (import "host" "twice" (func $twice (param {core}) (result {core})))
    (func (export "run") (param {core}) (result {core}) (call $twice (local.get 0))))
  (core instance $m (instantiate $M (with "host" (instance (export "twice" (func $twice))))))
  (func (export "run") (param "x" {wit}) (result {wit}) (canon lift (core func $m "run")))
)""")


def _linker(engine: Engine, seen: list[object]) -> Linker:
    def twice(_store: object, value: object) -> object:
        seen.append(value)
        return value * 2  # type: ignore[operator]

    linker = Linker(engine)
    with linker.root() as root:
        with root.add_instance("test:frozen/host") as instance:
            frozen_types.add_func(instance, "twice", twice)
    return linker


def _run(engine: Engine, linker: Linker, component: Component, *values: object) -> object:
    store = Store(engine)
    try:
        instance = linker.instantiate(store, component)
        func = instance.get_func(store, "run")
        assert func is not None
        with func.type(store) as ty:
            shape = FuncShape.of(ty)
        result = invoke(func, store, shape, *values)
        func.post_return(store)
        return result
    finally:
        store.close()


def _host_function() -> frozen_types._HostFunction:
    """The one host function defined last (the slab counts up and never reuses a handle)."""
    handles = frozen_types._FUNCTIONS.handles
    return handles[max(handles)]


def test_each_importer_of_one_host_function_is_converted_with_its_own_signature() -> None:
    engine = Engine()
    seen: list[object] = []
    linker = _linker(engine, seen)
    host = _host_function()
    components = [(_component(engine, wit, core), value, doubled) for wit, core, value, doubled in SIGNATURES]
    for _round in range(2):  # the second round takes every shape it can from what the first kept
        for component, value, doubled in components:
            assert _run(engine, linker, component, value) == doubled
    assert seen == [value for _ in range(2) for _wit, _core, value, _doubled in SIGNATURES]
    assert len(host._shapes) == MAX_SHAPES  # the rest are read afresh at every call, never kept


def test_a_signature_seen_again_uses_the_shape_kept_for_it() -> None:
    engine = Engine()
    seen: list[object] = []
    linker = _linker(engine, seen)
    host = _host_function()
    first, second = _component(engine, "u32", "i32"), _component(engine, "u32", "i32")  # two components, one type
    for component in (first, second, first):
        assert _run(engine, linker, component, 5) == 10
    assert len(host._shapes) == 1
    assert _run(engine, linker, _component(engine, "f64", "f64"), 0.75) == 1.5
    assert len(host._shapes) == 2


def test_a_host_function_whose_answer_does_not_fit_its_type_traps_naming_it() -> None:
    """A trap that names the failure, never an exception parked in wasmtime-py's process-wide
    LAST_EXCEPTION (where another thread's call would raise it)."""
    engine = Engine()
    linker = Linker(engine)
    with linker.root() as root:
        with root.add_instance("test:frozen/host") as instance:
            frozen_types.add_func(instance, "twice", lambda _store, _value: "not a number")
    with pytest.raises(WasmtimeError, match="host function failed: TypeError.*expected int for U32"):
        _run(engine, linker, _component(engine, "u32", "i32"), 1)
    assert wasmtime_enter.LAST_EXCEPTION is None


def _huge_parameter_component(engine: Engine, depth: int) -> Component:
    """Exports `run()`, which calls the host's `f(x: option<t>)` with `none`, where `t` is named
    tuples of tuples `depth` deep: 2^depth leaves, a type a few hundred bytes long."""
    types = " ".join(f"(type $t{i} (tuple {f'$t{i - 1}' if i > 1 else 'u32'} {f'$t{i - 1}' if i > 1 else 'u32'}))"
                     for i in range(1, depth + 1))
    return Component(engine, f"""
(component
  (import "test:frozen/host" (instance $host
    {types}
    (export "f" (func (param "x" (option $t{depth}))))))
  (core module $Mem (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024)))
  (core instance $mem (instantiate $Mem))
  (core func $f (canon lower (func $host "f") (memory (core memory $mem "memory")) (realloc (core func $mem "realloc"))))
  (core module $M
    (import "host" "f" (func $f (param i32)))
    (func (export "run") (call $f (i32.const 0))))
  (core instance $m (instantiate $M (with "host" (instance (export "f" (func $f))))))
  (func (export "run") (canon lift (core func $m "run")))
)""")


def test_a_type_too_large_to_freeze_is_converted_with_wasmtime_pys_own_types() -> None:
    """2^13 leaves unfold into more parts than a shape holds: the call converts lazily (the
    value is `none`), and what is kept for the signature is no frozen copy of it."""
    engine = Engine()
    seen: list[object] = []
    linker = Linker(engine)
    with linker.root() as root:
        with root.add_instance("test:frozen/host") as instance:
            frozen_types.add_func(instance, "f", lambda _store, value: seen.append(value))
    host = _host_function()
    component = _huge_parameter_component(engine, 13)
    for _ in range(2):
        assert _run(engine, linker, component, *()) is None
    assert seen == [None, None]
    assert [shape for _signature, shape in host._shapes] == [frozen_types.LAZY]
    small = _huge_parameter_component(engine, 5)  # 32 leaves: frozen and kept
    assert _run(engine, linker, small, *()) is None
    assert not host._shapes[1][1].lazy


def test_invoke_refuses_the_wrong_number_of_arguments() -> None:
    engine = Engine()
    linker = _linker(engine, [])
    store = Store(engine)
    try:
        instance = linker.instantiate(store, _component(engine, "u32", "i32"))
        func = instance.get_func(store, "run")
        assert func is not None
        with func.type(store) as ty:
            shape = FuncShape.of(ty)
        with pytest.raises(TypeError, match="given 2, expected 1"):
            invoke(func, store, shape, 1, 2)
    finally:
        store.close()


def test_an_export_too_large_to_freeze_is_called_with_wasmtime_pys_own_types() -> None:
    engine = Engine()
    types = " ".join(f"(type $t{i} (tuple {f'$t{i - 1}' if i > 1 else 'u32'} {f'$t{i - 1}' if i > 1 else 'u32'}))"
                     for i in range(1, 14))
    component = Component(engine, f"""
(component
  {types}
  (core module $Mem (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024)))
  (core instance $mem (instantiate $Mem))
  (core module $M
    (import "mem" "memory" (memory 1))
    (func (export "take") (param i32) (result i32) (i32.load (local.get 0))))
  (core instance $m (instantiate $M (with "mem" (instance $mem))))
  (func (export "take") (param "x" (option $t13)) (result u32)
    (canon lift (core func $m "take") (memory (core memory $mem "memory")) (realloc (core func $mem "realloc"))))
)""")
    store = Store(engine)
    try:
        func = Linker(engine).instantiate(store, component).get_func(store, "take")
        assert func is not None
        with func.type(store) as ty:
            shape = FuncShape.of(ty)
        assert shape is frozen_types.LAZY
        assert invoke(func, store, shape, None) == 0  # the option's discriminant, as the guest read it
        func.post_return(store)
    finally:
        store.close()
