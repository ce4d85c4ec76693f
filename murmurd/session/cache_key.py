"""The `prompt_cache_key` routing hint every driver request carries (seed: "Prompt cache routing hint").

`<name>:<version>:<context-id>`, or `<name>:<version>` for a task with no context id. A value
longer than 64 characters (the most the OpenAI Chat and Responses APIs accept) is shortened to
its first 47 characters, `:`, and the first 16 hex digits of the SHA-256 of the full value:
64 characters that still open with the capsule's name and still differ per context id.
The key depends on nothing else, so it is fixed for every turn of a task, across compaction
and a dropped continuation.
"""

from __future__ import annotations

import hashlib

MAX_KEY_CHARS = 64
_PREFIX_CHARS = 47
_DIGEST_CHARS = 16


def prompt_cache_key(capsule_name: str, capsule_version: str, context_id: str | None) -> str:
    """The cache key for a task; an empty `context_id` counts as none."""
    full = f"{capsule_name}:{capsule_version}"
    if context_id:
        full = f"{full}:{context_id}"
    if len(full) <= MAX_KEY_CHARS:
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    return f"{full[:_PREFIX_CHARS]}:{digest}"
