"""The component host: load components once, run each call in a fresh, limited store.

`ComponentHost` owns one wasmtime `Engine` (epoch interruption on), the compile cache, the
epoch ticker and the worker pool. Everything a caller needs is `load` (compile through the
cache and check the contract) and `call_tool` / `run_capsule` (async; the WASM runs on a
worker thread). The `*_sync` variants run on the calling thread and exist for nested calls
(a capsule's `tool-registry/invoke` already runs on a worker) and for the CLI.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Protocol

from wasmtime import Config, Engine, Store, WasmtimeError
from wasmtime.component import Component, FuncType, Linker

from murmurd.contract import ROLE_EXPORTS, Role, versioned
from murmurd.host.bridge import WasmPool
from murmurd.host.cache import CompileCache
from murmurd.host.context import CallContext, ChunkSink, SessionContext
from murmurd.host.errors import CallCancelled, CompileError, ContractError, DeadlineExceeded, InstantiationError
from murmurd.host.failures import classify, first_cause
from murmurd.host.http_forwarder import ForwarderSource
from murmurd.host.http_egress import HttpEgress
from murmurd.host.http_policy import define_http_filter
from murmurd.host.imports import define
from murmurd.host.interrupt import CallGuard, EpochTicker
from murmurd.host import hook_legacy
from murmurd.host.murmur_imports import interfaces_for, legacy_hook_interfaces
from murmurd.host.loaded import LoadedComponent
from murmurd.host.prelinked import LinkStats, PreLinked
from murmurd.host.roles import ContractViolation, check_contract, check_hook_handlers
from murmurd.host.run_gate import GateWaitCancelled, RunGate
from murmurd.host.scratch import ScratchFiles
from murmurd.host.values import ToolInput, ToolResult, tool_input_to_wasm, tool_result_from_wasm
from murmurd.host.wasi import CallGrant, CallOutput, wasi_config
from murmurd.paths import cache_dir as default_cache_dir
from murmurd.progress import Ticker

NO_GRANT = CallGrant()  # immutable: no environment, no directory, no network, default limits
# The guard of the call running on this worker thread, so a call nested in it (a tool a
# capsule invokes through murmur:tool-registry) is cancelled with it.
_current = threading.local()


class ToolCallRunner(Protocol):
    """Runs tool and driver calls elsewhere (`workers.processes.WorkerProcesses`: in worker
    processes), with `call_tool_sync`'s meaning; blocks the calling thread."""

    def call_tool(self, loaded: LoadedComponent, tool_input: ToolInput, *, grant: CallGrant,
                  session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None,
                  guard: CallGuard) -> ToolResult: ...

    async def call_tool_on_loop(self, loaded: LoadedComponent, tool_input: ToolInput, *, grant: CallGrant,
                                session: SessionContext, on_chunk: ChunkSink | None, on_thinking: ChunkSink | None,
                                guard: CallGuard, run_blocking: Callable[..., Any]) -> ToolResult | None:
        """The call awaited on the event loop with no thread waiting for it, or None when it
        needs one (then `call_tool` on a thread makes it); `run_blocking` runs what must block."""

    def close(self) -> None: ...


class HookFactory(Protocol):
    """Builds a hook's session-long instance on `host` (`HookInstance` is one)."""

    def __call__(self, host: ComponentHost, loaded: LoadedComponent, *, grant: CallGrant,
                 session: SessionContext, name: str) -> Any: ...


