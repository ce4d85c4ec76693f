"""`TraceWriter`: the one writer of a session's `trace.jsonl` (runtime-notes §7).

Every event gets `event_type`, `session_id` and `timestamp` (Unix ms), is appended as one JSON
line and flushed before `write` returns, so the file is complete whatever ends the session. A
failed write raises `TraceWriteError`; the session decides what that means (it ends the session
for every event but `compaction`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from murmurd import workdir_fs

log = logging.getLogger("murmurd.trace")


class TraceWriteError(RuntimeError):
    pass


# Fields upstream always writes, as `null` when there is no value (observability fact sheet §2);
# every other field is left out when it has none.
ALWAYS_PRESENT: dict[str, frozenset[str]] = {
    "session_start": frozenset({"system_prompt_sha256"}),
    "inference": frozenset({"tool_name"}),
    "a2a_task_received": frozenset({"traceparent_from_caller"}),
    "a2a_send": frozenset({"traceparent"}),
    "egress_denied": frozenset({"origin"}),
}


class TraceWriter:
    def __init__(
        self, root: Path, rel: str, session_id: str, mirror: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Appends to `rel` beneath the workdir `root`; a symlink there is refused, never followed."""
        self.path = root / rel
        self.session_id = session_id
        self._mirror = mirror  # e.g. OTel spans; never allowed to fail a write
        self._lock = threading.Lock()
        try:
            self._file: TextIO | None = workdir_fs.open_append_text(root, rel)
        except OSError as exc:
            raise TraceWriteError(f"cannot open trace {self.path}: {exc.strerror}") from exc

    def write(self, event_type: str, **fields: Any) -> dict[str, Any]:
        event = {"event_type": event_type, "session_id": self.session_id, "timestamp": int(time.time() * 1000)}
        keep = ALWAYS_PRESENT.get(event_type, frozenset())
        event.update({k: v for k, v in fields.items() if v is not None or k in keep})
        line = json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._file is None:
                raise TraceWriteError(f"trace {self.path} is closed")
            try:
                self._file.write(line)
                self._file.flush()
            except (OSError, ValueError) as exc:
                raise TraceWriteError(f"cannot write {event_type} to trace {self.path}: {exc}") from exc
        if self._mirror is not None:
            try:
                self._mirror(event)
            except Exception:  # noqa: BLE001 - observability must never end a session
                log.exception("trace mirror failed for %s", event_type)
        return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                finally:
                    self._file = None
