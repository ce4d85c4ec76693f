"""A component is linked once and instantiated per call (issue 29 item 4): a second call of the
same component builds no linker and re-resolves nothing, and every call still gets a fresh
instance whose guest state (module globals, heap) no other call sees."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from wasmtime import Store, WasiConfig
from wasmtime.component import Linker

import murmurd.host.host as host_module
from murmurd.contract import versioned
from murmurd.host import ComponentHost, ToolInput
from murmurd.host.values import tool_input_to_wasm, tool_result_from_wasm

RUN = versioned("murmur:tool/run")


class CountingLinker(Linker):
    """wasmtime's Linker, counting how often the host constructs one."""

    built = 0

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        CountingLinker.built += 1
        super().__init__(engine)


@pytest.fixture
def counted_host(monkeypatch) -> Iterator[ComponentHost]:
    """A host of its own (fresh link caches) whose every Linker construction is counted."""
    CountingLinker.built = 0
    monkeypatch.setattr(host_module, "Linker", CountingLinker)
    component_host = ComponentHost()
    yield component_host
    component_host.close()


def report(result) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(result.data)


def test_a_second_call_of_the_same_component_does_not_relink(counted_host: ComponentHost, artifacts) -> None:
    counter = counted_host.load(artifacts.fixture("counter"))
    counted_host.call_tool_sync(counter, ToolInput(data="first"))
    assert (CountingLinker.built, counted_host.link_stats.linkers, counted_host.link_stats.prelinked) == (1, 1, 1)
    for n in range(3):
        counted_host.call_tool_sync(counter, ToolInput(data=f"again {n}"))
    assert (CountingLinker.built, counted_host.link_stats.linkers, counted_host.link_stats.prelinked) == (1, 1, 1)
    assert counted_host.prelinked(counter) is counted_host.prelinked(counter)


def test_components_of_one_role_share_the_linker(counted_host: ComponentHost, artifacts) -> None:
    counter = counted_host.load(artifacts.fixture("counter"))
    probe = counted_host.load(artifacts.fixture("probe"))
    counted_host.call_tool_sync(counter, ToolInput(data="x"))
    counted_host.call_tool_sync(probe, ToolInput())
    counted_host.call_tool_sync(probe, ToolInput())
    assert CountingLinker.built == 1  # one tool linker, host functions defined once
    assert counted_host.link_stats.prelinked == 2  # one pre-linked form per component


def test_two_calls_never_see_each_others_guest_state(host: ComponentHost, artifacts) -> None:
    counter = host.load(artifacts.fixture("counter"))
    first = report(host.call_tool_sync(counter, ToolInput(data="secret of call one")))
    second = report(host.call_tool_sync(counter, ToolInput(data="call two")))
    assert first == {"calls": 1, "seen": ["secret of call one"]}
    assert second == {"calls": 1, "seen": ["call two"]}


def test_the_fixture_does_show_state_when_an_instance_is_kept(host: ComponentHost, artifacts) -> None:
    """The contrast that makes the test above able to fail: two calls on one kept instance
    (what reusing a driver instance across turns would do) see the first call's state."""
    counter = host.load(artifacts.fixture("counter"))
    prelinked = host.prelinked(counter)
    store = Store(host.engine)
    try:
        store.set_wasi(WasiConfig())
        store.set_epoch_deadline(1 << 40)
        instance = prelinked.instantiate(store)
        func = prelinked.func(store, instance, RUN, "run")
        results = []
        for data in ("one", "two"):
            results.append(json.loads(tool_result_from_wasm(func(store, tool_input_to_wasm(ToolInput(data=data)))).data))
            func.post_return(store)
    finally:
        store.close()
    assert results[1] == {"calls": 2, "seen": ["one", "two"]}


@pytest.mark.anyio
async def test_concurrent_calls_on_worker_threads_are_isolated_too(host: ComponentHost, artifacts) -> None:
    counter = host.load(artifacts.fixture("counter"))
    results = await asyncio.gather(*(host.call_tool(counter, ToolInput(data=f"call {n}")) for n in range(8)))
    assert [report(r) for r in results] == [{"calls": 1, "seen": [f"call {n}"]} for n in range(8)]
