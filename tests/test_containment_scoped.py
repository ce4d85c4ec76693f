"""`scoped` and `sealed` as upstream means them, tried as an attacker would, on this machine's
kernel: reads, exec, the loader and memfd tricks, socket families, the composed root, floors
that refuse with the code naming what is missing; and real tools (gcc, make, git, Python) still
working. Every confined row has an unconfined control showing the same command succeeds there.

Where this host lacks a mechanism the test that needs it is skipped with the probe's reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from loopkit import driver_capsule, run_tasks, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.session.shell import run_shell
from murmurd.session.shell_model import ShellPolicy
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = probe_host()
SCOPED = plan_containment(SUPPORT, "auto")
# Debian's python3 (not the venv's): its standard library is the interpreter_runtime grant
PYTHON_RUNTIME = "/usr/lib/" + os.path.basename(os.path.realpath("/usr/bin/python3"))
HOST_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # Debian's tools, never a pyenv shim
UNCONFINED = {**os.environ, "MURMURD_SHELL_CONFINEMENT": "none"}

needs_scoped = pytest.mark.skipif(SCOPED.achieved != "scoped", reason=f"scoped is not achieved here: {SCOPED.why_not}")
needs_sealed = pytest.mark.skipif(not SUPPORT.sealed, reason=f"no composed root here: {SUPPORT.sealed_error}")
needs_debian_python = pytest.mark.skipif(not os.path.isdir(PYTHON_RUNTIME) or not os.path.exists("/usr/bin/python3"),
                                         reason="no Debian python3 with its standard library")


def shell(workdir: Path, allow: list[str], script: str, plan=SCOPED, runtime: tuple = (), **plan_args) -> tuple[int, str]:
    """Run `sh -c script` confined as `plan` (or re-planned with `runtime`/`plan_args`); (exit code, output)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if runtime or plan_args:
        plan = plan_containment(SUPPORT, "auto", runtime=runtime, **plan_args)
    policy = ShellPolicy(allow={"sh", *allow}, workdir=workdir, containment=plan)
    outcome = run_shell(policy, "sh", ["-c", script], host_env=HOST_ENV)
    return outcome.exit_code, outcome.stdout + outcome.stderr


def unconfined(workdir: Path, allow: list[str], script: str) -> tuple[int, str]:
    return shell(workdir, allow, script, plan=plan_containment(SUPPORT, "none"))


# --------------------------------------------------------------------------- reads and exec


@needs_scoped
def test_host_files_and_the_daemons_state_cannot_be_read(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "tasks.sqlite3").write_text("the operator's prompt: SECRET-4711\n")
    script = f"cat /etc/passwd; echo passwd=$?; cat /etc/hostname; echo hostname=$?; grep -a SECRET {state}/tasks.sqlite3; echo state=$?"
    code, out = shell(tmp_path / "wd", ["cat", "grep"], script)
    assert "passwd=1" in out and "hostname=1" in out and "state=2" in out, out
    assert "root:" not in out and "SECRET-4711" not in out and "Permission denied" in out
    _, control = unconfined(tmp_path / "control", ["cat", "grep"], script)
    assert "root:" in control and "SECRET-4711" in control


@needs_scoped
def test_an_unlisted_binary_does_not_run(tmp_path: Path) -> None:
    code, out = shell(tmp_path / "wd", [], "/usr/bin/id; echo id=$?; ls /; echo ls=$?")
    assert "id=126" in out and "ls=12" in out and "uid=" not in out, out  # 126 found, not executable
    _, control = unconfined(tmp_path / "control", [], "/usr/bin/id; echo id=$?")
    assert "uid=" in control


