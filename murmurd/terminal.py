"""Text a reader prints from a file or stream a component could have written, made inert.

One rule for every reader (`trace`, `eval`, `watch`, `send`, `run`'s streamed answer on a
terminal): C0 and C1 controls, DEL, the line and paragraph separators, the bidi embeddings,
overrides and isolates, and lone surrogates are shown as `\\xNN` / `\\uNNNN` escapes, so no string
can move the cursor, retitle the window, write the clipboard (OSC 52), clear the screen or
reorder what follows it. `safe` is for one-line cells; `safe_text` keeps newlines and tabs (a
streamed answer's layout). `json_text` is JSON for a terminal: the same characters as JSON `\\u`
escapes, so `--json` output decodes to the very same strings.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

_INERT = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INERT}]")
_CONTROL_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INERT}]")
_JSON_RAW = re.compile(f"[\x7f-\x9f{_INERT}]")  # json.dumps already escapes C0 inside strings


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code > 0xFF else f"\\x{code:02x}"


def safe(value: object) -> str:
    """`value` as one line of text with every control and bidi-override character escaped."""
    return _CONTROL.sub(_escape, value if isinstance(value, str) else str(value))


def safe_text(value: object) -> str:
    """As `safe`, but newlines and tabs pass (a streamed answer keeps its lines)."""
    return _CONTROL_KEEP_LINES.sub(_escape, value if isinstance(value, str) else str(value))


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """JSON with non-ASCII text as it is, except the characters above, written as `\\uNNNN`."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def terminal_text(stream: TextIO, text: str) -> str:
    """`text` for `stream`: as it is for a pipe or a file (the answer's exact text), `safe_text`
    on a terminal (`murmurd run`'s streamed answer)."""
    isatty = getattr(stream, "isatty", None)
    return safe_text(text) if isatty is not None and isatty() else text