class ComponentHost:
    # What `hook_instance` builds with: `HookInstance`, registered once by the package face
    # (murmurd/host/__init__.py, which runs before any of its modules). The hook instance runs on
    # this host's engine, pool, ticker and linkers (`hook_instance.HookRuntime`); this way
    # neither module imports the other.
    hook_factory: ClassVar[HookFactory | None] = None

    def __init__(
        self,
        *,
        cache_dir: Path | None = None,
        use_disk_cache: bool = True,
        max_workers: int = 8,
        tick_seconds: float = 0.01,
        run_places: int | None = None,
    ) -> None:
        config = Config()
        config.epoch_interruption = True
        self.engine = Engine(config)
        directory = (cache_dir or default_cache_dir()) if use_disk_cache else None
        self.cache = CompileCache(self.engine, directory, fingerprint="epoch_interruption=1")
        self.ticker = EpochTicker(self.engine, tick_seconds)
        self.gate = RunGate(run_places if run_places is not None else max(1, (os.cpu_count() or 2) // 2))
        self.pool = WasmPool(max_workers)
        self.forwarders = ForwarderSource(self.engine)
        self._linkers: dict[tuple[Role, tuple[str, ...], bool], Linker] = {}
        self._linkers_lock = threading.Lock()
        # Each loaded component's pre-linked form, alive as long as the LoadedComponent is.
        self._prelinked: weakref.WeakKeyDictionary[LoadedComponent, PreLinked] = weakref.WeakKeyDictionary()
        self.link_stats = LinkStats()
        self.scratch = ScratchFiles()  # the guests' stdout/stderr files, lent to one call at a time
        self.workers: ToolCallRunner | None = None  # where tool and driver calls run, if not here

    def run_tool_calls_in(self, workers: ToolCallRunner) -> None:
        """Run tool and driver calls in `workers` from now on (`workers.processes.start_workers`);
        hooks' instances and capsules stay here (their imports reach the session at every
        step). The host closes them with itself."""
        if self.workers is not None:
            raise RuntimeError("this host already runs its tool calls elsewhere")
        self.workers = workers

    # -- loading ---------------------------------------------------------------------------

    def load(
        self,
        path: Path,
        *,
        name: str | None = None,
        expected: Role | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> LoadedComponent:
        """Compile (through the cache) and contract-check the component at `path`."""
        label = name or path.stem
        try:
            wasm = path.read_bytes()
        except OSError as exc:
            raise CompileError(label, f"cannot read {path}: {exc.strerror}") from exc
        return self.load_bytes(wasm, name=label, expected=expected, progress=progress)

    def load_bytes(
        self,
        wasm: bytes,
        *,
        name: str,
        expected: Role | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> LoadedComponent:
        ticker = None if progress is None else Ticker(
            progress, f"compiling {name}", f"compiled {name}",
            first=f"compiling {name} (first use on this machine; cached afterwards)")
        try:
            component = self.cache.load(wasm, ticker.start if ticker else None)
        except WasmtimeError as exc:
            raise CompileError(name, f"not a valid component: {first_cause(str(exc))}") from None
        finally:
            if ticker is not None:
                ticker.stop()
        return self._checked(component, name, hashlib.sha256(wasm).hexdigest(), expected)

    def load_compiled(self, compiled: bytes, *, name: str, sha256: str) -> LoadedComponent:
        """A component this engine's configuration compiled and serialized (a daemon's own,
        handed to its WASM worker process: trusted bytes, never a guest's or a file's)."""
        try:
            component = Component.deserialize(self.engine, compiled)
        except WasmtimeError as exc:
            raise CompileError(name, f"not a compiled component for this engine: {first_cause(str(exc))}") from None
        return self._checked(component, name, sha256, None)

    def _checked(self, component: Component, name: str, sha256: str, expected: Role | None) -> LoadedComponent:
        component_type = component.type
        imports = tuple(component_type.imports(self.engine))
        exports = tuple(component_type.exports(self.engine))
        try:
            role = check_contract(imports, exports, expected)
            handlers = check_hook_handlers(self._lifecycle_names(component)) if role is Role.HOOK else frozenset()
        except ContractViolation as exc:
            raise ContractError(name, str(exc)) from None
        return LoadedComponent(name, role, component, sha256, imports, exports, handlers)

    def _lifecycle_names(self, component: Component) -> list[str]:
        """The function names in the component's `murmur:hook/lifecycle` export (types left out)."""
        exports = component.type.exports(self.engine)
        export = exports.get(versioned(ROLE_EXPORTS[Role.HOOK])) or exports.get(hook_legacy.LIFECYCLE_EXPORT)
        if export is None:
            return []
        return [name for name, item in export.ty.exports(self.engine).items() if isinstance(item.ty, FuncType)]

    # -- calling ---------------------------------------------------------------------------

    def call_tool_sync(
        self,
        loaded: LoadedComponent,
        tool_input: ToolInput,
        *,
        grant: CallGrant = NO_GRANT,
        session: SessionContext | None = None,
        on_chunk: ChunkSink | None = None,
        on_thinking: ChunkSink | None = None,
        guard: CallGuard | None = None,
    ) -> ToolResult:
        """Run `murmur:tool/run#run` of a tool or driver on the calling thread (its guest code
        in a worker process when the host has them: the thread waits for it there)."""
        self._expect(loaded, (Role.TOOL, Role.DRIVER))
        if self.workers is not None:
            guard = guard or CallGuard(grant.limits.deadline_seconds, parent=getattr(_current, "guard", None))
            return self.workers.call_tool(loaded, tool_input, grant=grant, session=session or SessionContext(),
                                          on_chunk=on_chunk, on_thinking=on_thinking, guard=guard)
        raw = self._call(
            loaded, versioned("murmur:tool/run"), "run", (tool_input_to_wasm(tool_input),),
            grant, session, on_chunk, on_thinking, guard,
        )
        return tool_result_from_wasm(raw)

    async def call_tool(
        self,
        loaded: LoadedComponent,
        tool_input: ToolInput,
        *,
        grant: CallGrant = NO_GRANT,
        session: SessionContext | None = None,
        on_chunk: ChunkSink | None = None,
        on_thinking: ChunkSink | None = None,
        guard: CallGuard | None = None,
    ) -> ToolResult:
        """Run a tool or driver call: in a worker process, awaited on the loop, when one is
        ready for it, else on a worker thread; cancelling the awaiter stops the guest."""
        guard = guard or CallGuard(grant.limits.deadline_seconds)
        if self.workers is not None:
            self._expect(loaded, (Role.TOOL, Role.DRIVER))
            try:
                result = await self.workers.call_tool_on_loop(
                    loaded, tool_input, grant=grant, session=session or SessionContext(),
                    on_chunk=on_chunk, on_thinking=on_thinking, guard=guard, run_blocking=self.pool.run)
            except asyncio.CancelledError:
                guard.cancel("cancelled")
                raise
            if result is not None:
                return result
        return await self._on_worker(
            guard,
            lambda: self.call_tool_sync(
                loaded, tool_input, grant=grant, session=session,
                on_chunk=on_chunk, on_thinking=on_thinking, guard=guard,
            ),
        )

    def run_capsule_sync(
        self,
        loaded: LoadedComponent,
        *,
        grant: CallGrant = NO_GRANT,
        session: SessionContext | None = None,
        guard: CallGuard | None = None,
    ) -> None:
        """Run `murmur:capsule/run#run` on the calling thread."""
        self._expect(loaded, (Role.CAPSULE,))
        self._call(loaded, versioned("murmur:capsule/run"), "run", (), grant, session, None, None, guard)

    async def run_capsule(
        self,
        loaded: LoadedComponent,
        *,
        grant: CallGrant = NO_GRANT,
        session: SessionContext | None = None,
        guard: CallGuard | None = None,
    ) -> None:
        guard = guard or CallGuard(grant.limits.deadline_seconds)
        await self._on_worker(
            guard, lambda: self.run_capsule_sync(loaded, grant=grant, session=session, guard=guard)
        )

    def hook_instance(
        self,
        loaded: LoadedComponent,
        *,
        grant: CallGrant,
        session: SessionContext,
        name: str | None = None,
    ) -> Any:
        """A hook's session-long instance, a `HookInstance` (instantiated at its first call, on a worker)."""
        factory = self.hook_factory
        if factory is None:  # pragma: no cover - murmurd.host registers it whenever this module is imported
            raise RuntimeError("no hook factory: import murmurd.host, which registers HookInstance")
        return factory(self, loaded, grant=grant, session=session, name=name or loaded.name)

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        self.ticker.stop()
        self.gate.close()
        self.pool.shutdown()
        self.scratch.close()

    # -- internals -------------------------------------------------------------------------

    async def _on_worker(self, guard: CallGuard, work: Any) -> Any:
        try:
            return await self.pool.run(work)
        except asyncio.CancelledError:
            guard.cancel("cancelled")
            raise

    @staticmethod
    def _expect(loaded: LoadedComponent, roles: tuple[Role, ...]) -> None:
        if loaded.role not in roles:
            raise ContractError(loaded.name, f"is a {loaded.role.value} component; this call needs a {roles[0].value}")

    def linker_for(self, loaded: LoadedComponent) -> Linker:
        """The shared linker for this component's role and wasi:http version (built once).

        A component importing wasi:http gets wasmtime's, with `outgoing-handler#handle`
        shadowed by the egress filter; what each call may reach is its store's `HttpEgress`."""
        versions = loaded.http_versions
        key = (loaded.role, versions, loaded.legacy_hook)
        with self._linkers_lock:
            linker = self._linkers.get(key)
            if linker is None:
                linker = Linker(self.engine)
                linker.add_wasip2()
                if versions:
                    linker.add_wasi_http()
                    for version in versions:
                        define_http_filter(linker, version)
                define(linker, legacy_hook_interfaces() if loaded.legacy_hook else interfaces_for(loaded.role))
                self._linkers[key] = linker
                self.link_stats.linkers += 1
            return linker

    def prelinked(self, loaded: LoadedComponent) -> PreLinked:
        """`loaded` linked once (`murmurd.host.prelinked`): every call instantiates from this."""
        with self._linkers_lock:
            found = self._prelinked.get(loaded)
        if found is not None:
            return found
        linker = self.linker_for(loaded)
        with self._linkers_lock:
            found = self._prelinked.get(loaded)
            if found is None:
                found = PreLinked(loaded.name, loaded.component, linker, loaded.http_versions)
                self._prelinked[loaded] = found
                self.link_stats.prelinked += 1
            return found

    def prepare_http(self, store: Store, loaded: LoadedComponent, grant: CallGrant, call: CallContext) -> None:
        """Give a store that will run `loaded` its wasi:http context and egress policy."""
        self._prepare_http(store, self.prelinked(loaded), grant, call)

    def _prepare_http(self, store: Store, prelinked: PreLinked, grant: CallGrant, call: CallContext) -> None:
        version = prelinked.http_version
        if version is None:
            return
        store.set_wasi_http()
        call.egress = HttpEgress(grant.egress, self.forwarders, version)

    def _call(
        self,
        loaded: LoadedComponent,
        interface: str,
        function: str,
        args: tuple[Any, ...],
        grant: CallGrant,
        session: SessionContext | None,
        on_chunk: ChunkSink | None,
        on_thinking: ChunkSink | None,
        guard: CallGuard | None,
    ) -> Any:
        enclosing: CallGuard | None = getattr(_current, "guard", None)
        guard = guard or CallGuard(grant.limits.deadline_seconds, parent=enclosing)
        guard.gate = self.gate
        try:
            output = CallOutput(grant, self.scratch)
        except OSError as exc:
            raise InstantiationError(loaded.name, f"its log is refused: {exc}") from None
        call = CallContext(loaded.name, session or SessionContext(), guard, output, on_chunk, on_thinking)
        _current.guard = guard
        try:
            result = self._run_in_store(loaded, interface, function, args, grant, call)
        except WasmtimeError as exc:
            output.collect()
            raise classify(loaded.name, exc, call, grant) from None
        except OSError as exc:  # the preopen was refused (a symlink on its way)
            raise InstantiationError(loaded.name, f"its filesystem grant is refused: {exc}") from None
        finally:
            _current.guard = enclosing
            output.collect()
        if output.log_refused is not None:
            raise InstantiationError(loaded.name, f"its output was not logged: {output.log_refused}")
        return result

    @contextmanager
    def _place(self, artifact: str, guard: CallGuard) -> Iterator[None]:
        """A run-gate place for one call. Waiting for it counts against the call's deadline
        (whose clock, `CallGuard.install`, starts with the place) and its caller's; a call
        stopped while it waits raises what a stopped call raises."""
        due = time.monotonic() + guard.deadline_seconds
        try:
            with self.gate.call(lambda: guard.is_set() or time.monotonic() >= due):
                yield
        except GateWaitCancelled:
            if guard.cancel_reason is not None:
                raise CallCancelled(artifact, guard.cancel_reason) from None
            expired = guard.deadline_passed(time.monotonic()) or guard
            raise DeadlineExceeded(artifact, expired.deadline_seconds) from None

    def _run_in_store(
        self,
        loaded: LoadedComponent,
        interface: str,
        function: str,
        args: tuple[Any, ...],
        grant: CallGrant,
        call: CallContext,
    ) -> Any:
        """One call in a fresh store, closed when this returns however the call ended.

        Closing frees the guest's memory at once: a trap's traceback keeps this frame (and so
        the store) reachable until the garbage collector breaks the cycle, which under load
        meant several dead guests' memory held at a time."""
        with self._place(loaded.name, call.guard):  # run_gate.py: the store's whole life
            store = Store(self.engine, data=call)
            wasi_given = False
            try:
                limits = grant.limits
                store.set_limits(
                    memory_size=limits.memory_bytes,
                    table_elements=limits.table_elements,
                    instances=limits.instances,
                )
                store.set_wasi(wasi_config(grant, call.output, loaded.name))
                wasi_given = True
                prelinked = self.prelinked(loaded)
                self._prepare_http(store, prelinked, grant, call)
                call.guard.install(store)
                with self.ticker.active(call.guard):
                    instance = prelinked.instantiate(store)
                    call.stage = "call"
                    return prelinked.call(store, instance, interface, function, *args)
            finally:
                store.close()
                if wasi_given:  # wasmtime's handles to the output files went with the store
                    call.output.store_closed()
