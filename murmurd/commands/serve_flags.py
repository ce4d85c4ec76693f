"""`murmurd serve`'s flags, in the groups `serve --help` shows them: listening, callers,
lifecycle, limits, storage, replicas, logging. A new flag goes into the group it belongs to; every flag
carries help text (tests/test_cli_edges.py checks both)."""

from __future__ import annotations

import argparse

from murmurd.commands.argtypes import (capsule_dir, non_negative_float, non_negative_int, positive_float,
                                       positive_int, ticket_ttl)

GROUPS = ("listening", "callers", "lifecycle", "limits", "storage", "replicas", "logging")
_DESCRIPTIONS = {
    "listening": "where the daemon listens and what it advertises",
    "callers": "who may call: credentials, TLS, browser origins (docs/security.md)",
    "lifecycle": "which tasks run, when, and what happens after them",
    "limits": "per-connection, per-request and per-stream bounds of the HTTP edge",
    "storage": "the task store and how long finished tasks are kept",
    "replicas": "several daemons sharing one PostgreSQL store (deploy/README.md)",
    "logging": "what the daemon logs and how (one line per task, refusal, reload and shutdown)",
}


def serve_groups(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """One argument group per name of GROUPS, in that order, on `parser`."""
    return {name: parser.add_argument_group(name, _DESCRIPTIONS[name]) for name in GROUPS}


def add_serve_arguments(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """Every `serve` flag, each in its group; returns the groups (a caller may add to them)."""
    parser.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir,
                        help="the capsule's directory, or its murmur.yaml")
    parser.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    parser.add_argument("--containment", choices=["advisory", "scoped", "sealed"],
                        help="a containment floor (can only raise the manifest's); refused when murmurd cannot meet it")
    groups = serve_groups(parser)
    _listening(groups["listening"])
    _callers(groups["callers"])
    _lifecycle(groups["lifecycle"])
    _limits(groups["limits"])
    _storage(groups["storage"])
    _replicas(groups["replicas"])
    _logging(groups["logging"])
    return groups


def _listening(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1; anything but loopback needs a credential "
                            "or --insecure)")
    group.add_argument("--port", type=int, help="port (network.internal_port wins; default OS-assigned)")
    group.add_argument("--public-url", help="the address the agent card advertises, for callers behind a proxy, "
                                            "load balancer or Service (default: the bound http(s)://host:port/)")


def _callers(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--credentials",
                       help="credentials file (YAML; docs/security.md); default $MURMUR_CREDENTIALS_FILE")
    group.add_argument("--token-file", help="a file holding one operator bearer token "
                                            "(default $MURMUR_TOKEN_FILE, or the token in $MURMUR_TOKEN)")
    group.add_argument("--tls-cert", help="serve HTTPS with this certificate chain (PEM)")
    group.add_argument("--tls-key", help="the private key of --tls-cert (PEM)")
    group.add_argument("--tls-client-ca", help="verify client certificates against this CA (mutual TLS)")
    group.add_argument("--insecure", action="store_true",
                       help="allow a non-loopback --host with no credential configured "
                            "(anyone reaching it is the operator)")
    group.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN", dest="cors_origins",
                       help="a browser origin (scheme://host[:port]) allowed to call the daemon; repeatable; "
                            "adds to the manifest's network.cors_origins (default: none)")
    group.add_argument("--stream-ticket-ttl", type=ticket_ttl, default=60.0, metavar="SECONDS",
                       help="how long a browser's stream ticket (POST /auth/stream-ticket) opens its GET stream "
                            "(default 60; at most 3600)")