@needs_scoped
def test_only_the_fixed_devices_open(tmp_path: Path) -> None:
    script = ("echo x > /dev/null && echo null-rw; head -c 4 /dev/zero | od -An -c; head -c 1 /dev/urandom >/dev/null "
              "&& echo urandom-r; echo x > /dev/zero; echo zero-w=$?; head -c 1 /dev/full; echo full=$?; "
              "head -c 1 /dev/random; echo random=$?")
    code, out = shell(tmp_path / "wd", ["head", "od"], script)
    assert "null-rw" in out and "\\0" in out and "urandom-r" in out, out
    assert "zero-w=2" in out and "full=1" in out and "random=1" in out


# --------------------------------------------------------------------------- workdir files never run


@needs_scoped
def test_the_loader_and_memfd_tricks_are_refused(tmp_path: Path) -> None:
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2") if os.path.exists("/lib64/ld-linux-x86-64.so.2") else None
    if loader is None:
        pytest.skip("no x86-64 glibc loader here")
    dash = os.path.realpath("/bin/sh")
    memfd = ("import os; fd = os.memfd_create('x'); os.write(fd, open('" + dash + "', 'rb').read()); "
             "os.execv(f'/proc/self/fd/{fd}', ['x', '-c', 'echo memfd-ran'])")
    script = (f"cp {dash} ./copied; ./copied -c 'echo direct-ran'; echo direct=$?; "
              f"{loader} ./copied -c 'echo loader-ran'; echo loader=$?; python3 -c \"{memfd}\"; echo memfd=$?")
    code, out = shell(tmp_path / "wd", ["cp", "python3"], script, runtime=((PYTHON_RUNTIME, True),))
    assert "direct=126" in out and "loader=127" in out and "failed to map segment" in out, out
    assert "memfd=1" in out and "Operation not permitted" in out
    assert not any(f"{how}-ran" in out for how in ("direct", "loader", "memfd"))
    _, control = shell(tmp_path / "control", ["cp", "python3"], script, plan=plan_containment(SUPPORT, "none"))
    assert all(f"{how}-ran" in control for how in ("direct", "loader", "memfd")), control


# --------------------------------------------------------------------------- seccomp


SOCKETS = ("import socket\n"
           "for name in ('AF_UNIX', 'AF_NETLINK', 'AF_PACKET', 'AF_INET'):\n"
           "    kind = socket.SOCK_RAW if name == 'AF_PACKET' else socket.SOCK_DGRAM\n"
           "    try:\n"
           "        socket.socket(getattr(socket, name), kind).close(); print(name, 'open')\n"
           "    except OSError as e:\n"
           "        print(name, 'errno', e.errno)\n")


@needs_scoped
@needs_debian_python
def test_unix_sockets_are_refused_unless_declared_and_netlink_always(tmp_path: Path) -> None:
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "s.py").write_text(SOCKETS)
    runtime = ((PYTHON_RUNTIME, True),)
    _, out = shell(tmp_path / "wd", ["python3"], "python3 s.py", runtime=runtime)
    assert "AF_UNIX errno 13" in out and "AF_NETLINK errno 13" in out and "AF_PACKET errno 13" in out, out
    assert "AF_INET open" in out
    _, out = shell(tmp_path / "wd", ["python3"], "python3 s.py", runtime=runtime, unix_sockets=True)
    assert "AF_UNIX open" in out and "AF_NETLINK errno 13" in out, out


@needs_scoped
@needs_debian_python
def test_namespaces_and_mounts_cannot_be_made_inside(tmp_path: Path) -> None:
    script = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
              "print('unshare', libc.unshare(0x10000000), ctypes.get_errno()); "
              "print('mount', libc.mount(b'none', b'.', b'tmpfs', 0, None), ctypes.get_errno())")
    runtime = ((PYTHON_RUNTIME, True), ("/usr/lib/x86_64-linux-gnu", True))  # ctypes' libffi
    _, out = shell(tmp_path / "wd", ["python3"], f'python3 -c "{script}"', runtime=runtime)
    assert "unshare -1 1" in out and "mount -1 1" in out, out


# --------------------------------------------------------------------------- real tools still work


