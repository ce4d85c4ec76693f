"""`murmurd chat URL`: a threaded conversation with a served capsule in the terminal.

Each line you type is a message in one A2A context (the conversation), so the capsule sees the
whole thread. The answer streams in as it is written; every tool result shows as a `⚙ tool`
line when it happens; a task that asks (`input-required`) prompts for the reply inline and
goes on on the same stream. Ctrl-C cancels the task in flight (never the program); at the
prompt it only clears the line; Ctrl-D or `/quit` leaves. Lines are kept in a readline
history (`$XDG_STATE_HOME/murmurd/chat_history`, else `~/.local/state/murmurd/`).

The stream is read on a thread into a queue so the main thread stays free to prompt and to
take the Ctrl-C: the reply to a question goes out as `message/send` while the task's stream,
which upstream keeps open through `input-required`, carries on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from murmurd.commands.tasks import TOKEN_HELP, base_url, client_token
from murmurd.terminal import safe_text

END = object()  # the stream closed
TERMINAL = ("completed", "failed", "canceled", "rejected")
TOOL_SHOWN = 200
CANCEL_WAIT_SECONDS = 30.0
HELP = "type a message; /new starts a new conversation, /quit (or Ctrl-D) leaves; Ctrl-C cancels a running task"


def history_file(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local" / "state")
    return Path(state) / "murmurd" / "chat_history"


def _readline_history() -> None:
    try:
        import readline
    except ImportError:  # no readline on this platform: plain input() still works
        return
    import atexit

    path = history_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            readline.read_history_file(path)
    except OSError:
        return
    readline.set_history_length(1000)
    atexit.register(lambda: _save_history(readline, path))


def _save_history(readline: Any, path: Path) -> None:
    try:
        readline.write_history_file(path)
    except OSError:
        pass


class _CtrlC:
    """Ctrl-C while a task is followed: noted by a handler and acted on between frames, never
    raised inside the frame queue's `get` (an exception raised there can leave the queue's lock
    held, and the cancel's own wait for the stream's end then never returns); raised only around
    a prompt (`raising`), which nothing else ends."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        self._previous = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _note(self, _signum: int, _frame: Any) -> None:
        self.pressed.set()

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, self._note)