def _lifecycle(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--task", help="a launch task (text, or a file holding it) run before any A2A message")
    group.add_argument("--task-acceptance", "--lifecycle-task-acceptance", dest="task_acceptance",
                       choices=["none", "single", "queue"],
                       help="which A2A tasks are accepted: none (only --task runs), single (one at a time, "
                            "others rejected) or queue (queued and run in order per context); "
                            "overrides lifecycle.task_acceptance")
    group.add_argument("--after-task", "--lifecycle-after-task", dest="after_task", choices=["exit", "sleep"],
                       help="after a task ends: exit (the daemon stops) or sleep (it keeps serving); "
                            "overrides lifecycle.after_task")
    group.add_argument("--max-concurrent-tasks", type=positive_int,
                       help="tasks of different contexts running at once under `queue` "
                            "(overrides lifecycle.max_concurrent_tasks)")
    group.add_argument("--wasm-processes", type=non_negative_int, default=None, metavar="N",
                       help="worker processes that run tool and driver calls (default: one per two cores, "
                            "at least one; 0 runs them in the daemon's own process)")
    group.add_argument("--session-idle", type=positive_float, default=60.0,
                       help="seconds a context's session stays open after its last task (default 60)")
    group.add_argument("--grace", type=float, default=10.0,
                       help="seconds a running task may finish on shutdown (default 10)")


def _limits(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--max-body-bytes", type=int, default=1024 * 1024, help="JSON-RPC body cap (default 1 MiB)")
    group.add_argument("--max-batch", type=positive_int, default=100,
                       help="requests in one JSON-RPC batch (default 100)")
    group.add_argument("--max-response-bytes", type=positive_int, default=4 * 1024 * 1024,
                       help="bytes of a batch's answers; requests past it are answered with an error (default 4 MiB)")
    group.add_argument("--header-timeout", type=positive_float, default=10.0,
                       help="seconds a client may take to send a request's headers (default 10)")
    group.add_argument("--body-timeout", type=positive_float, default=30.0,
                       help="seconds a client may take to send a request body; streams are exempt (default 30)")
    group.add_argument("--write-timeout", type=positive_float, default=30.0,
                       help="seconds a client may leave a response unread before its connection is "
                            "closed, streams included (default 30)")
    group.add_argument("--keep-alive", type=positive_float, default=5.0,
                       help="seconds an idle keep-alive connection stays open (default 5)")
    group.add_argument("--max-connections", type=positive_int, default=256,
                       help="open connections; past it idle ones are closed, else 503 (default 256)")
    group.add_argument("--max-streams", type=non_negative_int,
                       help="open SSE streams, below --max-connections so ordinary requests keep room; "
                            "past it a stream is refused 503 (default half of --max-connections)")
    group.add_argument("--max-streams-per-client", type=positive_int,
                       help="open SSE streams from one client address (default half of --max-streams)")
    group.add_argument("--stream-buffer", type=int, default=1024,
                       help="SSE events kept for Last-Event-ID replay (default 1024)")
    group.add_argument("--stream-buffer-bytes", type=positive_int, default=16 * 1024 * 1024,
                       help="bytes of SSE frames kept for Last-Event-ID replay (default 16 MiB)")
    group.add_argument("--max-open-contexts", type=non_negative_int, default=64,
                       help="contexts one peer credential may hold open (an unfinished task in each); "
                            "0 = no limit (default 64)")
    group.add_argument("--keep-context-sessions", type=non_negative_int, default=256,
                       help="closed context session workdirs kept at most, the least recently closed removed "
                            "first (each also goes when its context's last task leaves the store; default 256)")


def _storage(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--state-dir", help="task store directory (default <capsule-dir>/.murmurd)")
    group.add_argument("--store", help="task store: sqlite (the state directory's file, the default) or "
                                       "postgresql://user@host/db, shared by replicas (env MURMURD_STORE)")
    group.add_argument("--retain-finished-secs", type=non_negative_float, default=7 * 24 * 3600.0,
                       help="keep finished tasks this long after their last change; 0 = forever (default 7 days)")
    group.add_argument("--retain-finished-count", type=non_negative_int, default=10_000,
                       help="keep at most this many finished tasks; 0 = no limit (default 10000)")


def _replicas(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--replica-lease", type=positive_float, default=15.0,
                       help="seconds without a heartbeat after which a replica counts as dead and its "
                            "running tasks fail (PostgreSQL store; default 15)")


def _logging(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--log-format", choices=["text", "json"], default="text",
                       help="log lines as text or as JSON lines for log shippers (default text)")
    group.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                       help="the least severe log lines written (default info)")
