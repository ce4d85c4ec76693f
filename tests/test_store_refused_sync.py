"""A sync the disk refuses is sticky (issue 29, group commit): the kernel answers the SQLite
store's `fdatasync` with EIO, through a seccomp supervisor in a process of its own
(`tests/refused_syncs.py`), and SQLite's own I/O error becomes `LostSync`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("refused_syncs.py")


def test_a_refused_sync_refuses_that_terminal_write_and_every_later_one(tmp_path: Path) -> None:
    path = tmp_path / "tasks.sqlite3"
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True,
                          timeout=300, check=True)
    seen = json.loads(done.stdout)
    lost = (f"LostSync: task store {path}: the disk refused to sync it (disk I/O error); "
            "durable writes are refused until the store is opened again")
    assert seen["completed before"] == "ok"
    assert seen["completed, sync refused"] == lost
    assert seen["completed after"] == lost  # the disk answers again: still refused
    assert seen["working after"] == "ok"  # an intermediate state is never waited on a sync
    assert seen["refused"] == 1 and seen["passed"] >= 1  # the filter saw SQLite's syncs
