"""`murmurd serve`: its parser (the flags are serve_flags.py's), the credentials and TLS files it
serves with, the limits that depend on each other, and the launch."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from murmurd.commands.common import eprint, run_env, task_text
from murmurd.commands.scope import containment_check
from murmurd.commands.serve_flags import add_serve_arguments

if TYPE_CHECKING:
    from murmurd.a2a.http.auth.config import AuthConfig
    from murmurd.a2a.http.auth.tls import TlsFiles

SERVE_DESCRIPTION = (
    "Serve a capsule as an A2A agent until it is stopped. Lifecycle: a manifest that sets neither "
    "lifecycle.task_acceptance nor lifecycle.after_task (and no --task-acceptance/--after-task) is served "
    "as task_acceptance: queue + after_task: sleep, so it stays up and the idle rule's empty task never "
    "runs. Setting either one, in murmur.yaml or by flag, gets upstream's lifecycle exactly (the other "
    "field takes upstream's default: single, exit): a single/exit capsule exits after its first task, "
    "and the log says why. `murmurd run` always keeps upstream's defaults."
)


def add_serve(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = commands.add_parser("serve", help="serve a capsule as an A2A agent", description=SERVE_DESCRIPTION)
    add_serve_arguments(serve)
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import os

    import uvloop

    from murmurd.a2a.http.auth.binding import UnsafeServe
    from murmurd.a2a.serve import PortTaken, ServeOptions, serve_capsule
    from murmurd.a2a.core.state_dir import StateDirError
    from murmurd.a2a.stores.base import TaskStoreError
    from murmurd.lane import Lane
    from murmurd.host import ComponentHost
    from murmurd.staging.stage import StagingError
    from murmurd.trace.writer import TraceWriteError

    from murmurd import logsetup

    logsetup.configure(args.log_format, args.log_level)
    env = run_env(args, "serve")
    if env is None:
        return 1
    refused = containment_check(args, env, "serve")
    if refused is not None:
        return refused
    security = _serve_security(args)
    if security is None:
        return 2
    auth, tls, load_auth = security
    options = ServeOptions(
        env=env, host=args.host, port=args.port, state_dir=Path(args.state_dir) if args.state_dir else None,
        store=args.store or os.environ.get("MURMURD_STORE") or None, replica_lease_secs=args.replica_lease,
        task_acceptance=args.task_acceptance, after_task=args.after_task, grace_seconds=args.grace,
        max_concurrent_tasks=args.max_concurrent_tasks, session_idle_secs=args.session_idle,
        wasm_processes=args.wasm_processes,
        task=task_text(args.task) if args.task is not None else None,
        max_body_bytes=args.max_body_bytes, stream_buffer=args.stream_buffer,
        stream_buffer_bytes=args.stream_buffer_bytes, max_batch=args.max_batch,
        header_timeout_secs=args.header_timeout, body_timeout_secs=args.body_timeout,
        keep_alive_secs=args.keep_alive, max_connections=args.max_connections,
        max_streams=args.max_streams, max_streams_per_client=args.max_streams_per_client,
        max_response_bytes=args.max_response_bytes, write_timeout_secs=args.write_timeout,
        retain_finished_secs=args.retain_finished_secs or None, retain_finished_count=args.retain_finished_count or None,
        auth=auth, load_auth=load_auth, tls=tls, insecure=args.insecure,
        cors_origins=tuple(args.cors_origins), public_url=args.public_url,
        stream_ticket_ttl=args.stream_ticket_ttl,
        max_open_contexts=args.max_open_contexts or None, keep_context_sessions=args.keep_context_sessions,
        freeze_heap=True,
    )
    host = ComponentHost()
    try:
        # uvloop: libuv's loop (a cross-thread wake-up is one coalesced eventfd write, sockets
        # without Python's selector layer); `docs/decisions.md`, "Issue 29: uvloop, pooled ids, ...".
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            # the loop's executor: one thread for short blocking work, the SQLite store's batches
            # first (`lane.py`; long waits have threads of their own, `session/own_thread.py`).
            # Every thread contending for the interpreter lock costs CPU per task: six (the
            # default) 5-15% more than two, two plus the store's own a tenth more than this one.
            blocking = Lane("murmurd-io")
            runner.get_loop().set_default_executor(blocking)
            return runner.run(serve_capsule(Path(args.capsule_dir), options, component_host=host, progress=eprint,
                                            blocking=blocking))
    except StagingError as exc:
        eprint(f"murmurd serve: cannot launch {args.capsule_dir}:\n{exc}")
        return 1
    except TraceWriteError as exc:
        eprint(f"murmurd serve: cannot open the session: {exc}")
        return 1
    except (PortTaken, StateDirError, TaskStoreError) as exc:
        eprint(f"murmurd serve: {exc}")
        return 1
    except UnsafeServe as exc:
        eprint(f"murmurd serve: {exc}")
        return 2
    finally:
        host.close()


def _serve_security(
        args: argparse.Namespace) -> tuple[AuthConfig, TlsFiles | None, Callable[[], AuthConfig]] | None:
    """(credentials, TLS files, how to read the credentials again) for `serve`, or None after
    reporting why they are unusable."""
    import os

    from murmurd.a2a.http.auth.config import CredentialsError, load_auth
    from murmurd.a2a.http.auth.tls import TlsFiles

    if (args.tls_cert is None) != (args.tls_key is None) or (args.tls_client_ca and args.tls_cert is None):
        eprint("murmurd serve: --tls-cert and --tls-key go together; --tls-client-ca needs both")
        return None
    tls = None if args.tls_cert is None else TlsFiles(
        Path(args.tls_cert), Path(args.tls_key), Path(args.tls_client_ca) if args.tls_client_ca else None)
    credentials = Path(args.credentials) if args.credentials else None
    token_file = Path(args.token_file) if args.token_file else None

    def load() -> AuthConfig:
        return load_auth(credentials, token_file, os.environ)

    try:
        auth = load()
    except CredentialsError as exc:
        eprint(f"murmurd serve: {exc}")
        return None
    return auth, tls, load


def check_serve_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Limits that depend on each other: streams must leave ordinary requests a connection."""
    if args.max_streams is not None and args.max_streams >= args.max_connections:
        parser.error(f"--max-streams {args.max_streams} must be below --max-connections {args.max_connections}, "
                     "so ordinary requests always have a connection")
    from murmurd.a2a.http.cors import BadOrigin, check_origin

    for origin in args.cors_origins:
        try:
            check_origin(origin)
        except BadOrigin as exc:
            parser.error(f"--cors-origin: {exc}")
    from murmurd.a2a.http.public_url import BadPublicUrl, check_public_url

    if args.public_url is not None:
        try:
            check_public_url(args.public_url)
        except BadPublicUrl as exc:
            parser.error(f"--public-url: {exc}")
