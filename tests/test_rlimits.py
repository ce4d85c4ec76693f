"""`capabilities.resources` as rlimits on shell children: what is declared, clamping, attribution."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

from murmurd.manifest.capsule import Resources
from murmurd.session.rlimits import declared_limits, limit_that_killed
from murmurd.session.shell import ShellPolicy, run_shell


def test_only_declared_rlimit_fields_become_limits() -> None:
    assert declared_limits(None) == ()
    assert declared_limits(Resources(max_processes=5, cgroup_pids_max=9)) == ()
    assert declared_limits(Resources(cpu_seconds=3, memory_bytes=1 << 30)) == (
        (resource.RLIMIT_CPU, 3), (resource.RLIMIT_AS, 1 << 30))


def test_a_kill_is_attributed_only_to_a_declared_limit() -> None:
    cpu = ((resource.RLIMIT_CPU, 1),)
    assert limit_that_killed(-int(signal.SIGXCPU), cpu) == "cpu_seconds"
    assert limit_that_killed(-int(signal.SIGXFSZ), cpu) is None  # no file size limit was declared
    assert limit_that_killed(-int(signal.SIGKILL), cpu) is None
    assert limit_that_killed(152, cpu) is None  # an exit code, not a signal


def test_a_value_above_the_hard_limit_is_clamped_not_refused(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    policy = ShellPolicy(allow={"sh"}, workdir=tmp_path, rlimits=((resource.RLIMIT_NOFILE, hard * 4),))
    outcome = run_shell(policy, "sh", ["-c", "ulimit -n"])
    assert outcome.exit_code == 0 and outcome.stdout.strip() == str(hard)


def test_without_resources_the_child_keeps_murmurds_limits_but_no_core_dumps(tmp_path: Path) -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    outcome = run_shell(ShellPolicy(allow={"sh"}, workdir=tmp_path), "sh", ["-c", "ulimit -n; ulimit -c"])
    assert outcome.stdout.split() == [str(soft), "0"]
