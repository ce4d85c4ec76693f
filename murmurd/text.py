"""Text that is valid Unicode, for everything a model or a guest hands the runtime.

JSON can spell a lone UTF-16 surrogate (`"\\ud83d"`: half of an emoji pair, as a model cut
mid-character produces and a Python driver relays escaped), and `json.loads` turns it into a
Python string that no UTF-8 file, database row or HTTP body can hold. The runtime makes such
text valid once, where guest output enters the session (`valid_json_value`), replacing each lone
surrogate with U+FFFD as a decoder would; and it serialises what it stores or streams with
`json_text`, which escapes (`\\ud83d`, round-tripping exactly) whenever the text is not valid, so
a record or a frame can always be written.
"""

from __future__ import annotations

import json
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins valid pairs, so any left is alone
REPLACEMENT = "\ufffd"


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (unchanged, same object, when valid)."""
    return _LONE_SURROGATE.sub(REPLACEMENT, text) if _LONE_SURROGATE.search(text) else text


def valid_json_value(value: Any) -> Any:
    """A parsed JSON value whose strings (member names included) are all valid Unicode."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [valid_json_value(item) for item in value]
    if isinstance(value, dict):
        return {valid_text(key): valid_json_value(item) for key, item in value.items()}
    return value


def json_text(value: Any) -> str:
    """Compact JSON that always encodes as UTF-8: characters as they are, escaped only when the
    value holds text that is not valid Unicode (escapes decode back to the same string)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text
