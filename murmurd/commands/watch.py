"""`murmurd watch URL`: a running daemon's live stream rendered on the terminal."""

from __future__ import annotations

import argparse

from murmurd.commands.common import eprint
from murmurd.commands.tasks import TOKEN_HELP, base_url, client_token


def add_watch(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    watch = commands.add_parser("watch", help="render a capsule's live stream (stream/watch)")
    watch.add_argument("url", help="the daemon's address (http://host:port/)")
    watch.add_argument("--token-file", help=TOKEN_HELP)
    watch.set_defaults(handler=cmd_watch)


def cmd_watch(args: argparse.Namespace) -> int:
    from murmurd.a2a.peers import client

    token = client_token(args, "watch")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    try:
        client.watch(base_url(args.url), lambda t: print(t, end="", flush=True), token=token)
    except client.ClientError as exc:
        eprint(f"murmurd watch: {exc}")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
