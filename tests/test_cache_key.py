"""Prompt cache routing hint: the seed's three rows, and the 64-character boundary."""

from __future__ import annotations

import hashlib

from murmurd.session.cache_key import prompt_cache_key


def _shortened(full: str) -> str:
    return full[:47] + ":" + hashlib.sha256(full.encode("utf-8")).hexdigest()[:16]


def test_with_a_context_id_that_fits() -> None:
    assert prompt_cache_key("hello", "0.1.0", "ctx_1") == "hello:0.1.0:ctx_1"


def test_without_a_context_id() -> None:
    assert prompt_cache_key("hello", "0.1.0", None) == "hello:0.1.0"
    assert prompt_cache_key("hello", "0.1.0", "") == "hello:0.1.0"


def test_a_value_past_64_characters_is_shortened() -> None:
    context_id = "ctx_" + "0123456789abcdef" * 2  # what the A2A server mints: 36 characters
    full = f"repository-code-reviewer:1.2.3:{context_id}"
    assert len(full) == 67
    key = prompt_cache_key("repository-code-reviewer", "1.2.3", context_id)
    assert key == _shortened(full)
    assert len(key) == 64
    assert key.startswith("repository-code-reviewer:1.2.3:ctx_")
    assert key[47] == ":" and all(c in "0123456789abcdef" for c in key[48:])
    # Pinned (computed once with sha256sum) so the algorithm cannot drift silently.
    assert key == "repository-code-reviewer:1.2.3:ctx_0123456789ab:d203115249649835"


def test_a_long_capsule_name_keeps_its_name_and_stays_unique_per_context() -> None:
    name = "an-unusually-long-capsule-name-for-a-repository-maintenance-agent"
    first = prompt_cache_key(name, "10.20.30", "ctx_" + "a" * 32)
    second = prompt_cache_key(name, "10.20.30", "ctx_" + "b" * 32)
    assert len(first) == len(second) == 64
    assert first.startswith(name[:47]) and second.startswith(name[:47])
    assert first != second
    # Without a context id a long name is shortened too, and is stable.
    alone = prompt_cache_key(name, "10.20.30", None)
    assert alone == _shortened(f"{name}:10.20.30") == prompt_cache_key(name, "10.20.30", None)


def test_exactly_64_characters_is_kept_verbatim_and_65_is_shortened() -> None:
    prefix = "cap:1.0.0:"
    exact = prefix + "c" * (64 - len(prefix))
    assert len(exact) == 64
    assert prompt_cache_key("cap", "1.0.0", exact[len(prefix) :]) == exact
    over = exact + "d"
    key = prompt_cache_key("cap", "1.0.0", over[len(prefix) :])
    assert key == _shortened(over)
    assert len(key) == 64 and key != over[:64]


def test_the_key_is_a_pure_function() -> None:
    assert prompt_cache_key("x", "1", "ctx_abc") == prompt_cache_key("x", "1", "ctx_abc")
