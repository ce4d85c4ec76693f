"""`murmurd serve`: stage a capsule, bind its port, serve it until the lifecycle or a signal ends it.

Shutdown order: stop accepting tasks, let the running task end (or cancel it after the grace
period; cancelling kills its shell commands' process groups), close the sessions (hooks hear
`on-session-end` and are freed, traces closed; each attempt already wrote its own
`session_end`), kill any shell group still running, then stop the HTTP server. Exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from murmurd.a2a.http.auth.binding import UnsafeServe, check_serve, is_loopback
from murmurd.a2a.http.auth.config import AuthConfig
from murmurd.a2a.http.auth.current import CurrentAuth
from murmurd.a2a.http.auth.reload import reload_credentials
from murmurd.a2a.http.auth.tls import TlsFiles
from murmurd.a2a.http.connlimits import ConnectionLimits, protocol_class
from murmurd.a2a.core.daemon import CapsuleDaemon
from murmurd.a2a.core.lifecycle import LifecyclePolicy
from murmurd.a2a.http.public_url import check_public_url
from murmurd.staging.identity import capsule_url_for
from murmurd.a2a.core.coordination import Coordination, LocalCoordination
from murmurd.a2a.replicas.coordination import ReplicaCoordination
from murmurd.a2a.replicas.coordinator import ReplicaCoordinator, new_replica_id
from murmurd.a2a.replicas.events import SharedEventLog
from murmurd.a2a.replicas.ticket_key import shared_ticket_key
from murmurd.a2a.http.server import ServerConfig, create_app
from murmurd.a2a.core.state_dir import StateDirLock
from murmurd.a2a.stores import is_postgres, open_store
from murmurd.a2a.core.context_sessions import INDEX_DIR as CONTEXT_SESSIONS
from murmurd.a2a.stores.base import Retention, TaskStore, prune_periodically
from murmurd.a2a.core.stream import EventLog
from murmurd.a2a.http.tickets import DEFAULT_TTL_SECONDS, KEY_BYTES
from murmurd.heap import freeze_startup_objects
from murmurd.host import ComponentHost
from murmurd.host.workers.processes import start_workers
from murmurd.session.file_process import FileProcess
from murmurd.staging.template import template_for
from murmurd.manifest.origins import check_origin
from murmurd.session import shell_watchdog
from murmurd.staging.stage import stage_capsule

logger = logging.getLogger("murmurd.serve")

STATE_DIR_NAME = ".murmurd"
# WASM threads beyond one per running task: hooks, request-input waits, a stage-time call.
POOL_HEADROOM = 8


class PortTaken(OSError):
    pass


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind now, so a taken port is an error that names it and port 0 tells us the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on accepted sockets whose proto says
    # TCP, and without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortTaken(f"cannot bind {host}:{port}: {exc.strerror} (is another capsule using port {port}?)") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _tls_config(tls: TlsFiles | None) -> dict[str, object]:
    """uvicorn's TLS settings: client certificates optional (a bearer token works without one),
    verified against the client CA when one is presented."""
    if tls is None:
        return {}
    config: dict[str, object] = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    if tls.client_ca is not None:
        config.update(ssl_ca_certs=str(tls.client_ca), ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return config


def cors_origins(manifest: list[str], flags: tuple[str, ...]) -> tuple[str, ...]:
    """The origins a browser page may call from: the manifest's, then `--cors-origin`'s (each
    checked again here: the manifest's were validated, but options may come from code)."""
    return tuple(dict.fromkeys(check_origin(origin) for origin in [*manifest, *flags]))


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int | None = None
    state_dir: Path | None = None
    store: str | None = None  # None or "sqlite": the state directory's file; postgresql://...: replicas
    replica_lease_secs: float = 15.0  # a replica silent this long is dead (its running tasks fail)
    task_acceptance: str | None = None
    after_task: str | None = None
    max_concurrent_tasks: int | None = None  # overrides lifecycle.max_concurrent_tasks (queue only)
    session_idle_secs: float = 60.0
    wasm_processes: int | None = None  # tool and driver calls' worker processes (None: one per two cores; 0: none)
    task: str | None = None  # the launch task (upstream's task.md), run before any A2A message
    env: dict[str, str] | None = None  # None: the process environment (the CLI adds the project .env)
    grace_seconds: float = 10.0
    linger_seconds: float = 1.0  # keep answering tasks/get briefly after the lifecycle ends
    max_body_bytes: int = 1024 * 1024
    stream_buffer: int = 1024  # events kept for Last-Event-ID replay
    stream_buffer_bytes: int = 16 * 1024 * 1024  # and at most this much of their frames
    max_batch: int = 100  # requests in one JSON-RPC batch
    header_timeout_secs: float = 10.0
    body_timeout_secs: float = 30.0  # reading the request body only: streams are exempt
    keep_alive_secs: float = 5.0
    max_connections: int = 256
    max_streams: int | None = None  # None: half of max_connections
    max_streams_per_client: int | None = None  # None: half of the stream cap (at least 1)
    max_response_bytes: int = 4 * 1024 * 1024  # a batch's answers
    write_timeout_secs: float = 30.0  # a response left unread this long closes its connection
    retain_finished_secs: float | None = 7 * 24 * 3600.0  # None: keep finished tasks forever
    retain_finished_count: int | None = 10_000  # None: no count limit
    prune_interval_secs: float = 60.0
    max_open_contexts: int | None = 64  # contexts one peer credential may hold open (None: no limit)
    keep_context_sessions: int | None = 256  # closed context session workdirs kept at most (None: no limit)
    auth: AuthConfig = field(default_factory=AuthConfig)  # the credentials accepted (none: open)
    load_auth: Callable[[], AuthConfig] | None = None  # reads them again on SIGHUP (None: no reload)
    tls: TlsFiles | None = None  # murmurd terminates TLS itself
    insecure: bool = False  # serve a non-loopback address without any credential
    cors_origins: tuple[str, ...] = ()  # added to the manifest's network.cors_origins
    public_url: str | None = None  # the card's address (None: the bound scheme://host:port/)
    stream_ticket_ttl: float = DEFAULT_TTL_SECONDS  # seconds a browser's stream ticket stays good
    freeze_heap: bool = False  # the start-up objects out of the collector's full passes (murmurd.heap; the CLI's)

    @property
    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(self.header_timeout_secs, self.body_timeout_secs, self.keep_alive_secs,
                                self.max_connections, self.write_timeout_secs)

    @property
    def stream_caps(self) -> tuple[int, int]:
        """(streams in all, streams per client address). Streams never complete, so their
        connections are never evictable: the cap stays below the connection cap."""
        total = self.max_connections // 2 if self.max_streams is None else self.max_streams
        if total >= self.max_connections:
            raise ValueError(f"max_streams {total} must be below max_connections {self.max_connections}")
        per_client = self.max_streams_per_client if self.max_streams_per_client is not None else max(1, total // 2)
        return total, per_client

    @property
    def retention(self) -> Retention:
        return Retention(self.retain_finished_secs, self.retain_finished_count)


def wasm_processes(chosen: int | None) -> int:
    """How many worker processes run tool and driver calls: as chosen, else one per two cores
    (at least one), so the daemon's loop and the guests' code each have a core."""
    if chosen is not None:
        if chosen < 0:
            raise ValueError(f"--wasm-processes must be 0 or more, not {chosen}")
        return chosen
    return max(1, (os.cpu_count() or 2) // 2)


def _event_log(store: TaskStore, options: ServeOptions, replica_id: str,
               url: str) -> tuple[EventLog, ReplicaCoordinator | None]:
    """A local event log, or on PostgreSQL the shared one and this replica's coordinator (the
    daemon's coordination then: `ReplicaCoordination`; else `LocalCoordination`)."""
    if not is_postgres(options.store):
        return EventLog(options.stream_buffer, buffer_bytes=options.stream_buffer_bytes), None
    from murmurd.a2a.stores.postgres import PostgresTaskStore

    assert isinstance(store, PostgresTaskStore)
    log = SharedEventLog(store.pool, options.stream_buffer, buffer_bytes=options.stream_buffer_bytes)
    return log, ReplicaCoordinator(store.pool, store.dsn, replica_id, log, lease_secs=options.replica_lease_secs,
                                   idle_secs=options.session_idle_secs, url=url)


async def serve_capsule(
    capsule_dir: Path,
    options: ServeOptions,
    *,
    component_host: ComponentHost,
    announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    progress: Callable[[str], None] | None = None,
    blocking: Executor | None = None,
) -> int:
    """Serve the capsule until it stops; `blocking`: the executor of short blocking work (the
    loop's default), on whose thread a SQLite store then runs too."""
    options.stream_caps  # inconsistent limits are refused before anything is locked or staged
    if options.public_url is not None:
        check_public_url(options.public_url)  # BadPublicUrl names what is wrong, before any work
    check_serve(options.host, options.auth, options.tls, insecure=options.insecure)
    if options.tls is not None:
        try:
            options.tls.server_context()  # unreadable or mismatched files: refused before staging
        except (OSError, ssl.SSLError) as exc:
            raise UnsafeServe(f"cannot use --tls-cert {options.tls.cert} / --tls-key {options.tls.key}"
                              f"{' / --tls-client-ca ' + str(options.tls.client_ca) if options.tls.client_ca else ''}: {exc}") from None
    # The state directory first: a second daemon on it must fail before staging does any work.
    lock = StateDirLock.acquire(options.state_dir or Path(capsule_dir) / STATE_DIR_NAME)
    try:
        return await _serve_locked(capsule_dir, options, lock, component_host, announce, progress, blocking)
    finally:
        lock.release()


async def _serve_locked(
    capsule_dir: Path,
    options: ServeOptions,
    lock: StateDirLock,
    component_host: ComponentHost,
    announce: Callable[[str], None],
    progress: Callable[[str], None] | None,
    blocking: Executor | None,
) -> int:
    start_workers(component_host, wasm_processes(options.wasm_processes))  # spawned now, ready by the first call
    staged = await asyncio.to_thread(stage_capsule, capsule_dir, host=component_host, progress=progress,
                                     env=os.environ if options.env is None else options.env)
    replica_id = new_replica_id()
    store = await open_store(options.store, lock.state_dir, options.retention, replica_id, executor=blocking)
    internal = staged.manifest.internal_port
    try:
        sock = bind_socket(options.host, internal if internal is not None else (options.port or 0))
    except PortTaken:
        await store.close()
        raise
    port = sock.getsockname()[1]
    staged.capsule_url = capsule_url_for(port)  # MURMUR_CAPSULE_URL, and MURMUR.md's identity
    await asyncio.to_thread(staged.write_inventory)
    policy = LifecyclePolicy.from_manifest(
        staged.manifest, task_acceptance=options.task_acceptance, after_task=options.after_task,
        max_concurrent_tasks=options.max_concurrent_tasks, session_idle_secs=options.session_idle_secs,
        serving=True,
    )
    component_host.pool.ensure_workers(policy.bound + POOL_HEADROOM)
    auth = CurrentAuth(options.auth)
    url = f"{'https' if options.tls is not None else 'http'}://{options.host}:{port}/"
    log, replicas = _event_log(store, options, replica_id, url)
    card_url = check_public_url(options.public_url) if options.public_url is not None else url
    coordination: Coordination = ReplicaCoordination(replicas) if replicas is not None else LocalCoordination()
    daemon = CapsuleDaemon(staged, component_host, store, policy=policy, log=log, coordination=coordination,
                           peer_tokens=auth, max_open_contexts=options.max_open_contexts,
                           session_index=lock.state_dir / CONTEXT_SESSIONS,
                           keep_context_sessions=options.keep_context_sessions,
                           files=FileProcess(functools.partial(template_for, staged)))
    lock.record_holder(url=url, session=staged.session_id)
    max_streams, max_streams_per_client = options.stream_caps
    ticket_key = await shared_ticket_key(replicas.pool, KEY_BYTES) if replicas is not None else None
    app = create_app(daemon, ServerConfig(url=card_url, max_body_bytes=options.max_body_bytes, max_batch=options.max_batch,
                                          max_response_bytes=options.max_response_bytes, max_streams=max_streams,
                                          max_streams_per_client=max_streams_per_client, auth=auth,
                                          mtls=options.tls is not None and options.tls.client_ca is not None,
                                          cors_origins=cors_origins(staged.manifest.network.cors_origins,
                                                                    options.cors_origins),
                                          stream_ticket_ttl=options.stream_ticket_ttl, ticket_key=ticket_key,
                                          loopback_bind=is_loopback(options.host)))
    limits = options.connection_limits
    # log_config=None: uvicorn's records go through murmurd's handler (murmurd.logsetup)
    server = _Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, log_config=None,
                                    http=protocol_class(limits), timeout_keep_alive=limits.keep_alive_secs,  # type: ignore[arg-type]
                                    **_tls_config(options.tls)))

    if options.max_concurrent_tasks is not None and policy.task_acceptance != "queue":
        logger.warning("--max-concurrent-tasks applies to task_acceptance: queue; "
                       "this capsule (%s) runs one task at a time", policy.task_acceptance)
    interrupted = await daemon.start(options.task)
    if interrupted:
        logger.warning("%d task(s) left running by a previous daemon are now failed", len(interrupted),
                       extra={"task_ids": interrupted})
    if replicas is not None:
        announce(f"murmur: replica {replica_id} on a shared PostgreSQL store")  # a banner line: scripts read it
    logger.info("serving %s %s: %s", staged.manifest.name, staged.manifest.version, policy.describe(),
                extra={"task_acceptance": policy.task_acceptance, "after_task": policy.after_task})
    announce(f"murmur: url {options.host}:{port}")
    announce(f"murmur: console {url}console/")
    if options.freeze_heap:  # the daemon built, just before it serves: the process is the daemon's alone
        frozen = freeze_startup_objects()
        daemon.metrics.gc_frozen.set(frozen)
        logger.info("start-up heap frozen: %d objects", frozen)
    announce(f"session: {staged.session_id}")
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled.set)
    reloads: set[asyncio.Task[bool]] = set()
    if options.load_auth is not None:
        load = options.load_auth

        def reload() -> None:
            task = asyncio.create_task(reload_credentials(
                auth, load, lambda config: check_serve(options.host, config, options.tls, insecure=options.insecure),
                _reload_line))
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        loop.add_signal_handler(signal.SIGHUP, reload)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    pruning = asyncio.create_task(prune_periodically(store, options.retention, options.prune_interval_secs))
    try:
        waiters = {asyncio.create_task(daemon.stopped.wait()), asyncio.create_task(signalled.wait()), serving}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters - {serving}:
            waiter.cancel()
        if signalled.is_set():
            logger.info("shutting down: a signal asked for it")
        elif daemon.stop_reason is not None:
            logger.info("shutting down: %s", daemon.stop_reason)
        if not signalled.is_set():
            await asyncio.sleep(options.linger_seconds)
        pruning.cancel()  # before the store closes
        # The store outlives the HTTP server: every request of the linger and shutdown window
        # (a GetTask for the answer just published) is answered, never "task store is closed".
        await daemon.stop(options.grace_seconds, close_store=False)
        summary = daemon.stop_summary
        logger.info("stopped: %d running task(s) drained, %d canceled after the %g s grace, %d queued canceled",
                    summary.get("drained", 0), summary.get("canceled_running", 0), options.grace_seconds,
                    summary.get("canceled_queued", 0), extra=summary)
    finally:
        pruning.cancel()
        # Backstop: a shell the cancel did not reach must not keep the process waiting on it.
        shell_watchdog.kill_running()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        server.should_exit = True
        daemon.log.close_subscribers()  # open streams end, so the server is not kept waiting
        with contextlib.suppress(Exception):
            await serving
        sock.close()
        await store.close()
    if daemon.crashed is not None:
        logger.error("the daemon stopped after an internal failure: %r", daemon.crashed)
        return 1
    return 0


def _reload_line(line: str) -> None:
    """A credential reload's outcome: a warning when the old credentials stay in force."""
    logger.log(logging.WARNING if "not reloaded" in line else logging.INFO, line)
