"""The context session index a retention sweep reads (murmurd.a2a.core.context_sessions): a sweep
skips the live sessions' entries (issue 29: with 256 contexts in flight a sweep ran per task end
and read every entry). Real files in a temporary state directory."""

from __future__ import annotations

from pathlib import Path

from murmurd.a2a.core.context_sessions import SessionIndex

A, B, C = ("ses_" + c * 32 for c in "abc")


def _index(tmp_path: Path) -> SessionIndex:
    index = SessionIndex(tmp_path / "context-sessions", tmp_path / "workdir")
    for session_id, context_id in ((A, "ctx-a"), (B, "ctx-b"), (C, "ctx-c")):
        index.record(session_id, context_id)
    return index


def test_entries_lists_every_recorded_session_with_its_context(tmp_path: Path) -> None:
    found = {(e.session_id, e.context_id) for e in _index(tmp_path).entries()}
    assert found == {(A, "ctx-a"), (B, "ctx-b"), (C, "ctx-c")}


def test_entries_leaves_out_the_sessions_it_is_told_to_skip(tmp_path: Path) -> None:
    found = {(e.session_id, e.context_id) for e in _index(tmp_path).entries({A, C})}
    assert found == {(B, "ctx-b")}
