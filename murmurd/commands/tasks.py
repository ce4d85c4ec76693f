"""A running daemon's tasks from the terminal: `murmurd tasks URL [ID]`, `reply URL ID TEXT`,
`cancel URL ID`, and `send URL TEXT` (which waits for the answer and prints it)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from murmurd.commands import task_view
from murmurd.terminal import safe_text

TOKEN_HELP = "present the bearer token in this file (default $MURMUR_TOKEN_FILE or $MURMUR_TOKEN)"
STATES = ("submitted", "working", "input-required", "completed", "failed", "canceled", "rejected")


def _eprint(message: str) -> None:
    print(safe_text(message), file=sys.stderr, flush=True)


def _print(text: str) -> None:
    """Text a daemon sent (a task's words, a capsule's answer) on the terminal, its controls
    escaped (`murmurd.terminal`): a peer's task must not write the operator's clipboard."""
    print(safe_text(text), flush=True)


def base_url(url: str) -> str:
    return url if "://" in url else f"http://{url}"


def client_token(args: argparse.Namespace, command: str) -> str | None | bool:
    """The bearer token a client command presents (None: none); False after reporting a bad one
    (callers return 2 on False; `token_or_none` narrows what is left)."""
    import os

    from murmurd.a2a.http.auth.config import CredentialsError, client_token as read_token

    try:
        return read_token(Path(args.token_file) if args.token_file else None, os.environ)
    except CredentialsError as exc:
        _eprint(f"murmurd {command}: {exc}")
        return False


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def cmd_tasks(args: argparse.Namespace) -> int:
    from murmurd.a2a.peers import tasks_client
    from murmurd.a2a.peers.client import ClientError

    token = client_token(args, "tasks")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    url = base_url(args.url)
    try:
        if args.task_id:
            task = tasks_client.get_task(url, args.task_id, token)
            _print(json.dumps(task, indent=2) if args.json else "\n".join(task_view.detail_lines(task, _now(), args.url)))
            return 0
        tasks = tasks_client.list_tasks(url, token, state=args.state, context_id=args.context_id)
    except ClientError as exc:
        _eprint(f"murmurd tasks: {exc}")
        return 1
    if args.json:
        print(json.dumps(tasks, indent=2))
    elif not tasks:
        print("no tasks" + (f" in state {args.state}" if args.state else "") + f" on {args.url}")
    else:
        _print("\n".join(task_view.list_lines(tasks, _now())))
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    from murmurd.a2a.peers import tasks_client
    from murmurd.a2a.peers.client import ClientError

    token = client_token(args, "reply")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    url = base_url(args.url)
    try:
        task = tasks_client.get_task(url, args.task_id, token)
        state = task_view.state_of(task)
        if state != "input-required":
            _eprint(f"murmurd reply: task {args.task_id} is {state}, not waiting for input; nothing was sent")
            return 1
        tasks_client.reply(url, args.task_id, args.text, token)
    except ClientError as exc:
        _eprint(f"murmurd reply: {exc}")
        return 1
    print(f"replied to {args.task_id}; it goes on (follow it: murmurd tasks {args.url} {args.task_id})")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from murmurd.a2a.peers import tasks_client
    from murmurd.a2a.peers.client import ClientError

    token = client_token(args, "cancel")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    try:
        tasks_client.cancel(base_url(args.url), args.task_id, token)
    except ClientError as exc:
        _eprint(f"murmurd cancel: {exc}")
        return 1
    print(f"canceled {args.task_id}")
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    """Default: wait for the task and print its answer (or the question it asks). `--stream`:
    everything live. `--json`: the accepted task's JSON at once, without waiting."""
    from murmurd.a2a.peers import client, tasks_client

    url = base_url(args.url)
    token = client_token(args, "send")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    try:
        if args.json:
            print(json.dumps(client.send(url, args.text, context_id=args.context_id, task_id=args.task_id,
                                         token=token), indent=2))
            return 0
        if args.stream:
            final = client.stream(url, args.text, lambda t: print(t, end="", flush=True),
                                  context_id=args.context_id, task_id=args.task_id, token=token)
            return 0 if final in ("completed", "input-required") else 1
        for frame in tasks_client.message_frames(url, args.text, token, context_id=args.context_id,
                                                 task_id=args.task_id):
            status = frame.data.get("status") or {}
            if frame.state == "completed":
                _print(str(status.get("response") or status.get("message") or ""))
                return 0
            if frame.state == "input-required":
                _print(f"{frame.data.get('id')} asks: {status.get('message', '')}")
                _eprint(f"answer it: murmurd reply {args.url} {frame.data.get('id')} TEXT")
                return 0
            if frame.state in ("failed", "canceled", "rejected"):
                message = str(status.get("message") or "").removeprefix(f"{frame.state}: ")
                _eprint(f"murmurd send: task {frame.data.get('id')} {frame.state}" + (f": {message}" if message else ""))
                return 1
    except client.ClientError as exc:
        _eprint(f"murmurd send: {exc}")
        return 1
    _eprint("murmurd send: the stream ended before the task did")
    return 1


def add_task_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    send = commands.add_parser("send", help="send a task (or a reply) to a served capsule and print the answer")
    send.add_argument("url", help="the daemon's address (http://host:port/)")
    send.add_argument("text", help="the message text")
    send.add_argument("--context-id", help="continue this conversation (context)")
    send.add_argument("--task-id", help="reply to this task (input-required)")
    send.add_argument("--stream", action="store_true", help="stream chunks, tool results and states live (message/stream)")
    send.add_argument("--json", action="store_true", help="print the accepted task as JSON at once, without waiting")
    send.add_argument("--token-file", help=TOKEN_HELP)
    send.set_defaults(handler=cmd_send)

    tasks = commands.add_parser("tasks", help="list a daemon's tasks, or show one (messages, answer, question)")
    tasks.add_argument("url", help="the daemon's address (http://host:port/)")
    tasks.add_argument("task_id", metavar="task-id", nargs="?", help="show this task in full")
    tasks.add_argument("--state", choices=STATES, help="only tasks in this state")
    tasks.add_argument("--context-id", help="only tasks of this conversation (context)")
    tasks.add_argument("--json", action="store_true", help="the A2A task JSON")
    tasks.add_argument("--token-file", help=TOKEN_HELP)
    tasks.set_defaults(handler=cmd_tasks)

    reply = commands.add_parser("reply", help="answer a task waiting in input-required")
    reply.add_argument("url", help="the daemon's address (http://host:port/)")
    reply.add_argument("task_id", metavar="task-id", help="the waiting task")
    reply.add_argument("text", help="the answer")
    reply.add_argument("--token-file", help=TOKEN_HELP)
    reply.set_defaults(handler=cmd_reply)

    cancel = commands.add_parser("cancel", help="cancel a submitted, working or waiting task")
    cancel.add_argument("url", help="the daemon's address (http://host:port/)")
    cancel.add_argument("task_id", metavar="task-id", help="the task to cancel")
    cancel.add_argument("--token-file", help=TOKEN_HELP)
    cancel.set_defaults(handler=cmd_cancel)
