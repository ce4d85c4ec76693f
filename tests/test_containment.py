"""Shell containment (issue 14 item 3): resource limits, the network namespace, Landlock, and the
W-SEC warnings, through the real session and shell path with real subprocesses.

Where this host lacks a mechanism the test that needs it is skipped with the probe's reason; the
"not enforced" path is the operator's real `MURMURD_SHELL_CONFINEMENT=none`, never a faked
kernel. Every test also runs its control: the same command without confinement does what the
confined one must not, so none of these can pass by a command failing for another reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopkit import driver_capsule, run_tasks, trace_events
from murmurd.containment.host import HostSupport, probe_host
from murmurd.containment.plan import plan_containment, shell_warnings, shortfall
from murmurd.session.shell import prepare_shell, run_prepared, run_shell
from murmurd.session.shell_model import ShellFailed, ShellPolicy
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = probe_host()
HERE = plan_containment(SUPPORT, "auto")
UNCONFINED = {**os.environ, "MURMURD_SHELL_CONFINEMENT": "none"}
MIB = 1024 * 1024

needs_netns = pytest.mark.skipif(not HERE.netns, reason=f"no network namespace on this host: {SUPPORT.netns_error}")
needs_landlock = pytest.mark.skipif(not HERE.landlock, reason=f"no Landlock on this host: {SUPPORT.landlock_error}")
needs_process_bound = pytest.mark.skipif(
    HERE.pids_root is None and os.getuid() == 0,
    reason=f"root (exempt from RLIMIT_NPROC) without a pids cgroup ({SUPPORT.pids_error}): a fork bomb would be unbounded")


def calls(*commands: tuple[str, str]) -> dict[str, Any]:
    """A scripted driver that asks for each (binary, command) in turn, then ends."""
    responses = [{"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": binary, "input": {"command": command}}]}
        for i, (binary, command) in enumerate(commands)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


def staged_capsule(tmp_path: Path, host, commands: list[tuple[str, str]], capabilities: dict[str, Any],
                   env: dict[str, str] | None = None, said: list[str] | None = None) -> StagedCapsule:
    directory = driver_capsule(tmp_path, "scripted-driver", calls(*commands), capabilities=capabilities)
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                         env=os.environ if env is None else env, progress=(said.append if said is not None else None))


async def run_commands(staged: StagedCapsule, host) -> tuple[list[str], list[dict[str, Any]]]:
    """The texts the model saw for each command, and the `shell` trace events."""
    (outcome,) = await run_tasks(staged, host, "run the commands")
    assert outcome.exit_status == "ok", outcome.error
    texts = [m.text for m in outcome.messages if m.role == "tool"]
    return texts, [e for e in trace_events(staged) if e["event_type"] == "shell"]


def processes_in(directory: Path) -> list[int]:
    """Pids whose working directory is `directory` (a command's leftovers)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def murmurd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env={**(env or os.environ), "PYTHONPATH": str(ROOT)})


# --------------------------------------------------------------------------- resource limits


async def test_a_busy_loop_and_a_2_gib_file_are_stopped_and_named(tmp_path: Path, host) -> None:
    # The soft `ulimit -f` is a backstop of this test only (64 MiB, above the 1 MiB under test,
    # below the hard limit murmurd sets, so it cannot loosen it): were murmurd's limit missing,
    # dd would stop at 64 MiB and the size assertion would fail, never writing 2 GiB.
    two_gib = "ulimit -S -f 131072 2>/dev/null; exec dd if=/dev/zero of=big bs=1M count=2048"
    staged = staged_capsule(tmp_path, host, [("sh", "while :; do :; done"), ("sh", two_gib), ("sh", "echo fine")],
                            {"shell": {"allow": ["sh", "dd"]}, "resources": {"cpu_seconds": 1, "max_file_size_bytes": MIB}})
    try:
        texts, shells = await run_commands(staged, host)
        busy, big, fine = shells
        assert (busy["resource_limit"], busy["exit_code"]) == ("cpu_seconds", 128 + 24)  # SIGXCPU
        assert busy["duration_ms"] < 30_000
        assert (big["resource_limit"], big["exit_code"]) == ("max_file_size_bytes", 128 + 25)  # SIGXFSZ
        assert (staged.workdir.root / "big").stat().st_size == MIB
        assert "resource_limit" not in fine and fine["exit_code"] == 0 and "fine" in texts[2]
    finally:
        (staged.workdir.root / "big").unlink(missing_ok=True)


@needs_process_bound
async def test_a_fork_bomb_is_contained_and_named(tmp_path: Path, host) -> None:
    # Bounded by its depth (255 processes at most), so a broken limit cannot take the machine
    # down; far above the 16 allowed, so the limit must refuse forks.
    bomb = "b(){ [ $1 -gt 0 ] || return 0; b $(($1-1)) & b $(($1-1)) & wait; }; b 7"
    staged = staged_capsule(tmp_path, host, [("sh", bomb)],
                            {"shell": {"allow": ["sh"]}, "resources": {"max_processes": 16, "cgroup_pids_max": 16}})
    texts, (shell,) = await run_commands(staged, host)
    assert "Cannot fork" in texts[0]
    assert shell["duration_ms"] < 60_000
    if HERE.pids_root is not None:  # the kernel's evidence: pids.events counted a refused fork
        assert shell["resource_limit"] == "cgroup_pids_max"
    assert processes_in(staged.workdir.root) == []  # nothing of the bomb outlives its call


async def test_a_silent_manifest_runs_under_upstreams_defaults(tmp_path: Path, host) -> None:
    # `ulimit` (dash's builtin), not /proc/self/limits: scoped children cannot read /proc.
    limits = "; ".join(f"echo {flag} $(ulimit -S -{flag}) $(ulimit -H -{flag})" for flag in "tnfvp")
    staged = staged_capsule(tmp_path, host, [("sh", limits)], {"shell": {"allow": ["sh"]}})
    texts, _ = await run_commands(staged, host)
    rows = {line.split()[0]: line.split()[1:] for line in texts[0].splitlines() if line[:2] in {f"{f} " for f in "tnfvp"}}
    assert rows["t"] == ["3600", "3601"] and rows["n"] == ["1024", "1024"]
    assert rows["f"] == [str((4 << 30) // 512)] * 2 and rows["v"] == [str((2 << 30) // 1024)] * 2
    if HERE.netns:  # inside the user namespace RLIMIT_NPROC counts the namespace's tasks only
        assert rows["p"] == ["128", "128"]


# --------------------------------------------------------------------------- network namespace


# network.allow through the egress relay: tests/test_shell_egress.py


# --------------------------------------------------------------------------- Landlock


WRITES = ("echo in > inside.txt && echo inside-ok; echo out > {outside}/escaped.txt; "
          "echo x > /dev/null && echo null-ok; t=$(mktemp) && echo tmp=$t; "
          "cp /bin/true ./mytrue && ./mytrue; echo exec-rc=$?")


@needs_landlock
async def test_shell_children_write_only_beneath_the_workdir_and_exec_none_of_it(tmp_path: Path, host) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    script = WRITES.format(outside=outside)
    allow = {"shell": {"allow": ["sh", "mktemp", "cp", "true"]}}
    staged = staged_capsule(tmp_path / "confined", host, [("sh", script)], allow)
    texts, _ = await run_commands(staged, host)
    assert (staged.workdir.root / "inside.txt").read_text() == "in\n"
    assert not (outside / "escaped.txt").exists() and "Permission denied" in texts[0]
    assert "inside-ok" in texts[0] and "null-ok" in texts[0]
    assert f"tmp={staged.workdir.root}/.capsule-home/tmp/" in texts[0]  # TMPDIR beneath the workdir
    assert "exec-rc=126" in texts[0]  # a file written in the workdir is not executable

    control = staged_capsule(tmp_path / "control", host, [("sh", script)], allow, env=UNCONFINED)
    texts, _ = await run_commands(control, host)
    assert (outside / "escaped.txt").read_text() == "out\n" and "exec-rc=0" in texts[0]


@needs_landlock
async def test_workdir_exec_lets_workdir_files_run_and_is_advisory(tmp_path: Path, host) -> None:
    capabilities = {"shell": {"allow": ["sh", "cp", "true"]}, "filesystem": {"workdir_exec": True}}
    staged = staged_capsule(tmp_path, host, [("sh", "cp /bin/true ./mytrue && ./mytrue; echo exec-rc=$?")],
                            capabilities)
    texts, _ = await run_commands(staged, host)
    assert "exec-rc=0" in texts[0]
    start = _session_start(staged)
    assert (start["containment_achieved"], start["workdir_exec"]) == ("advisory", True)


# --------------------------------------------------------------------------- reporting


def test_the_helper_refusing_means_the_command_never_runs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy("/bin/true", bin_dir / "vanishing")
    policy = ShellPolicy(allow={"vanishing"}, workdir=tmp_path, containment=HERE)
    invocation = prepare_shell(policy, "vanishing", [], host_env={"PATH": str(bin_dir)})
    (bin_dir / "vanishing").unlink()
    with pytest.raises(ShellFailed, match="was not run: the confinement could not be set up: execve"):
        run_prepared(policy, invocation)


async def test_session_start_reports_what_this_host_achieves(tmp_path: Path, host) -> None:
    staged = staged_capsule(tmp_path / "auto", host, [], {"shell": {"allow": ["sh"]}})
    await run_commands(staged, host)
    start = _session_start(staged)
    grants = start["effective_grants"]
    assert (start["containment_achieved"], grants["enforcement_tier"]) == (HERE.achieved, HERE.mechanism)
    if HERE.netns and HERE.landlock:
        assert (HERE.achieved, HERE.mechanism, start["workdir_exec"]) == ("scoped", "landlock+seccomp", False)

    staged = staged_capsule(tmp_path / "none", host, [], {"shell": {"allow": ["sh"]}}, env=UNCONFINED)
    await run_commands(staged, host)
    start = _session_start(staged)
    assert (start["containment_declared"], start["containment_achieved"], start["workdir_exec"]) == (
        "advisory", "advisory", True)
    assert start["effective_grants"]["enforcement_tier"] == "none" and start["effective_grants"]["unix_sockets"]


def _session_start(staged: Any) -> dict[str, Any]:
    """The task's first attempt's `session_start` (upstream nests it right after `task_start`)."""
    task_start, session_start = trace_events(staged)[:2]
    assert (task_start["event_type"], session_start["event_type"]) == ("task_start", "session_start")
    return session_start


def capsule_with_shell(tmp_path: Path, **capabilities: Any) -> Path:
    return driver_capsule(tmp_path, "scripted-driver", calls(), capabilities={"shell": {"allow": ["bash"]},
                                                                               **capabilities})


def warnings_of(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    report = json.loads(proc.stdout)
    return {d["code"]: d["message"] for d in report["diagnostics"] if d["code"].startswith("W-SEC-")}


def test_validate_says_exactly_what_is_not_enforced_when_confinement_is_off(tmp_path: Path) -> None:
    directory = capsule_with_shell(tmp_path, network={"allow": ["https://api.example.com"]})
    proc = murmurd("validate", str(directory), "--json", env=UNCONFINED)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warned = warnings_of(proc)
    assert "MURMURD_SHELL_CONFINEMENT=none" in warned["W-SEC-001"]
    assert "write, and execute, anything murmurd's uid can" in warned["W-SEC-001"]
    assert "reach any host" in warned["W-SEC-001"]
    assert "not only the allowlisted ones" in warned["W-SEC-003"]  # bash + network.allow
    assert "W-SEC-014" not in warned  # no namespace: the allowlist is not cut off either

    proc = murmurd("explain", str(directory), env=UNCONFINED)
    assert "containment: advisory (declared advisory, mechanism none, floor met: yes)" in proc.stdout
    assert "W-SEC-001" in proc.stdout


@needs_netns
@needs_landlock
def test_validate_and_explain_report_the_scoped_tier_and_what_it_leaves_open(tmp_path: Path) -> None:
    directory = capsule_with_shell(tmp_path, network={"allow": ["https://api.example.com"]})
    proc = murmurd("validate", str(directory), "--json")
    warned = warnings_of(proc)
    # network.allow reaches shell children through the egress relay: no W-SEC-014
    assert set(warned) == {"W-SEC-005"} | ({"W-SEC-010"} if HERE.pids_root is None else set())
    assert "AF_UNIX sockets refused (network.unix_sockets: false)" in warned["W-SEC-005"]

    proc = murmurd("explain", str(directory), "--json")
    assert json.loads(proc.stdout)["containment"] == {
        "declared": "advisory", "achieved": "scoped", "mechanism": "landlock+seccomp", "floor_met": True,
        "workdir_exec": False}
    proc = murmurd("run", str(directory), "--task", "x", "--explain-scope", "--json", "--containment", "scoped")
    scope = json.loads(proc.stdout)
    assert (scope["declared_containment"], scope["achieved_containment"], scope["floor_met"]) == (
        "scoped", "scoped", True)


def test_a_scoped_floor_is_refused_where_it_cannot_be_met(tmp_path: Path) -> None:
    directory = capsule_with_shell(tmp_path, containment="scoped")
    proc = murmurd("validate", str(directory), "--json", env=UNCONFINED)
    report = json.loads(proc.stdout)
    (error,) = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert proc.returncode == 1 and error["code"] == "E-CAP-003"
    assert "MURMURD_SHELL_CONFINEMENT=none" in error["message"]
    proc = murmurd("run", str(directory), "--task", "x", env=UNCONFINED)
    assert proc.returncode != 0 and "E-CAP-003" in proc.stderr


def test_an_unknown_confinement_setting_is_an_error(tmp_path: Path) -> None:
    proc = murmurd("validate", str(capsule_with_shell(tmp_path)), "--json",
                   env={**os.environ, "MURMURD_SHELL_CONFINEMENT": "off"})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and [d["code"] for d in report["diagnostics"] if d["severity"] == "error"] == [
        "E-CAP-012"]


async def test_the_warnings_are_repeated_at_launch_and_in_the_bootstrap_log(tmp_path: Path, host) -> None:
    said: list[str] = []
    staged = staged_capsule(tmp_path, host, [], {"shell": {"allow": ["sh"]}}, env=UNCONFINED, said=said)
    assert any("W-SEC-001" in line for line in said)
    assert "warning W-SEC-001 capabilities.shell.allow:" in (staged.workdir.root / "logs" / "bootstrap.log").read_text()


async def test_a_components_shell_execute_runs_under_the_same_containment(tmp_path: Path, host, artifacts) -> None:
    """`murmur:shell/execute` (here from a capsule component) goes through the same runner and
    plan as the model's shell tools: the declared limit, and Landlock where the host has it."""
    from loopkit import capsule_dir
    from murmurd.session.session import Session, TaskSpec

    outside = tmp_path / "outside"
    outside.mkdir()
    manifest = {"name": "script", "version": "1.0.0",
                "capabilities": {"shell": {"allow": ["sh"]}, "resources": {"cpu_seconds": 7}}}
    directory = capsule_dir(tmp_path, manifest, artifacts.fixture("pull-capsule"))
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"))
    script = f"echo out > {outside}/escaped.txt; echo rc=$?; ulimit -S -t; ulimit -H -t"
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec("tsk_" + "0" * 32, json.dumps({"shell": ["sh", ["-c", script]]})))
    finally:
        await session.close()
    assert outcome.exit_status == "ok", outcome.error
    exit_code, stdout, _ = json.loads(staged.workdir.result.read_text())["shell"]["ok"]
    assert exit_code == 0 and stdout.split()[-2:] == ["7", "8"]  # cpu seconds: soft 7, hard 8
    if HERE.landlock:
        assert "rc=2" in stdout and not (outside / "escaped.txt").exists()


# --------------------------------------------------------------------------- the plan on other kernels (pure)



def kernel(*, abi: int = 7, netns: bool = True, pids: bool = True, root: bool = True, seccomp: bool = True,
           mountns: bool = True, sealed: bool = True) -> HostSupport:
    """What another kernel's probe would say (the plan is pure; the probe itself is tested above)."""
    return HostSupport(landlock_abi=abi, netns=netns, pids_root=Path("/sys/fs/cgroup/pids") if pids else None,
                       root_uid=root, landlock_error=None if abi else "the kernel has no Landlock",
                       netns_error=None if netns else "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted",
                       pids_error=None if pids else "no pids cgroup controller is mounted",
                       seccomp=seccomp, seccomp_error=None if seccomp else "libseccomp cannot load",
                       mountns=mountns and netns, mountns_error=None if mountns else "mount: Operation not permitted",
                       sealed=sealed and mountns and netns, sealed_error=None if sealed else "pivot_root: Invalid argument")


@pytest.mark.parametrize(("support", "achieved", "mechanism", "codes"), [
    (kernel(), "scoped", "landlock+seccomp", ["W-SEC-005"]),
    (kernel(abi=0), "advisory", "netns+mountns+seccomp", ["W-SEC-002"]),
    (kernel(netns=False), "advisory", "landlock+seccomp (no netns)", ["W-SEC-013"]),
    (kernel(abi=0, netns=False, seccomp=False), "advisory", "none", ["W-SEC-001"]),
    (kernel(pids=False), "scoped", "landlock+seccomp", ["W-SEC-005", "W-SEC-010"]),
    (kernel(seccomp=False), "advisory", "netns+mountns+landlock", ["W-SEC-005"]),
    (kernel(mountns=False), "advisory", "netns+landlock+seccomp", ["W-SEC-005"]),
])
def test_each_kernel_gets_its_class_and_warnings(support: HostSupport, achieved: str, mechanism: str,
                                                  codes: list[str]) -> None:
    plan = plan_containment(support, "auto")
    assert (plan.achieved, plan.mechanism) == (achieved, mechanism)
    found = shell_warnings(plan, support, shell_allow=["sh"], network_allow=[], declares_workdir_exec=False)
    assert [code for code, _, _ in found] == codes
    assert shell_warnings(plan, support, shell_allow=[], network_allow=[], declares_workdir_exec=False) == []


def test_the_warnings_name_the_missing_mechanism_and_its_reason() -> None:
    support = kernel(netns=False, pids=False)
    ((_, _, network), (_, _, pids)) = shell_warnings(plan_containment(support, "auto"), support, shell_allow=["sh"],
                                                     network_allow=[], declares_workdir_exec=False)
    assert "Operation not permitted" in network and "reach any host murmurd can" in network
    assert "uid 0, which the kernel exempts from RLIMIT_NPROC" in pids
    support = kernel(pids=False, root=False)
    (_, (_, _, pids)) = shell_warnings(plan_containment(support, "auto"), support, shell_allow=["sh"],
                                       network_allow=[], declares_workdir_exec=False)
    assert "cgroup_pids_max is not enforced" in pids and "RLIMIT_NPROC" not in pids


def test_a_floor_names_what_is_missing() -> None:
    assert shortfall("scoped", plan_containment(kernel(), "auto")) is None
    assert "no Landlock: the kernel has no Landlock" in shortfall("scoped", plan_containment(kernel(abi=0), "auto"))
    assert "manifest declares containment: sealed" in shortfall("sealed", plan_containment(kernel(), "auto"))
    assert shortfall("sealed", plan_containment(kernel(), "auto", declared="sealed")) is None
    assert "no composed root: pivot_root" in shortfall("sealed", plan_containment(kernel(sealed=False), "auto",
                                                                                  declared="sealed"))
    assert "workdir_exec" in shortfall("scoped", plan_containment(kernel(), "auto", workdir_exec=True))


@needs_landlock
def test_the_callers_environment_never_reaches_the_helper_before_it_is_confined(tmp_path: Path) -> None:
    """`murmur:shell/execute` takes an environment from the component. The dynamic loader of the
    helper (murmurd's Python) must not see it: `LD_DEBUG_OUTPUT` there is a write outside the
    workdir, `LD_PRELOAD` arbitrary code, both before Landlock. The command itself still gets it,
    confined: its loader's write is refused."""
    workdir, outside = tmp_path / "workdir", tmp_path / "outside"
    workdir.mkdir()
    outside.mkdir()
    policy = ShellPolicy(allow={"env"}, workdir=workdir, containment=HERE)
    loader = [("LD_DEBUG", "files"), ("LD_DEBUG_OUTPUT", str(outside / "loader")), ("CHOSEN", "by-the-caller")]
    outcome = run_shell(policy, "env", [], loader)
    assert outcome.exit_code == 0, outcome.stderr
    assert list(outside.iterdir()) == []
    assert "CHOSEN=by-the-caller" in outcome.stdout.splitlines()
    assert f"LD_DEBUG_OUTPUT={outside / 'loader'}" in outcome.stdout.splitlines()
