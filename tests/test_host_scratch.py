"""The guests' stdout/stderr scratch files the host lends to one call at a time.

A file goes back to the host only once the store that wrote to it is closed, and what one call
wrote never shows in the next call's capture or log."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from wasmtime import Store, WasiConfig, wat2wasm

from hostile import GROW, tool_component
from murmurd import workdir_fs
from murmurd.host import CallGrant, CallTrap, ComponentHost, Limits, MemoryLimitExceeded, ToolInput
from murmurd.host.scratch import ScratchFiles
from murmurd.host.wasi import CallOutput

MIB = 1024 * 1024
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def own_host() -> Iterator[ComponentHost]:
    """A host of this test's own, so its scratch files are this test's alone."""
    host = ComponentHost()
    yield host
    host.close()


def _descriptors_open_on(fd: int) -> int:
    """How many descriptors of this process are open on the file `fd` is open on."""
    target = os.fstat(fd)
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            found = os.stat(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
        count += (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino)
    return count


def test_a_closed_store_holds_no_handle_to_its_output_file(tmp_path: Path) -> None:
    """What lending rests on: wasmtime's handle to a stdio file lives in the store and no longer."""
    directory = workdir_fs.open_directory(tmp_path, ".")
    fd = workdir_fs.anonymous_file(directory)
    os.close(directory)
    try:
        config = WasiConfig()
        config.stderr_file = workdir_fs.fd_path(fd)
        store = Store()
        store.set_wasi(config)
        assert _descriptors_open_on(fd) == 2  # ours and wasmtime's: the count sees wasmtime's
        store.close()
        assert _descriptors_open_on(fd) == 1
    finally:
        os.close(fd)


def test_files_come_back_after_the_call_with_no_other_handle_and_are_reused(own_host: ComponentHost, artifacts) -> None:
    probe = own_host.load(artifacts.fixture("probe"))
    own_host.call_tool_sync(probe, ToolInput(), grant=CallGrant())  # no log: stderr alone, kept for its tail
    assert own_host.scratch.made == 1 and own_host.scratch.free_count() == 1
    for fd in own_host.scratch.kept():
        assert _descriptors_open_on(fd) == 1  # no handle of the closed store is left to write
        assert os.fstat(fd).st_size == 0  # emptied on return
    own_host.call_tool_sync(probe, ToolInput(), grant=CallGrant())
    assert own_host.scratch.made == 1  # the second call borrowed the same file


def test_a_logged_call_borrows_files_outside_the_workdir_and_logs_only_its_own_output(
        own_host: ComponentHost, artifacts, tmp_path: Path) -> None:
    """A logged call's stdout and stderr are scratch files of the temporary directory, never
    beside its log: a kept one would otherwise hold a descriptor beneath a session's workdir
    after the session closed. Each call's log gets that call's output once."""
    probe = own_host.load(artifacts.fixture("probe"))
    grant = CallGrant(log_path=tmp_path / "probe.log")
    for _ in range(3):
        own_host.call_tool_sync(probe, ToolInput(), grant=grant)
    assert own_host.scratch.made == 2 and own_host.scratch.free_count() == 2  # made once, lent again
    for fd in own_host.scratch.kept():
        assert _descriptors_open_on(fd) == 1 and os.fstat(fd).st_size == 0
    beneath = [name for name in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{name}") and str(tmp_path) in os.readlink(f"/proc/self/fd/{name}")]
    assert beneath == []
    assert (tmp_path / "probe.log").read_text().count("probe says hello on stderr") == 3


def test_one_calls_stderr_never_reaches_the_next_calls_capture(own_host: ComponentHost) -> None:
    """A failed allocation's message on stderr makes its call a memory error; the next call,
    which borrows the same file and traps writing nothing, is a plain trap with no stderr."""
    rusty = own_host.load_bytes(wat2wasm((FIXTURES / "alloc-failure.wat").read_text()), name="rusty")
    grow = own_host.load_bytes(tool_component(GROW), name="grow")
    limits = Limits(memory_bytes=64 * MIB)
    with pytest.raises(MemoryLimitExceeded):
        own_host.call_tool_sync(rusty, ToolInput(), grant=CallGrant(limits=limits))
    made = own_host.scratch.made
    with pytest.raises(CallTrap) as raised:
        own_host.call_tool_sync(grow, ToolInput(), grant=CallGrant(limits=limits))
    assert not isinstance(raised.value, MemoryLimitExceeded)
    assert "stderr" not in str(raised.value)
    assert own_host.scratch.made == made  # it did borrow rusty's file


def test_files_of_a_store_not_known_closed_are_closed_not_lent_again() -> None:
    scratch = ScratchFiles()
    output = CallOutput(CallGrant(), scratch)
    config = WasiConfig()
    output.configure(config)  # wasmtime holds the file now, and nobody said it let go
    output.collect()
    assert scratch.made == 1 and scratch.free_count() == 0
    config.close()


def test_calls_at_once_borrow_different_files() -> None:
    scratch = ScratchFiles()
    first, second = CallOutput(CallGrant(), scratch), CallOutput(CallGrant(), scratch)  # a call nested in another
    for output in (first, second):
        output.store_closed()
        output.collect()
    kept = scratch.kept()
    assert len(set(kept)) == 2 and scratch.made == 2
    third = CallOutput(CallGrant(), scratch)
    assert scratch.made == 2 and scratch.free_count() == 1
    third.store_closed()
    third.collect()
    scratch.close()
    assert scratch.free_count() == 0
