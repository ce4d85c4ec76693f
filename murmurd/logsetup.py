"""The daemon's log: the standard `logging` module, on stderr, as text or JSON lines.

`--log-format text` (the default) writes one line per record: UTC time, level, logger, the
message, then the record's structured fields as `key=value` (values with spaces quoted).
`--log-format json` writes one JSON object per line through python-json-logger, for log
shippers: `time`, `level`, `logger`, `message` and the same fields as members. A text line's
message has its control characters escaped (`\n`, `\x1b`): a text a peer chose (a task id) can
neither start a line of its own nor drive a terminal. Lines are written by a thread of their
own (`log_writer.py`), which also takes over `sys.stderr`: the event loop never waits on stderr.

The start-up banner (`murmur: url HOST:PORT`, the console's URL, the session) is not a log
record: it is printed as plain lines in either format, so scripts reading it never change
(through the same writer, in order with the log).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

from murmurd.log_writer import BackgroundStreamHandler, QueuedStderr

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
_HANDLER_NAME = "murmurd-stderr"

# The attributes every LogRecord has: anything else on a record came in `extra=` (a field).
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a call passed in `extra=`, in the order given."""
    return {key: value for key, value in vars(record).items() if key not in _STANDARD and not key.startswith("_")}


_QUOTED = re.compile(r'[\s"=]')  # a value with any of these is written as a JSON string (`\s`: str.isspace)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if text == "" or _QUOTED.search(text) is not None:
        return json.dumps(text, ensure_ascii=False)
    return text


_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # C0 but the tab, and DEL (a newline, a terminal's escape)


def _escaped(match: re.Match[str]) -> str:
    return {"\n": "\\n", "\r": "\\r"}.get(match.group(), f"\\x{ord(match.group()):02x}")


class TextFormatter(logging.Formatter):
    """`2026-01-02T03:04:05.678Z INFO murmurd.tasks: task finished id=tsk_... state=completed`."""

    converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + f".{int(record.msecs):03d}Z"
        message = _CONTROLS.sub(_escaped, record.getMessage())  # one record, one line: no forged ones
        line = f"{stamp} {record.levelname} {record.name}: {message}"
        fields = record_fields(record)
        if fields:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:  # rendered where it was raised (`log_writer`)
            line += "\n" + record.exc_text
        return line


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "{asctime}{levelname}{name}{message}", style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%SZ", json_ensure_ascii=False,
    )


def configure(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Send murmurd's records (and uvicorn's warnings) to `stream` (stderr) in `fmt`. Called
    once by the CLI; calling it again replaces the handler rather than adding a second one."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: want one of {', '.join(LOG_FORMATS)}")
    if isinstance(sys.stderr, QueuedStderr):  # configured before: the real stderr back first
        sys.stderr = sys.stderr.original
    handler = BackgroundStreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    formatter = json_formatter() if fmt == "json" else TextFormatter()
    if fmt == "json":
        formatter.converter = time.gmtime  # type: ignore[attr-defined]
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()  # its queued lines written first
    root.addHandler(handler)
    if stream is None:  # what is printed to stderr goes through the same writer, whole lines in order
        sys.stderr = QueuedStderr(handler, sys.stderr)
    logging.getLogger("murmurd").setLevel(level.upper())
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)  # other libraries: their warnings and errors only
    for name in ("uvicorn", "uvicorn.error"):  # uvicorn's own lines through the same handler
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