class Conversation:
    def __init__(self, url: str, shown_url: str, token: str | None) -> None:
        self.url, self.shown_url, self.token = url, shown_url, token
        self.context_id: str | None = None

    def out(self, text: str) -> None:  # the capsule's words: their terminal controls escaped
        sys.stdout.write(safe_text(text))
        sys.stdout.flush()

    def turn(self, text: str) -> None:
        """Send one message and follow its task to the end (answering its questions)."""
        from murmurd.a2a.peers import tasks_client
        from murmurd.a2a.peers.client import ClientError

        frames: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for frame in tasks_client.message_frames(self.url, text, self.token, context_id=self.context_id):
                    frames.put(frame)
            except ClientError as exc:
                frames.put(exc)
            finally:
                frames.put(END)

        # Ctrl-C is the main thread's alone: the kernel may hand a process's signal to any thread
        # not blocking it, and one handed to the stream's thread does not wake the main thread's
        # wait at a prompt, which then sat until the next key. The thread inherits the mask.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            threading.Thread(target=read, name="chat stream", daemon=True).start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        with _CtrlC() as ctrl_c:
            self._follow(frames, ctrl_c)

    def _follow(self, frames: queue.Queue[Any], ctrl_c: _CtrlC) -> None:
        from murmurd.a2a.peers.client import ClientError

        task_id: str | None = None
        at_line_start = True
        while True:
            if ctrl_c.pressed.is_set():
                self._cancel(task_id, frames)
                return
            try:
                item = frames.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is END:
                if not at_line_start:
                    self.out("\n")
                return
            if isinstance(item, ClientError):
                self.out(f"{'' if at_line_start else chr(10)}error: {item}\n")
                at_line_start = True
                continue
            task_id = item.data.get("id") or task_id
            if item.kind == "status" and self.context_id is None:
                self.context_id = item.data.get("context_id") or self.context_id
            if item.kind == "text":
                chunk = item.data.get("text", "")
                if chunk:
                    self.out(chunk)
                    at_line_start = chunk.endswith("\n")
                continue
            if item.kind == "artifact":
                artifact = item.data.get("artifact") or {}
                content = artifact.get("content")
                shown = content if isinstance(content, str) else repr(content)
                shown = " ".join(shown.split())
                if len(shown) > TOOL_SHOWN:
                    shown = shown[: TOOL_SHOWN - 1] + "…"
                self.out(f"{'' if at_line_start else chr(10)}⚙ {artifact.get('tool_name')}: {shown}\n")
                at_line_start = True
                continue
            if item.kind != "status":
                continue
            state, status = item.state, item.data.get("status") or {}
            if state == "input-required":
                if not at_line_start:
                    self.out("\n")
                at_line_start = True
                if not self._answer(str(status.get("message") or ""), task_id, frames, ctrl_c):
                    return
            elif state in ("failed", "canceled", "rejected"):
                message = str(status.get("message") or "").removeprefix(f"{state}: ")
                self.out(f"{'' if at_line_start else chr(10)}[{state}{': ' + message if message else ''}]\n")
                at_line_start = True

    def _answer(self, question: str, task_id: str | None, frames: queue.Queue[Any], ctrl_c: _CtrlC) -> bool:
        """Prompt for the reply to `question`; False when Ctrl-C canceled the task instead."""
        from murmurd.a2a.peers import tasks_client
        from murmurd.a2a.peers.client import ClientError

        self.out(f"? {question}\n")
        while True:
            try:
                with ctrl_c.raising():  # a prompt is left only by an exception
                    answer = input("reply> ")
            except KeyboardInterrupt:
                self._cancel(task_id, frames)
                return False
            except EOFError:
                self.out("\n(left the task waiting: murmurd reply "
                         f"{self.shown_url} {task_id} TEXT answers it)\n")
                return False
            if answer.strip():
                break
        try:
            tasks_client.reply(self.url, str(task_id), answer, self.token)
        except ClientError as exc:
            self.out(f"error: {exc}\n")
            return False
        return True

    def _cancel(self, task_id: str | None, frames: queue.Queue[Any]) -> None:
        """Ctrl-C: cancel the task in flight and wait (bounded) for its stream to say so."""
        from murmurd.a2a.peers import tasks_client
        from murmurd.a2a.peers.client import ClientError

        if task_id is None:
            self.out("\n[not started yet; nothing to cancel]\n")
            return
        try:
            tasks_client.cancel(self.url, task_id, self.token)
        except ClientError as exc:
            self.out(f"\nerror: cancel {task_id}: {exc}\n")
            return
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS  # in all: a stream still sending does not hold it
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = frames.get(timeout=left)
            except queue.Empty:
                break
            if item is END or (getattr(item, "kind", None) == "status" and item.state in TERMINAL):
                break
        self.out(f"\n[canceled {task_id}]\n")


def _take_ctrl_c() -> None:
    """Ctrl-C is chat's own from the start. A process started with SIGINT ignored (a shell's
    `cmd &` without job control, `nohup`, a test runner started so) passes that on, and Python
    then leaves SIGINT ignored: the prompt took no Ctrl-C while a task took it (its handler is
    set explicitly), and after a task the ignored state came back. Chat never ends on Ctrl-C,
    so taking it cannot end a program its starter meant to keep running."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def cmd_chat(args: argparse.Namespace) -> int:
    token = client_token(args, "chat")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    conversation = Conversation(base_url(args.url), args.url, token)
    conversation.context_id = args.context_id
    _take_ctrl_c()
    _readline_history()
    print(f"chatting with {args.url} ({HELP})", flush=True)
    while True:
        try:
            line = input("you> ")
        except KeyboardInterrupt:
            print("\n(Ctrl-D or /quit to leave)", flush=True)
            continue
        except EOFError:
            print(flush=True)
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return 0
        if text == "/new":
            conversation.context_id = None
            print("(a new conversation)", flush=True)
            continue
        if text == "/help":
            print(HELP, flush=True)
            continue
        conversation.turn(text)


def add_chat(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    chat = commands.add_parser("chat", help="a threaded conversation with a served capsule (streams, asks inline)")
    chat.add_argument("url", help="the daemon's address (http://host:port/)")
    chat.add_argument("--context-id", help="continue this conversation (context) instead of starting one")
    chat.add_argument("--token-file", help=TOKEN_HELP)
    chat.set_defaults(handler=cmd_chat)