C_PROJECT = r"""
set -e
mkdir -p proj && cd proj
printf '#include <stdio.h>\nint add(int a, int b) { return a + b; }\nint main(void) { printf("%%d\\n", add(2, 3)); return add(2, 3) != 5; }\n' > add.c
printf 'add: add.c\n\tgcc -O2 -o add add.c\ntest: add\n\t./add\n' > Makefile
printf 'import pathlib, subprocess\nelf = pathlib.Path("add").read_bytes()\nassert elf[:4] == b"\\x7fELF", "not an ELF"\nsymbols = subprocess.run(["nm", "add"], capture_output=True, text=True, check=True).stdout\nassert " T add" in symbols and " T main" in symbols\nprint("python-checks-passed")\n' > check.py
make add
python3 check.py
export GIT_CONFIG_NOSYSTEM=1
git init -q . && git add -A && git -c user.name=capsule -c user.email=capsule@localhost commit -qm 'add: two and three'
git log --format=%s
"""
BUILD_CAPABILITIES = {"shell": {"allow": ["sh", "make", "gcc", "as", "ld", "git", "python3", "nm", "mkdir"],
                                "interpreter_runtime": [
                                    {"binary": "gcc", "dirs": [{"path": "/usr/lib/gcc", "list_dir": True},
                                                               {"path": "/usr/include", "list_dir": True},
                                                               {"path": "/usr/lib/x86_64-linux-gnu", "list_dir": True}]},
                                    {"binary": "git", "dirs": [{"path": "/usr/share/git-core", "list_dir": True},
                                                               {"path": "/usr/lib/git-core", "list_dir": True}]},
                                    {"binary": "python3", "dirs": [{"path": PYTHON_RUNTIME, "list_dir": True}]}]}}


def calls(*commands: tuple[str, str]) -> dict:
    responses = [{"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": binary, "input": {"command": command}}]}
        for i, (binary, command) in enumerate(commands)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


async def run_capsule(tmp_path: Path, host, commands: list[tuple[str, str]], capabilities: dict,
                      env: dict | None = None) -> tuple[list[str], dict, object]:
    directory = driver_capsule(tmp_path, "scripted-driver", calls(*commands), capabilities=capabilities)
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                           env={**os.environ, **HOST_ENV} if env is None else env)
    (outcome,) = await run_tasks(staged, host, "build and test it")
    assert outcome.exit_status == "ok", outcome.error
    events = trace_events(staged)
    start = next(e for e in events if e["event_type"] == "session_start")
    return [m.text for m in outcome.messages if m.role == "tool"], start, staged


@needs_scoped
@needs_debian_python
@pytest.mark.skipif(not all(shutil.which(t, path="/usr/bin") for t in ("gcc", "make", "git", "nm")),
                    reason="gcc, make, git and binutils are needed (.ci/run installs them)")
async def test_a_scoped_capsule_compiles_and_tests_a_c_project_with_make_git_and_python(tmp_path: Path, host) -> None:
    capabilities = {**BUILD_CAPABILITIES, "containment": "scoped"}
    texts, start, staged = await run_capsule(tmp_path / "scoped", host, [("sh", C_PROJECT), ("make", "-C proj test")],
                                             capabilities)
    assert (start["containment_achieved"], start["effective_grants"]["enforcement_tier"]) == ("scoped",
                                                                                             "landlock+seccomp")
    assert "Exit code: 0" in texts[0] and "python-checks-passed" in texts[0], texts[0]
    assert "add: two and three" in texts[0]
    assert (staged.workdir.root / "proj" / ".git").is_dir()
    assert "Permission denied" in texts[1] and "Exit code: 2" in texts[1]  # the built binary never runs under scoped

    # workdir_exec: true runs it (and is advisory): the same project, end to end
    capabilities = {**BUILD_CAPABILITIES, "filesystem": {"workdir_exec": True}}
    texts, start, _ = await run_capsule(tmp_path / "exec", host, [("sh", C_PROJECT), ("make", "-C proj test")],
                                        capabilities)
    assert start["containment_achieved"] == "advisory" and start["workdir_exec"] is True
    assert "Exit code: 0" in texts[1] and "\n5" in texts[1], texts[1]


