"""Which paths are GET streams, and a task id taken from one (pure: the edge's middleware, the
ticket mint and the stream routes all ask it)."""

from __future__ import annotations

import re

from murmurd.a2a.wire.common import MAX_ID_CHARS

WATCH_PATH = "/stream"
# Any text but a control character, a slash, a backslash, a lone surrogate or U+FFFD (what
# invalid UTF-8 in the URL decodes to): no task id holds one, and a log line must not either.
_TASK_ID = re.compile(r"[^\x00-\x1f\x7f/\\\ud800-\udfff\ufffd]{1,%d}" % MAX_ID_CHARS)


class BadStreamRequest(ValueError):
    """The path or query of a GET stream is not something we serve; the message says what."""


def check_task_id(value: str) -> str:
    """The task id from the URL, or BadStreamRequest naming what is wrong with it."""
    if not value:
        raise BadStreamRequest("the task id is empty")
    if len(value) > MAX_ID_CHARS:
        raise BadStreamRequest(f"the task id is longer than {MAX_ID_CHARS} characters")
    if not _TASK_ID.fullmatch(value):
        raise BadStreamRequest("the task id holds a control character, a slash or invalid text")
    return value


def is_stream_path(path: str) -> bool:
    """Is `path` (decoded, as routed) one of the GET streams: `/stream` or `/tasks/{id}/stream`
    with a well-formed id? (The paths a stream ticket may be minted for and accepted on.)"""
    if path == WATCH_PATH:
        return True
    head, _, rest = path.partition("/tasks/")
    task_id, slash, tail = rest.rpartition("/")
    return head == "" and slash == "/" and tail == "stream" and _TASK_ID.fullmatch(task_id) is not None
