"""Component function types read once (murmurd/host/frozen_types.py), through real components.

A host function is one definition on a linker, and any component may import its name with a
signature of its own: each importer's values must be converted with its own type, never with a
shape read from another's. The rich types (records, variants, options, results, resources) are
exercised by every driver, tool, hook and wasi:http test, which all convert through these shapes.
"""

from __future__ import annotations

import pytest
from wasmtime import Engine, Store
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


def _run(engine: Engine, linker: Linker, component: Component, value: object) -> object:
    store = Store(engine)
    try:
        instance = linker.instantiate(store, component)
        func = instance.get_func(store, "run")
        assert func is not None
        with func.type(store) as ty:
            shape = FuncShape.of(ty)
        result = invoke(func, store, shape, value)
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


def test_a_host_function_whose_answer_does_not_fit_its_type_fails_the_call() -> None:
    """As wasmtime-py's own trampoline: the call traps, and the conversion's error is raised."""
    engine = Engine()
    linker = Linker(engine)
    with linker.root() as root:
        with root.add_instance("test:frozen/host") as instance:
            frozen_types.add_func(instance, "twice", lambda _store, _value: "not a number")
    with pytest.raises(TypeError, match="expected int for U32"):
        _run(engine, linker, _component(engine, "u32", "i32"), 1)


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