# --------------------------------------------------------------------------- sealed


@needs_scoped
@needs_sealed
async def test_a_sealed_child_sees_a_composed_root(tmp_path: Path, host) -> None:
    disk = next((d for d in ("/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/xvda") if os.path.exists(d)), "/dev/sda")
    state = tmp_path / "state"
    state.mkdir()
    script = (f"cat /etc/shadow; ls /home; ls {disk}; ls {state}; cat /etc/passwd; ls /; echo hi > here.txt; "
              "cat here.txt; ls /dev")
    capabilities = {"containment": "sealed", "shell": {"allow": ["sh", "cat", "ls"]}}
    texts, start, staged = await run_capsule(tmp_path / "sealed", host, [("sh", script)], capabilities)
    grants = start["effective_grants"]
    assert (start["containment_declared"], start["containment_achieved"], grants["enforcement_tier"]) == (
        "sealed", "sealed", "mountns+pivot_root+landlock+seccomp")
    out = texts[0]
    for absent in ("/etc/shadow", "/home", disk, str(state)):
        assert f"{absent}': No such file or directory" in out or f"{absent}: No such file or directory" in out, (absent, out)
    assert "capsule:x:" in out and "root:x:0:0" in out  # the synthetic passwd
    assert "hi" in out and (staged.workdir.root / "here.txt").read_text() == "hi\n", out
    listed = set(out.split())
    assert {"null", "zero", "full", "tty", "random", "urandom"} <= listed and "vda" not in listed
    assert {"usr", "etc", "dev", "proc"} <= listed and "home" not in listed and "root" not in listed


# --------------------------------------------------------------------------- floors refuse


DEGRADE = ROOT / "tests" / "degraded_host.py"


def murmurd(*args: str, deny: str = "", no_cgroup: bool = False) -> subprocess.CompletedProcess[str]:
    """murmurd on a host made to lack a mechanism for real: a seccomp filter refusing `deny`'s
    syscalls to the whole daemon (its probe included), or no cgroup filesystem in its mount namespace."""
    command = [sys.executable, str(DEGRADE), deny, sys.executable, "-m", "murmurd", *args]
    if no_cgroup:
        command = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /sys/fs/cgroup && exec "$@"', "sh", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@needs_scoped
@pytest.mark.parametrize(("floor", "deny", "no_cgroup", "code", "names"), [
    ("scoped", "unshare", False, "E-CAP-005", "no network namespace"),
    ("sealed", "pivot_root", False, "E-CAP-003", "no composed root"),
    ("scoped", "", True, "E-RUN-012", "no cgroup"),
])
def test_a_floor_the_host_cannot_meet_refuses_before_anything_runs(tmp_path: Path, floor: str, deny: str,
                                                                   no_cgroup: bool, code: str, names: str) -> None:
    if no_cgroup and (os.getuid() != 0 or not shutil.which("unshare")):
        pytest.skip("needs root and util-linux unshare to hide the cgroup filesystem")
    marker = tmp_path / "ran"
    directory = driver_capsule(tmp_path, "scripted-driver", calls(("sh", f"echo ran > {marker}")),
                               capabilities={"shell": {"allow": ["sh"]}, "containment": floor})
    proc = murmurd("validate", str(directory), "--json", deny=deny, no_cgroup=no_cgroup)
    assert proc.stdout, proc.stderr
    errors = [d for d in json.loads(proc.stdout)["diagnostics"] if d["severity"] == "error"]
    assert proc.returncode == 1 and [e["code"] for e in errors] == [code], proc.stdout
    assert names in errors[0]["message"]
    proc = murmurd("run", str(directory), "--task", "x", deny=deny, no_cgroup=no_cgroup)
    assert proc.returncode != 0 and code in proc.stderr, proc.stderr
    assert not marker.exists()
    proc = murmurd("run", str(directory), "--task", "x", "--explain-scope", "--json", deny=deny, no_cgroup=no_cgroup)
    scope = json.loads(proc.stdout)  # the report is given even so (upstream's --explain-scope)
    assert proc.returncode == 0 and scope["floor_met"] is False and names in scope["shortfall_reason"]
    assert scope["declared_containment"] == floor
    proc = murmurd("explain", str(directory), "--json", deny=deny, no_cgroup=no_cgroup)
    assert json.loads(proc.stdout)["containment"]["floor_met"] is False


