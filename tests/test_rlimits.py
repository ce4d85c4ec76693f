"""`capabilities.resources` as rlimits on shell children: upstream's defaults, what is declared,
clamping, attribution. Each limit is read back from the real child's `/proc/self/limits`."""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

from murmurd.manifest.capsule import Resources
from murmurd.session.rlimits import DEFAULTS, GIB, ShellLimits, limit_that_killed, live_tasks_of
from murmurd.session.shell import run_shell
from murmurd.session.shell_model import ShellPolicy


def limits_of_child(policy: ShellPolicy) -> dict[str, tuple[str, str]]:
    """`cat /proc/self/limits` run as a shell command: {name: (soft, hard)}."""
    outcome = run_shell(policy, "cat", ["/proc/self/limits"])
    assert outcome.exit_code == 0, outcome.stderr
    found = {}
    for line in outcome.stdout.splitlines()[1:]:
        name, soft, hard = line[:26].strip(), *line[26:].split()[:2]
        found[name] = (soft, hard)
    return found


def test_a_silent_manifest_gets_upstreams_defaults() -> None:
    assert ShellLimits.from_resources(None) == ShellLimits()
    assert ShellLimits() == ShellLimits(max_processes=128, max_open_files=1024, max_file_size_bytes=4 * GIB,
                                        cpu_seconds=3600, memory_bytes=2 * GIB, cgroup_pids_max=256)
    assert set(DEFAULTS) == {"max_processes", "max_open_files", "max_file_size_bytes", "cpu_seconds",
                             "memory_bytes", "cgroup_pids_max", "cgroup_memory_bytes", "cgroup_cpu_percent",
                             "cgroup_io_bytes_per_sec", "workdir_max_bytes"}
    assert (ShellLimits().cgroup_memory_bytes, ShellLimits().cgroup_cpu_percent) == (4 * GIB, 200)
    assert (ShellLimits().cgroup_io_bytes_per_sec, ShellLimits().workdir_max_bytes) == (100 << 20, 10 * GIB)


def test_declared_fields_replace_only_their_default() -> None:
    limits = ShellLimits.from_resources(Resources(cpu_seconds=3, cgroup_pids_max=9, cgroup_memory_bytes=1 << 30))
    assert (limits.cpu_seconds, limits.cgroup_pids_max) == (3, 9)
    assert limits.max_open_files == 1024 and limits.memory_bytes == 2 * GIB


def test_a_kill_is_attributed_only_when_the_evidence_names_exactly_one_limit() -> None:
    assert limit_that_killed(-int(signal.SIGXCPU)) == "cpu_seconds"
    assert limit_that_killed(-int(signal.SIGXFSZ)) == "max_file_size_bytes"
    assert limit_that_killed(1, pids_limit_hit=True) == "cgroup_pids_max"
    assert limit_that_killed(-int(signal.SIGXCPU), pids_limit_hit=True) is None  # two candidates: none named
    assert limit_that_killed(-int(signal.SIGKILL), memory_killed=True) == "cgroup_memory_bytes"
    assert limit_that_killed(-int(signal.SIGKILL)) is None
    assert limit_that_killed(152) is None  # an exit code, not a signal


def test_without_resources_the_child_runs_under_upstreams_defaults_and_no_core_dumps(tmp_path: Path) -> None:
    limits = limits_of_child(ShellPolicy(allow={"cat"}, workdir=tmp_path))
    assert limits["Max open files"] == ("1024", "1024")
    assert limits["Max file size"] == (str(4 * GIB), str(4 * GIB))
    assert limits["Max cpu time"] == ("3600", "3601")  # SIGXCPU a second before SIGKILL
    assert limits["Max address space"] == (str(2 * GIB), str(2 * GIB))
    assert limits["Max core file size"] == ("0", "0")
    soft, hard = limits["Max processes"]
    assert soft == hard and int(soft) >= 128  # the uid's live tasks + 128, outside a user namespace


def test_declared_limits_reach_the_child(tmp_path: Path) -> None:
    policy = ShellPolicy(allow={"cat"}, workdir=tmp_path,
                         limits=ShellLimits(max_open_files=64, cpu_seconds=7, max_file_size_bytes=4096,
                                            memory_bytes=GIB, max_processes=5))
    limits = limits_of_child(policy)
    assert (limits["Max open files"], limits["Max cpu time"], limits["Max file size"]) == (
        ("64", "64"), ("7", "8"), ("4096", "4096"))
    assert limits["Max address space"] == (str(GIB), str(GIB))
    # RLIMIT_NPROC counts the uid's every task: the limit is that count (a moment earlier) + 5
    assert 5 < int(limits["Max processes"][0]) <= live_tasks_of(os.getuid()) + 5 + 32


def test_a_value_above_the_hard_limit_is_clamped_not_refused(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    policy = ShellPolicy(allow={"sh"}, workdir=tmp_path, limits=ShellLimits(max_open_files=hard * 4))
    outcome = run_shell(policy, "sh", ["-c", "ulimit -n"])
    assert outcome.exit_code == 0 and outcome.stdout.strip() == str(hard)
