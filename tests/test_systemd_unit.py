"""deploy/murmurd@.service as shipped (issue 24 item 6): a fixed --port, its user and directories
made by systemd (sysusers.d, tmpfiles.d, StateDirectory=/CacheDirectory=), arguments `murmurd
serve` accepts, and hardened until `systemd-analyze security` rates it 3.0 or better. The real
systemd tools judge it (.ci/run installs Debian's `systemd` package when they are missing)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from murmurd.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "murmurd@.service"
MAX_EXPOSURE = 3.0


def settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def exec_args(instance: str = "hello") -> list[str]:
    """ExecStart's arguments as systemd passes them (specifiers and ${VAR} from Environment=)."""
    unit = settings()
    env = dict(e.split("=", 1) for e in unit["Environment"])
    (command,) = unit["ExecStart"]
    command = command.replace("%i", instance).replace("%d", f"/run/credentials/murmurd@{instance}.service")
    command = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], command)
    return shlex.split(command)


def test_the_unit_serves_a_fixed_port_in_systemds_directories() -> None:
    unit = settings()
    argv = exec_args()
    assert argv[0] == "/opt/murmurd/.venv/bin/murmurd"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve" and args.port == 8080  # fixed: never an OS-assigned port
    assert args.after_task is None and args.task_acceptance is None  # serve's rule: queue + sleep
    assert unit["StateDirectory"] == ["murmurd/%i"] and args.state_dir == "/var/lib/murmurd/hello"
    assert unit["CacheDirectory"] == ["murmurd"] and "MURMUR_CACHE_DIR=/var/cache/murmurd" in unit["Environment"]
    assert unit["EnvironmentFile"] == ["-/etc/murmurd/%i.env"]  # each instance's own MURMURD_PORT
    assert unit["User"] == ["murmurd"] and args.token_file == "/run/credentials/murmurd@hello.service/token"


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None or shutil.which("systemd-tmpfiles") is None,
                    reason="systemd's tools are not installed (.ci/run installs them)")
def test_sysusers_and_tmpfiles_make_the_user_and_directories(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    made = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(DEPLOY / "murmurd.sysusers")],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    (entry,) = [line for line in passwd.splitlines() if line.startswith("murmurd:")]
    uid = int(entry.split(":")[2])
    assert 0 < uid < 1000 and entry.endswith(":/usr/sbin/nologin")
    dirs = subprocess.run(["systemd-tmpfiles", f"--root={tmp_path}", "--create", str(DEPLOY / "murmurd.tmpfiles")],
                          capture_output=True, text=True, timeout=60)
    assert dirs.returncode == 0, dirs.stderr
    capsules = (tmp_path / "srv" / "capsules").stat()
    assert capsules.st_uid == uid and oct(capsules.st_mode & 0o777) == "0o750"
    assert oct((tmp_path / "etc" / "murmurd").stat().st_mode & 0o777) == "0o700"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (.ci/run installs it)")
def test_systemd_analyze_security_rates_the_unit_3_or_better(tmp_path: Path) -> None:
    instance = tmp_path / "murmurd@hello.service"
    instance.write_text(UNIT.read_text())
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(instance)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    match = re.search(r"Overall exposure level for murmurd@hello\.service: ([0-9.]+)", text)
    assert match, text
    assert float(match.group(1)) <= MAX_EXPOSURE, text
    # what murmurd itself needs stays allowed: the hardening must not break the daemon
    unit = settings()
    assert "MemoryDenyWriteExecute" not in unit  # wasmtime writes machine code
    assert unit["RestrictNamespaces"] == ["user net"]  # each shell child's namespaces
    allowed = unit["SystemCallFilter"][0].split()
    assert {"@system-service", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
            "seccomp"} <= set(allowed)
    assert "@resources" not in unit["SystemCallFilter"][1]  # setrlimit: the shell rlimits