def test_the_healthy_host_meets_both_floors(tmp_path: Path) -> None:
    if not SUPPORT.sealed or SCOPED.achieved != "scoped":
        pytest.skip("this host does not deliver sealed")
    directory = driver_capsule(tmp_path, "scripted-driver", calls(), capabilities={"shell": {"allow": ["sh"]},
                                                                                 "containment": "sealed"})
    proc = murmurd("run", str(directory), "--task", "x", "--explain-scope")
    assert proc.returncode == 0, proc.stderr
    assert "achieved:  sealed" in proc.stdout and "mechanism: mountns+pivot_root+landlock+seccomp" in proc.stdout


# --------------------------------------------------------------------------- the manifest fields


def test_interpreter_runtime_and_unix_sockets_are_validated_and_reported(tmp_path: Path) -> None:
    from murmurd.manifest.validate import validate_manifest

    def codes(capabilities: dict) -> list[tuple[str, str]]:
        _, report = validate_manifest({"name": "x", "version": "1.0.0", "capabilities": capabilities}, tmp_path, {})
        return [(d.code, d.path) for d in report.diagnostics if d.code.startswith(("E-", "W-SEC-009", "W-MAN"))]

    def grant(binary: str, dirs: list) -> dict:
        return {"shell": {"allow": ["python3"], "interpreter_runtime": [{"binary": binary, "dirs": dirs}]}}

    assert codes(grant("python3", [{"path": "/usr/lib/python3", "list_dir": True}])) == [
        ("W-SEC-009", "capabilities.shell.interpreter_runtime")]
    assert codes(grant("perl", [{"path": "/usr/lib", "list_dir": True}]))[0][1] == "capabilities.shell"
    assert codes(grant("python3", []))[0][1] == "capabilities.shell.interpreter_runtime[0].dirs"
    assert codes(grant("python3", [{"path": "lib", "list_dir": True}]))[0][1].endswith("dirs[0].path")
    assert codes(grant("python3", [{"path": "/usr/lib"}]))[0][1].endswith("dirs[0].list_dir")
    assert codes({"network": {"unix_sockets": True}}) == []  # honoured now, not a W-MAN-002


@needs_scoped
def test_explain_reports_unix_sockets_and_runtime_grants(tmp_path: Path) -> None:
    capabilities = {"network": {"unix_sockets": True}, **grant_python()}
    directory = driver_capsule(tmp_path, "scripted-driver", calls(), capabilities=capabilities)
    proc = murmurd("run", str(directory), "--task", "x", "--explain-scope", "--json")
    scope = json.loads(proc.stdout)
    assert scope["unix_sockets"] is True and scope["enforcement_tier"] == "landlock+seccomp"
    assert scope["interpreter_runtime_grants"] == [{"binary": "python3",
                                                    "dirs": [{"path": PYTHON_RUNTIME, "list_dir": True}]}]
    directory = driver_capsule(tmp_path / "b", "scripted-driver", calls(), capabilities={"shell": {"allow": ["sh"]}})
    assert json.loads(murmurd("run", str(directory), "--task", "x", "--explain-scope", "--json").stdout)[
        "unix_sockets"] is False


def grant_python() -> dict:
    return {"shell": {"allow": ["python3"], "interpreter_runtime": [
        {"binary": "python3", "dirs": [{"path": PYTHON_RUNTIME, "list_dir": True}]}]}}


