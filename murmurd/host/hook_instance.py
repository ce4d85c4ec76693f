"""One hook component's live instance for a session: a Store kept across calls.

Tools get a fresh store per call; a hook keeps state between calls (the session id it took from
`on-session-start`, counters, buffers), so one store and one instance live as long as the
`HookInstance`. What still holds per call: each call runs under its own `CallGuard` (its own
deadline, `grant.limits.deadline_seconds`, 30 s for hooks by default), on a `WasmPool` worker
thread (never the event loop), one call at a time.

A trap, a deadline or a cancel leaves the component instance unusable (wasmtime poisons it), so
the store is dropped and the next call instantiates afresh: a hook that traps loses its
in-memory state. An `err` returned by the handler is not a trap: the instance keeps its state.

The hook's stdout and stderr go to the grant's log (`logs/hook-<name>.log`) after every call,
through the same `CallOutput` tools use.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Protocol

from wasmtime import Engine, Store, WasmtimeError
from wasmtime.component import Func, Linker

from murmurd.contract import ROLE_EXPORTS, Role, versioned
from murmurd.host.context import CallContext, SessionContext
from murmurd.host.errors import CallCancelled, ContractError, HookError, InstantiationError
from murmurd.host.failures import classify
from murmurd.host.frozen_types import FuncShape, invoke
from murmurd.host import hook_legacy
from murmurd.host.bridge import WasmPool
from murmurd.host.hook_values import HANDLER_EVENT, HookOutput, handler_result_from_wasm, to_wasm
from murmurd.host.interrupt import CallGuard, EpochTicker
from murmurd.host.loaded import LoadedComponent
from murmurd.host.wasi import CallGrant, CallOutput, wasi_config

LIFECYCLE = versioned(ROLE_EXPORTS[Role.HOOK])


class HookRuntime(Protocol):
    """What a hook instance needs of the host that builds it (`ComponentHost` is one)."""

    engine: Engine
    pool: WasmPool
    ticker: EpochTicker

    def linker_for(self, loaded: LoadedComponent) -> Linker: ...

    def prepare_http(self, store: Store, loaded: LoadedComponent, grant: CallGrant, call: CallContext) -> None: ...


class _Live:
    """A store with its instantiated hook, and the per-store pieces that go with it."""

    def __init__(self, store: Store, call: CallContext, output: CallOutput) -> None:
        self.store = store
        self.call = call
        self.output = output
        self.funcs: dict[str, tuple[Func, FuncShape]] = {}

    def close(self) -> None:
        """Free the guest's memory now and flush its last output to the log."""
        self.store.close()
        self.output.collect()


