"""bench/filesystem.py: what the benches say of the file system murmurd's files were on.

A bench row's CPU per task is read against the file system it names (ext4 without a journal
allocates inodes slowly for minutes after any process removed many files), so the name must be
the real one: checked against util-linux's `findmnt`, which reads the same mount table its own way.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _filesystem():
    spec = importlib.util.spec_from_file_location("bench_filesystem", BENCH / "filesystem.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


FS = _filesystem()


def _findmnt(path: Path) -> tuple[str, str]:
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,TARGET", "--target", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1]


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="util-linux's findmnt is not installed")
@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_it_names_the_file_system_and_mount_findmnt_names(tmp_path: Path, where: str) -> None:
    if where == "shm":
        if not FS.tmpfs_available():
            pytest.skip("no writable tmpfs at /dev/shm here")
        path = FS.TMPFS
    else:
        path = tmp_path
    kind, target = _findmnt(path)
    described = FS.describe(path)
    assert described.startswith(kind) and described.endswith(f" at {target}"), (described, kind, target)
    if kind == "ext4":  # and it says whether the device has a journal, as the kernel lists it
        device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--target", str(path)],
                                capture_output=True, text=True, check=True).stdout.strip()
        journaled = any(e.startswith(os.path.basename(device) + "-") for e in os.listdir("/proc/fs/jbd2")) \
            if os.path.isdir("/proc/fs/jbd2") else False
        assert ("(journaled)" if journaled else "(no journal)") in described


def test_the_probe_creates_its_files_beneath_the_path_and_times_them(tmp_path: Path) -> None:
    cost = FS.create_cost_us(tmp_path, count=50)
    probes = list(tmp_path.iterdir())
    assert len(probes) == 1 and probes[0].name.startswith("fs-probe-")
    assert sorted(int(p.name) for p in probes[0].iterdir()) == list(range(50))
    assert 0 < cost < 10_000_000