@needs_scoped
@needs_debian_python
def test_an_operator_extends_the_syscall_list_and_a_wrong_name_is_refused(tmp_path: Path) -> None:
    script = "python3 -c \"import os; os.memfd_create('x'); print('memfd-made')\""
    runtime = ((PYTHON_RUNTIME, True),)
    _, out = shell(tmp_path / "wd", ["python3"], script, runtime=runtime)
    assert "memfd-made" not in out and "Operation not permitted" in out
    _, out = shell(tmp_path / "wd", ["python3"], script, runtime=runtime, seccomp_extra=("memfd_create",))
    assert "memfd-made" in out, out
    directory = driver_capsule(tmp_path, "scripted-driver", calls(), capabilities={"shell": {"allow": ["sh"]}})
    proc = subprocess.run([sys.executable, "-m", "murmurd", "validate", str(directory), "--json"], capture_output=True,
                          text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "MURMURD_SECCOMP_ALLOW": "ptrace,no_such_call"})
    (error,) = [d for d in json.loads(proc.stdout)["diagnostics"] if d["severity"] == "error"]
    assert proc.returncode == 1 and (error["code"], error["path"]) == ("E-CAP-012", "MURMURD_SECCOMP_ALLOW")
    assert "'no_such_call' is not a syscall" in error["message"]


# --------------------------------------------------------------------------- the attack, served


@needs_scoped
def test_a_served_peer_task_cannot_read_the_operators_prompt_from_the_state_or_its_session(tmp_path: Path,
                                                                                            artifacts) -> None:
    """The attack of issue 22: a peer's task greps the daemon's task store and the operator
    task's session directory for the operator's prompt. Under scoped both reads are refused."""
    from a2akit import serving
    from hookkit import end_turn, tool_call

    artifacts.example("scripted-driver")
    state = tmp_path / "state"
    rules = [
        {"when": "Permission denied", "response": end_turn("refused")},
        {"when": "Exit code: 0", "response": end_turn("stolen")},
        {"when": "steal from ", "response": tool_call("g", "grep", {"command": "__TARGETS__"})},
        {"when": "SECRET-4711", "response": end_turn("noted")},
    ]
    capsule = driver_capsule(tmp_path, "scripted-driver", {"rules": rules, "responses": []},
                             capabilities={"shell": {"allow": ["grep"]}},
                             lifecycle={"task_acceptance": "queue", "after_task": "sleep"})
    with serving(capsule, state) as served:
        operator = served.send("the operator's prompt: SECRET-4711", contextId="ctx_operator")
        assert served.wait_state(operator["id"], "completed")["status"]["response"] == "noted"
        session = next(e["task_session_id"] for e in served.trace()
                       if e["event_type"] == "a2a_task_session" and e["task_id"] == operator["id"])
        targets = [p for p in sorted(state.rglob("*")) if p.is_file()][:20]
        targets += [p for p in sorted((served.capsule / "workdir" / session).rglob("*")) if p.is_file()][:20]
        assert any("SECRET-4711" in p.read_bytes().decode("latin-1") for p in targets)  # it is there to find
        command = "-a -l SECRET-4711 " + " ".join(str(p) for p in targets)
        rules[2]["response"] = tool_call("g", "grep", {"command": command})
    # the rules now name the files: a peer's daemon on the same state, confined, then unconfined
    for name, env, verdict in (("peer", None, "refused"), ("control", UNCONFINED, "stolen")):
        peer_capsule = driver_capsule(tmp_path / name, "scripted-driver", {"rules": rules, "responses": []},
                                      capabilities={"shell": {"allow": ["grep"]}},
                                      lifecycle={"task_acceptance": "queue", "after_task": "sleep"})
        with serving(peer_capsule, state, env=env) as served:
            peer = served.send("steal from the operator", contextId="ctx_peer")
            assert served.wait_state(peer["id"], "completed")["status"]["response"] == verdict, name
