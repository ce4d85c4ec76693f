"""Hostile components: deadlines, memory limits, contract refusals, and daemon survival."""

from __future__ import annotations

import time

import pytest

from hostile import BALLOON, GROW, SPIN, tool_component
from murmurd.contract import Role
from murmurd.host import (
    CallGrant,
    CallTrap,
    ComponentHost,
    ContractError,
    DeadlineExceeded,
    Limits,
    MemoryLimitExceeded,
    ToolInput,
)


@pytest.fixture(scope="module", params=["in-process", "worker process"])
def host(request: pytest.FixtureRequest, host: ComponentHost, worker_host: ComponentHost) -> ComponentHost:
    """Every test here runs twice: calls in this process, and in a WASM worker process."""
    return host if request.param == "in-process" else worker_host

MIB = 1024 * 1024


def test_infinite_loop_is_stopped_at_its_deadline(host: ComponentHost) -> None:
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as raised:
        host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=1)))
    elapsed = time.monotonic() - started
    assert str(raised.value) == "spin: deadline exceeded after 1 s"
    assert 0.9 <= elapsed < 3


def test_memory_over_the_limit_at_start_is_a_memory_error(host: ComponentHost) -> None:
    big = host.load_bytes(tool_component(min_pages=2048), name="big")  # 128 MiB of initial memory
    with pytest.raises(MemoryLimitExceeded) as raised:
        host.call_tool_sync(big, ToolInput(), grant=CallGrant(limits=Limits(memory_bytes=64 * MIB)))
    assert "big: memory limit of 64 MiB exceeded" in str(raised.value)


def test_a_guest_allocating_past_its_limit_fails_with_the_memory_error(host: ComponentHost, artifacts, tmp_path) -> None:
    hog = host.load(artifacts.fixture("hog"))
    log = tmp_path / "hog.log"
    with pytest.raises(MemoryLimitExceeded) as raised:
        host.call_tool_sync(hog, ToolInput(), grant=CallGrant(limits=Limits(memory_bytes=64 * MIB), log_path=log))
    assert "hog: memory limit of 64 MiB exceeded" in str(raised.value)
    assert "MemoryError" in log.read_text()


def test_a_refused_grow_that_traps_is_a_typed_trap(host: ComponentHost) -> None:
    grow = host.load_bytes(tool_component(GROW), name="grow")
    with pytest.raises(CallTrap) as raised:
        host.call_tool_sync(grow, ToolInput(), grant=CallGrant(limits=Limits(memory_bytes=64 * MIB)))
    assert "grow: trap:" in str(raised.value)
    assert "unreachable" in str(raised.value)


def test_an_old_interface_version_is_refused_with_the_versioned_message(host: ComponentHost) -> None:
    with pytest.raises(ContractError) as raised:
        host.load_bytes(tool_component(imports='(import "murmur:tool/run@0.0.9" (instance))'), name="old")
    assert str(raised.value) == (
        "old: import murmur:tool/run@0.0.9: found version 0.0.9, this host serves murmur:tool/run@0.1.0"
    )


def test_unknown_non_wasi_imports_are_refused(host: ComponentHost) -> None:
    with pytest.raises(ContractError, match="acme:evil/thing@1.0.0: unknown interface"):
        host.load_bytes(tool_component(imports='(import "acme:evil/thing@1.0.0" (instance))'), name="evil")


def test_role_must_match_the_declared_runtime(host: ComponentHost) -> None:
    with pytest.raises(ContractError, match="declared as runtime 'hook'"):
        host.load_bytes(tool_component(), name="liar", expected=Role.HOOK)


def test_bytes_that_are_not_a_component_are_refused_with_a_compile_error(host: ComponentHost) -> None:
    from murmurd.host import CompileError

    with pytest.raises(CompileError, match="junk: not a valid component"):
        host.load_bytes(b"\0asm not really", name="junk")


def test_the_host_keeps_working_after_every_failure(host: ComponentHost, artifacts) -> None:
    spin = host.load_bytes(tool_component(SPIN), name="spin")
    with pytest.raises(DeadlineExceeded):
        host.call_tool_sync(spin, ToolInput(), grant=CallGrant(limits=Limits(deadline_seconds=0.2)))
    echo = host.load(artifacts.example("echo"))
    result = host.call_tool_sync(echo, ToolInput(data='{"text": "still here"}'))
    assert result.data == '{"text": "still here"}'


def test_a_rust_style_allocation_failure_is_the_memory_error(host: ComponentHost, tmp_path) -> None:
    from pathlib import Path

    from wasmtime import wat2wasm

    wat = (Path(__file__).parent / "fixtures" / "alloc-failure.wat").read_text()
    rusty = host.load_bytes(wat2wasm(wat), name="rusty")
    log = tmp_path / "rusty.log"
    with pytest.raises(MemoryLimitExceeded) as raised:
        host.call_tool_sync(rusty, ToolInput(), grant=CallGrant(limits=Limits(memory_bytes=64 * MIB), log_path=log))
    assert "rusty: memory limit of 64 MiB exceeded" in str(raised.value)
    assert log.read_text() == "memory allocation of 16777216 bytes failed\n"


def _resident_mib() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.anyio
async def test_a_failed_guests_memory_is_freed_when_its_call_ends(host: ComponentHost) -> None:
    """Each call fills 128 MiB and traps; the traceback its error carries must not keep the
    store alive, so after several calls the process holds about none of it, not 128 MiB each."""
    balloon = host.load_bytes(tool_component(BALLOON), name="balloon")
    grant = CallGrant(limits=Limits(memory_bytes=128 * MIB))
    failures = []
    before = _resident_mib()
    for _ in range(4):
        with pytest.raises(CallTrap) as raised:
            await host.call_tool(balloon, ToolInput(), grant=grant)
        failures.append(raised.value)  # keep the errors (and their tracebacks) alive
    grown = _resident_mib() - before
    assert grown < 64, f"resident memory grew {grown} MiB over 4 failed 128 MiB calls"