class HookInstance:
    """A hook's session-long instance. Create it with `ComponentHost.hook_instance`."""

    def __init__(
        self, host: HookRuntime, loaded: LoadedComponent, *, grant: CallGrant, session: SessionContext, name: str
    ) -> None:
        if loaded.role is not Role.HOOK:
            raise ContractError(loaded.name, f"is a {loaded.role.value} component; a hook instance needs a hook")
        self.host = host
        self.loaded = loaded
        self.grant = grant
        self.session = session
        self.name = name
        self.handlers: frozenset[str] = loaded.handlers
        # The lifecycle it exports: the seed's, or the published hook@0.5.0 one (adapted in hook_legacy).
        self.lifecycle = hook_legacy.LIFECYCLE_EXPORT if loaded.legacy_hook else LIFECYCLE
        self._live: _Live | None = None
        self._guard: CallGuard | None = None  # the running call's guard
        self._lock = threading.Lock()  # one call at a time, whatever thread it comes from
        self._async_lock: asyncio.Lock | None = None  # queues async callers without holding a worker
        self._closed = False
        self.instantiations = 0  # how many stores this hook has had (a trap costs one)

    # -- calling -----------------------------------------------------------------------------

    async def call(self, handler: str, argument: Any) -> HookOutput:
        """Run `handler` on a worker thread; cancelling the awaiter cancels the guest."""
        self._check(handler, argument)
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            guard = CallGuard(self.grant.limits.deadline_seconds)
            self._guard = guard  # cancellable from now on, even before a worker picks it up
            try:
                return await self.host.pool.run(self._run, handler, argument, guard)
            except asyncio.CancelledError:
                guard.cancel("cancelled")
                raise

    def call_sync(self, handler: str, argument: Any) -> HookOutput:
        """The same on the calling thread (which must not be the event loop's)."""
        self._check(handler, argument)
        return self._run(handler, argument, CallGuard(self.grant.limits.deadline_seconds))

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the running call (if any) at its next epoch check; it raises `CallCancelled`.
        A call that has not started yet (queued behind another) is not affected."""
        guard = self._guard
        if guard is not None:
            guard.cancel(reason)

    def close(self) -> None:
        """Cancel a running call, wait for it to end, and close the store (memory freed at once)."""
        self._closed = True
        self.cancel("hook instance closed")
        with self._lock:
            self._drop()

    @property
    def instantiated(self) -> bool:
        return self._live is not None

    # -- internals ---------------------------------------------------------------------------

    def _check(self, handler: str, argument: Any) -> None:
        expected = HANDLER_EVENT.get(handler)
        if expected is None:
            raise ValueError(f"no lifecycle handler {handler!r} (handlers: {', '.join(HANDLER_EVENT)})")
        if not isinstance(argument, expected):
            raise TypeError(f"{handler} takes a {expected.__name__}, not {type(argument).__name__}")
        if handler not in self.handlers:
            raise ContractError(self.name, f"does not export {self.lifecycle}#{handler}")

    def _run(self, handler: str, argument: Any, guard: CallGuard) -> HookOutput:
        with self._lock:
            if self._closed:
                raise CallCancelled(self.name, "hook instance closed")
            if guard.cancel_reason is not None:  # cancelled while it waited its turn
                raise CallCancelled(self.name, guard.cancel_reason)
            self._guard = guard
            try:
                return self._call_locked(handler, argument, guard)
            finally:
                self._guard = None

    def _call_locked(self, handler: str, argument: Any, guard: CallGuard) -> HookOutput:
        legacy = self.loaded.legacy_hook
        value = hook_legacy.event_to_wasm(argument) if legacy else to_wasm(argument)
        if value is hook_legacy.SKIP:  # a dispatch the hook@0.5.0 layout does not have
            return HookOutput("none")
        live = self._live
        try:
            if live is None:
                live = self._instantiate(guard)
            call = live.call
            call.guard, call.import_failure, call.stage = guard, None, "call"
            guard.install(live.store)
            func, shape = live.funcs[handler]
            with self.host.ticker.active(guard):
                raw = invoke(func, live.store, shape, value)
                func.post_return(live.store)
        except WasmtimeError as exc:
            failed = live or self._live
            if failed is None:  # pragma: no cover - _instantiate always sets _live before wasm runs
                raise
            failed.output.drain()
            error = classify(self.name, exc, failed.call, self.grant)
            self._drop()  # the instance cannot be re-entered after a trap
            raise error from None
        live.output.drain()
        if live.output.log_refused is not None:
            error = InstantiationError(self.name, f"its output was not logged: {live.output.log_refused}")
            self._drop()
            raise error
        result = hook_legacy.handler_result_from_wasm(raw, handler) if legacy else handler_result_from_wasm(raw)
        if isinstance(result, str):
            raise HookError(self.name, result, handler)
        return result

    def _instantiate(self, guard: CallGuard) -> _Live:
        """A fresh store and instance under the first call's guard (instantiation counts against it)."""
        loaded, grant = self.loaded, self.grant
        try:
            output = CallOutput(grant)
        except OSError as exc:
            raise InstantiationError(self.name, f"its log is refused: {exc}") from None
        call = CallContext(self.name, self.session, guard, output)
        store = Store(self.host.engine, data=call)
        live = _Live(store, call, output)
        self._live = live
        try:
            limits = grant.limits
            store.set_limits(
                memory_size=limits.memory_bytes, table_elements=limits.table_elements, instances=limits.instances
            )
            store.set_wasi(wasi_config(grant, output, loaded.name))
            prelinked = self.host.prelinked(loaded)
            self.host.prepare_http(store, loaded, grant, call)
            guard.install(store)
            with self.host.ticker.active(guard):
                instance = prelinked.instantiate(store)
        except OSError as exc:  # the preopen was refused (a symlink on its way)
            self._drop()
            raise InstantiationError(self.name, f"its filesystem grant is refused: {exc}") from None
        for handler in self.handlers:
            index = prelinked.export_index(self.lifecycle, handler)
            func = instance.get_func(store, index) if index is not None else None
            if func is None:
                self._drop()
                raise ContractError(self.name, f"does not export {self.lifecycle}#{handler}")
            live.funcs[handler] = (func, prelinked.shape(store, func, self.lifecycle, handler))
        self.instantiations += 1
        return live

    def _drop(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.close()
