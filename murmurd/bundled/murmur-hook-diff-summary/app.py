"""murmur-hook-diff-summary: a unified diff of every file the editor touched, at the end of the turn.

murmur's published hook (0.3.0; every event, blocking, commits nothing but the `artifact` that
`on-inference` always may). `on-inference` fires after the model answers and before its tool
calls run, so the hook snapshots there:

- a turn whose calls include `murmur-tool-editor` writes: the first time a path is seen, its
  current bytes (or "absent") are kept. The write's path comes from each editor `tool_call`
  block of the event's `output` (the response content as JSON); when there is none, from the
  published search: `tools`, then `output`, parsed and searched for an operation object, a
  tool_use `input`, a `data` envelope, an array or a double-encoded string. A write is
  upstream's `operation` `write_file` / `replace_in_file`, or murmurd's editor `op` `write` /
  `patch`. A leading `./` is dropped.
- a turn the model ends (`decision == "end_turn"`): one entry per snapshot, in first-touch order,
  the snapshots cleared, returned as `artifact({"session_id", "files": [...]})`, even with no
  files (`"session_id": "unknown"` before any session start).

Files are read relative to the hook's `.`: grant it `filesystem.scope` on the directory the
editor writes in (`"."`, the workdir, for the bundled editor). What it cannot read counts as
absent.
"""

from __future__ import annotations

import json

from diffs import MAX_FILE_BYTES, file_entry
from editor_writes import write_paths
from hookkit import NONE, Silent
from wit_world.imports import lifecycle


class _Session:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.snapshots: dict[str, bytes | None] = {}  # path -> bytes before (None: absent), first-touch order


_state: _Session | None = None


def _read(path: str) -> bytes | None:
    """At most MAX_FILE_BYTES + 1 bytes of `path` (enough to tell it is too big), or None."""
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None


def summary(state: _Session | None) -> str:
    if state is None:
        return json.dumps({"session_id": "unknown", "files": []})
    files = [file_entry(path, before, _read(path)) for path, before in state.snapshots.items()]
    state.snapshots.clear()
    return json.dumps({"session_id": state.session_id, "files": files}, ensure_ascii=False)


class Lifecycle(Silent):
    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        global _state
        _state = _Session(ctx.session_id)
        return NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        if event.decision == "end_turn":
            return lifecycle.HookOutput_Artifact(summary(_state))
        if _state is not None:
            for path in write_paths(event.output, event.tools, event.tool_name):
                if path and path not in _state.snapshots:
                    _state.snapshots[path] = _read(path)
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        global _state
        _state = None
        return NONE
