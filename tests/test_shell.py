"""The shell runner, with real subprocesses: allowlist, argv, environment, output, timeouts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prockit import alive, read_pid, wait_gone
from murmurd.host.interrupt import CallGuard
from murmurd.session import shell_watchdog
from murmurd.session.shell import TIMEOUT_EXIT_CODE, display_command, prepare_shell, run_shell, split_command
from murmurd.session.shell_env import child_environment
from murmurd.session.shell_model import (
    MAX_STREAM_BYTES,
    ShellCanceled,
    ShellFailed,
    ShellOutcome,
    ShellPolicy,
    ShellRefused,
)
from murmurd.session.shell_output import format_shell_result

ALLOW = frozenset({"echo", "printf", "sh", "env", "python3", "sleep"})

HOST_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "LANG": "C.UTF-8",
    "USER": "tester",
    "OPENAI_API_KEY": "sk-test-not-real",
    "MY_SECRET": "hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws-not-real",
    "GITHUB_TOKEN": "ghp_not_real",
    "DB_PASSWORD": "pw",
    "EDITOR": "vi",
    "LD_PRELOAD": "/tmp/evil.so",
    "HOME": "/root",
}


@pytest.fixture()
def policy(tmp_path: Path) -> ShellPolicy:
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    return ShellPolicy(allow=ALLOW, workdir=workdir, timeout_seconds=30)


def child_env(outcome: ShellOutcome) -> dict[str, str]:
    return dict(line.split("=", 1) for line in outcome.stdout.splitlines() if "=" in line)


# --------------------------------------------------------------------------- allowlist


def test_an_unlisted_binary_is_refused_before_spawning(policy: ShellPolicy, tmp_path: Path) -> None:
    marker = tmp_path / "touched"
    with pytest.raises(ShellRefused, match=r"'touch' is not in capabilities\.shell\.allow"):
        run_shell(policy, "touch", [str(marker)], host_env=HOST_ENV)
    assert not marker.exists()


@pytest.mark.parametrize("binary", ["/bin/echo", "/usr/bin/echo", "./echo", "bin/echo", "../echo"])
def test_a_path_is_refused_even_for_an_allowed_name(policy: ShellPolicy, binary: str) -> None:
    with pytest.raises(ShellRefused, match="bare name"):
        run_shell(policy, binary, ["hi"], host_env=HOST_ENV)


def test_an_empty_binary_is_refused(policy: ShellPolicy) -> None:
    with pytest.raises(ShellRefused):
        run_shell(policy, "", [], host_env=HOST_ENV)


def test_an_allowed_name_missing_from_path_fails_to_spawn(tmp_path: Path) -> None:
    policy = ShellPolicy(allow={"no-such-binary-murmurd"}, workdir=tmp_path)
    invocation = prepare_shell(policy, "no-such-binary-murmurd", [], host_env=HOST_ENV)
    assert invocation.binary_path == "no-such-binary-murmurd"  # the bare name when nothing resolved
    with pytest.raises(ShellFailed, match="not found on PATH"):
        run_shell(policy, "no-such-binary-murmurd", [], host_env=HOST_ENV)


def test_the_resolved_binary_is_canonical_and_absolute(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "echo", ["x"], host_env=HOST_ENV)
    which = shutil.which("echo", path=HOST_ENV["PATH"])
    assert which is not None
    assert outcome.binary_path == os.path.realpath(which)
    assert os.path.isabs(outcome.binary_path)
    assert outcome.argv == ["echo", "x"]


def test_a_guest_path_override_cannot_redirect_an_allowed_name(policy: ShellPolicy) -> None:
    fake_bin = policy.workdir / "bin"
    fake_bin.mkdir()
    fake_echo = fake_bin / "echo"
    fake_echo.write_text("#!/bin/sh\nprintf 'HIJACKED\\n'\n")
    fake_echo.chmod(0o755)
    outcome = run_shell(policy, "echo", ["real"], env_overrides=[("PATH", str(fake_bin))], host_env=HOST_ENV)
    assert outcome.stdout == "real\n"
    assert outcome.binary_path != str(fake_echo)


# --------------------------------------------------------------------------- argv


def test_arguments_reach_the_program_without_shell_interpretation(policy: ShellPolicy) -> None:
    args, script = split_command("echo", "'a; rm -rf x' $HOME `id` *")
    assert script is None
    assert args == ["a; rm -rf x", "$HOME", "`id`", "*"]
    outcome = run_shell(policy, "echo", args, host_env=HOST_ENV)
    assert outcome.stdout == "a; rm -rf x $HOME `id` *\n"
    assert outcome.exit_code == 0


def test_python_receives_the_exact_argv(policy: ShellPolicy) -> None:
    args = ["-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "two words", "$X", "", "a\nb"]
    outcome = run_shell(policy, "python3", args, host_env=HOST_ENV)
    assert outcome.stdout.strip() == '["two words", "$X", "", "a\\nb"]'


def test_a_shell_interpreter_runs_its_script(policy: ShellPolicy) -> None:
    args, script = split_command("sh", "echo one; echo $HOME | tr a-z A-Z")
    assert args == ["-c", "echo one; echo $HOME | tr a-z A-Z"]
    assert script == "echo one; echo $HOME | tr a-z A-Z"
    outcome = run_shell(policy, "sh", args, host_env=HOST_ENV)
    assert outcome.stdout.splitlines() == ["one", str(policy.home).upper()]


@pytest.mark.parametrize("interpreter", ["bash", "sh", "dash", "zsh", "ksh", "fish"])
def test_every_shell_interpreter_gets_dash_c(interpreter: str) -> None:
    assert split_command(interpreter, "ls | wc -l") == (["-c", "ls | wc -l"], "ls | wc -l")


def test_splitting_follows_posix_words_without_comments() -> None:
    assert split_command("printf", '"%s\\n" a\\ b \'c d\' # e') == (["%s\\n", "a b", "c d", "#", "e"], None)
    with pytest.raises(ShellRefused, match="cannot split"):
        split_command("echo", "'unbalanced")


def test_the_working_directory_is_the_workdir(policy: ShellPolicy) -> None:
    (policy.workdir / "here.txt").write_text("x")
    outcome = run_shell(policy, "python3", ["-c", "import os; print(os.getcwd()); print(os.listdir())"], host_env=HOST_ENV)
    cwd, listing = outcome.stdout.splitlines()
    assert Path(cwd).resolve() == policy.workdir.resolve()
    assert "here.txt" in listing


def test_stdin_is_empty(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "python3", ["-c", "import sys; print(repr(sys.stdin.read()))"], host_env=HOST_ENV)
    assert outcome.stdout == "''\n"


# --------------------------------------------------------------------------- environment


def test_credentials_never_reach_the_child_while_path_does(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "env", [], host_env=HOST_ENV)
    env = child_env(outcome)
    for name in ("OPENAI_API_KEY", "MY_SECRET", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD"):
        assert name not in env
    assert "sk-test-not-real" not in outcome.stdout and "hunter2" not in outcome.stdout
    assert env["PATH"] == HOST_ENV["PATH"]
    assert env["LANG"] == "C.UTF-8" and env["USER"] == "tester"
    # Not in the default baseline.
    assert "EDITOR" not in env and "LD_PRELOAD" not in env


def test_home_is_the_capsule_home_and_it_is_created(policy: ShellPolicy) -> None:
    assert policy.home == policy.workdir / ".capsule-home"
    assert not policy.home.exists()
    outcome = run_shell(policy, "env", [], host_env=HOST_ENV)
    assert child_env(outcome)["HOME"] == str(policy.workdir / ".capsule-home")
    assert policy.home.is_dir()


def test_baseline_globs_select_host_variables(policy: ShellPolicy) -> None:
    wide = ShellPolicy(allow=ALLOW, workdir=policy.workdir, baseline_env=("PATH", "LD_*", "ED*", "*_TOKEN"))
    env = child_environment(wide, host_env=HOST_ENV)
    assert env["EDITOR"] == "vi" and env["LD_PRELOAD"] == "/tmp/evil.so"
    assert "GITHUB_TOKEN" not in env  # a credential is never passed, whatever a glob says
    assert env["LANG"] == HOST_ENV["LANG"]  # baseline_env adds to the default baseline (upstream)


def test_baseline_env_adds_to_the_default_and_a_named_variable_passes(policy: ShellPolicy) -> None:
    """Upstream's own example: `baseline_env: [DATABASE_URL]` hands the child the database URL
    and still a PATH; upstream's built-in strips and `strip_env` win even over a named variable."""
    host = {**LEAKY_HOST_ENV, "DATABASE_URL": "postgres://app:pw@db.internal/app", "OPENAI_API_KEY": "sk-x",
            "AWS_SECRET_ACCESS_KEY": "aws-secret"}
    named = ShellPolicy(allow=ALLOW, workdir=policy.workdir,
                        baseline_env=("DATABASE_URL", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"),
                        strip_env=("PGPASS*",))
    outcome = run_shell(named, "env", [], host_env=host)
    env = child_env(outcome)
    assert env["DATABASE_URL"] == "postgres://app:pw@db.internal/app"
    assert env["PATH"] == host["PATH"] and env["LANG"] == host["LANG"]
    assert "OPENAI_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "PGPASSWORD" not in env
    assert "aws-secret" not in outcome.stdout and "pg-secret-1" not in outcome.stdout
    # a glob naming it is no explicit choice: the credential rule still drops it
    globbed = ShellPolicy(allow=ALLOW, workdir=policy.workdir, baseline_env=("DATABASE_*",))
    assert "DATABASE_URL" not in child_environment(globbed, host_env=host)


LEAKY_HOST_ENV = {
    **HOST_ENV,
    "PGPASSWORD": "pg-secret-1",
    "MYSQL_PWD": "mysql-secret-2",
    "DATABASE_URL": "postgres://db.internal/app",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/secret-3",
    "SENTRY_DSN": "https://secret-4@o1.ingest.sentry.io/1",
    "HTTPS_PROXY": "http://proxyuser:secret-5@proxy:3128",
    "PWD": "/srv/murmurd",
}


def test_a_star_baseline_passes_no_credential_by_name_or_value(policy: ShellPolicy) -> None:
    everything = ShellPolicy(allow=ALLOW, workdir=policy.workdir, baseline_env=("*",))
    outcome = run_shell(everything, "env", [], host_env=LEAKY_HOST_ENV)
    env = child_env(outcome)
    for name in ("PGPASSWORD", "MYSQL_PWD", "DATABASE_URL", "SLACK_WEBHOOK_URL", "SENTRY_DSN", "HTTPS_PROXY"):
        assert name not in env
    assert "secret" not in outcome.stdout and "db.internal" not in outcome.stdout
    assert env["EDITOR"] == "vi" and env["LANG"] == "C.UTF-8"  # the `*` baseline did apply


def test_a_credential_override_is_dropped_by_value_too(policy: ShellPolicy) -> None:
    env = child_environment(policy, [("UPSTREAM", "https://u:p@example.com/"), ("GREETING", "hi")], HOST_ENV)
    assert "UPSTREAM" not in env and env["GREETING"] == "hi"


def test_strip_env_globs_are_honoured(policy: ShellPolicy) -> None:
    stripping = ShellPolicy(
        allow=ALLOW, workdir=policy.workdir, baseline_env=("*",), strip_env=("LD_*", "LAN?")
    )
    outcome = run_shell(stripping, "env", [], env_overrides=[("LD_LIBRARY_PATH", "/x"), ("FOO", "1")], host_env=HOST_ENV)
    env = child_env(outcome)
    assert "LD_PRELOAD" not in env and "LD_LIBRARY_PATH" not in env and "LANG" not in env
    assert env["EDITOR"] == "vi" and env["FOO"] == "1"
    assert env["HOME"] == str(stripping.home)  # the host's HOME never leaks through a wide baseline
    assert "OPENAI_API_KEY" not in env


def test_overrides_are_applied_but_credentials_and_home_are_not(policy: ShellPolicy) -> None:
    outcome = run_shell(
        policy,
        "env",
        [],
        env_overrides=[("GREETING", "hello world"), ("SERVICE_API_KEY", "leak"), ("HOME", "/etc")],
        host_env=HOST_ENV,
    )
    env = child_env(outcome)
    assert env["GREETING"] == "hello world"
    assert "SERVICE_API_KEY" not in env and "leak" not in outcome.stdout
    assert env["HOME"] == str(policy.home)


@pytest.mark.parametrize("pair", [("", "x"), ("A=B", "x"), ("A", "x\x00y")])
def test_a_malformed_override_is_refused(policy: ShellPolicy, pair: tuple[str, str]) -> None:
    with pytest.raises(ShellRefused):
        run_shell(policy, "env", [], env_overrides=[pair], host_env=HOST_ENV)


def test_from_capability_reads_the_manifest_block(tmp_path: Path) -> None:
    from murmurd.manifest.capsule import ShellCapability

    capability = ShellCapability(allow=["echo"], strip_env=["LD_*"], baseline_env=[])
    built = ShellPolicy.from_capability(capability, tmp_path, timeout_seconds=5)
    assert built.allow == frozenset({"echo"}) and built.strip_env == ("LD_*",)
    assert built.baseline_env is None and built.timeout_seconds == 5
    assert built.logs_dir == tmp_path / "logs"


# --------------------------------------------------------------------------- outcomes


def test_a_non_zero_exit_is_data(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "sh", ["-c", "echo out; echo err >&2; exit 7"], host_env=HOST_ENV)
    assert outcome.exit_code == 7
    assert outcome.stdout == "out\n" and outcome.stderr == "err\n"
    assert outcome.stdout_bytes == 4 and outcome.stderr_bytes == 4
    assert outcome.truncated is False and outcome.full_output_path is None
    assert not (policy.workdir / "logs").exists()


def test_death_by_signal_reports_128_plus_the_signal(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "sh", ["-c", "kill -9 $$"], host_env=HOST_ENV)
    assert outcome.exit_code == 137 and not outcome.timed_out


def test_each_stream_is_cut_at_16_kib_and_the_full_log_keeps_everything(policy: ShellPolicy) -> None:
    code = (
        "import sys\n"
        "sys.stdout.write(''.join(f'line {i:05d}\\n' for i in range(4000)))\n"  # 44,000 bytes
        "sys.stderr.write('E' * 20000 + 'TAIL')\n"
    )
    outcome = run_shell(policy, "python3", ["-c", code], host_env=HOST_ENV)
    assert outcome.truncated is True
    assert outcome.stdout_bytes == 44_000 and outcome.stderr_bytes == 20_004
    assert len(outcome.stdout.encode()) == MAX_STREAM_BYTES == 16 * 1024
    assert len(outcome.stderr.encode()) == MAX_STREAM_BYTES
    assert outcome.stdout.startswith("line 00000\n") and "line 03999" not in outcome.stdout
    assert "TAIL" not in outcome.stderr
    path = outcome.full_output_path
    assert path is not None and path.startswith("logs/shell-") and path.endswith(".log")
    log = (policy.workdir / path).read_bytes()
    stdout_part = "".join(f"line {i:05d}\n" for i in range(4000)).encode()
    assert b"==> stdout (44000 bytes) <==\n" + stdout_part in log
    assert b"==> stderr (20004 bytes) <==\n" + b"E" * 20000 + b"TAIL" in log
    assert log.index(b"==> stdout") < log.index(b"==> stderr")


def test_only_the_long_stream_needs_to_pass_the_limit(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "sh", ["-c", "echo small >&2; head -c 20000 /dev/zero | tr '\\0' z"], host_env=HOST_ENV)
    assert outcome.truncated and outcome.stderr == "small\n"
    log = (policy.workdir / str(outcome.full_output_path)).read_bytes()
    assert b"==> stderr (6 bytes) <==\nsmall\n" in log and b"z" * 20000 in log


def test_exactly_16_kib_is_not_truncated(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "python3", ["-c", f"print('x' * {16 * 1024 - 1})"], host_env=HOST_ENV)
    assert outcome.stdout_bytes == 16 * 1024 and outcome.truncated is False


def test_the_cut_never_splits_a_utf8_character(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "python3", ["-c", "print('x' + 'é' * 10000)"], host_env=HOST_ENV)
    assert outcome.truncated
    assert "\ufffd" not in outcome.stdout
    assert outcome.stdout == "x" + "é" * ((16 * 1024 - 1) // 2)


def test_two_truncated_calls_get_two_logs(policy: ShellPolicy) -> None:
    args = ["-c", "print('y' * 20000)"]
    first = run_shell(policy, "python3", args, host_env=HOST_ENV)
    second = run_shell(policy, "python3", args, host_env=HOST_ENV)
    assert first.full_output_path != second.full_output_path
    assert len(list((policy.workdir / "logs").glob("shell-*.log"))) == 2


def test_the_log_is_capped_per_stream(tmp_path: Path) -> None:
    capped = ShellPolicy(allow=ALLOW, workdir=tmp_path, max_stream_bytes=100, max_log_stream_bytes=1000)
    outcome = run_shell(capped, "python3", ["-c", "print('q' * 5000)"], host_env=HOST_ENV)
    assert outcome.stdout_bytes == 5001 and len(outcome.stdout) == 100
    log = (tmp_path / str(outcome.full_output_path)).read_bytes()
    stdout_section = log[log.index(b"==> stdout") : log.index(b"==> stderr")]
    assert stdout_section.count(b"q") == 1000
    assert b"4001 more stdout bytes not kept" in log


def test_a_timeout_kills_the_process_group_and_reports_124(tmp_path: Path) -> None:
    quick = ShellPolicy(allow=ALLOW, workdir=tmp_path, timeout_seconds=1)
    started = time.monotonic()
    outcome = run_shell(
        quick, "sh", ["-c", "echo started; sleep 30 & sleep 30; echo never"], host_env=HOST_ENV
    )
    assert time.monotonic() - started < 10
    assert outcome.exit_code == TIMEOUT_EXIT_CODE == 124
    assert outcome.timed_out is True
    assert outcome.stdout == "started\n"
    assert outcome.stderr.endswith("[murmurd] timed out after 1 s; the process group was killed")


def test_a_timeout_also_applies_to_a_command_that_closed_its_output(tmp_path: Path) -> None:
    quick = ShellPolicy(allow=ALLOW, workdir=tmp_path, timeout_seconds=1)
    started = time.monotonic()
    outcome = run_shell(quick, "sh", ["-c", "exec >&- 2>&-; sleep 30"], host_env=HOST_ENV)
    assert time.monotonic() - started < 10
    assert outcome.exit_code == 124 and outcome.timed_out


def test_a_background_child_holding_the_pipes_does_not_hold_the_call(policy: ShellPolicy) -> None:
    started = time.monotonic()
    outcome = run_shell(policy, "sh", ["-c", "sleep 30 & echo done"], host_env=HOST_ENV)
    assert time.monotonic() - started < 10
    assert outcome.exit_code == 0 and outcome.stdout == "done\n" and not outcome.timed_out


def test_cancel_kills_the_command(policy: ShellPolicy) -> None:
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ShellCanceled):
        run_shell(policy, "sleep", ["30"], host_env=HOST_ENV, cancel=cancel)
    assert time.monotonic() - started < 10


# A command whose process group holds two processes: the shell (pid in shell.pid) and a
# background `sleep` (pid in sleep.pid) that only a kill of the whole group reaches.
GROUP_SCRIPT = "sleep 300 & echo $! > sleep.pid; echo $$ > shell.pid; wait"


def _group_pids(workdir: Path) -> list[int]:
    return [read_pid(workdir / "shell.pid"), read_pid(workdir / "sleep.pid")]


def test_cancel_kills_a_grandchild_in_the_group_promptly(policy: ShellPolicy) -> None:
    cancel = threading.Event()
    raised: list[BaseException] = []

    def call() -> None:
        try:
            run_shell(policy, "sh", ["-c", GROUP_SCRIPT], host_env=HOST_ENV, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            raised.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    pids = _group_pids(policy.workdir)
    assert all(alive(pid) for pid in pids)
    cancel.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], ShellCanceled)
    assert wait_gone(pids, timeout=5) < 5
    assert shell_watchdog.running() == frozenset()


def test_a_call_guard_is_a_cancel_flag(policy: ShellPolicy) -> None:
    outer = CallGuard(60)
    inner = CallGuard(60, parent=outer)  # a tool the cancelled capsule invoked
    threading.Timer(0.5, outer.cancel).start()
    started = time.monotonic()
    with pytest.raises(ShellCanceled):
        run_shell(policy, "sleep", ["30"], host_env=HOST_ENV, cancel=inner)
    assert time.monotonic() - started < 10


def test_the_deadline_kills_a_grandchild_in_the_group(tmp_path: Path) -> None:
    quick = ShellPolicy(allow=ALLOW, workdir=tmp_path, timeout_seconds=2)
    outcome = run_shell(quick, "sh", ["-c", GROUP_SCRIPT], host_env=HOST_ENV)
    assert outcome.timed_out and outcome.exit_code == TIMEOUT_EXIT_CODE
    wait_gone(_group_pids(tmp_path), timeout=5)


def test_a_background_job_does_not_outlive_its_call(policy: ShellPolicy) -> None:
    outcome = run_shell(
        policy, "sh", ["-c", "sleep 300 >/dev/null 2>&1 & echo $! > sleep.pid"], host_env=HOST_ENV
    )
    assert outcome.exit_code == 0 and not outcome.timed_out
    wait_gone([read_pid(policy.workdir / "sleep.pid")], timeout=5)


def test_kill_running_ends_every_running_shell_group(policy: ShellPolicy) -> None:
    """The shutdown backstop: a shell no cancel reached is killed, group and all."""
    outcomes: list[ShellOutcome] = []
    worker = threading.Thread(
        target=lambda: outcomes.append(run_shell(policy, "sh", ["-c", GROUP_SCRIPT], host_env=HOST_ENV))
    )
    worker.start()
    pids = _group_pids(policy.workdir)
    assert pids[0] in shell_watchdog.running()
    assert shell_watchdog.kill_running() >= 1
    worker.join(timeout=10)
    assert not worker.is_alive() and outcomes[0].exit_code == 128 + 9
    wait_gone(pids, timeout=5)
    assert pids[0] not in shell_watchdog.running()


def _kill_and_expect_no_survivor(program: str, tmp_path: Path) -> None:
    """Run `program` as a stand-in murmurd that starts GROUP_SCRIPT in `tmp_path`, SIGKILL it
    once the group is up, and require every process of the group to be gone."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    murmurd = subprocess.Popen([sys.executable, "-c", program, str(tmp_path), GROUP_SCRIPT], env=env)
    try:
        pids = _group_pids(tmp_path)
        assert all(alive(pid) for pid in pids)
        murmurd.kill()
        murmurd.wait(timeout=10)
        wait_gone(pids, timeout=10)
    finally:
        if murmurd.poll() is None:
            murmurd.kill()
            murmurd.wait(timeout=10)


def test_a_killed_murmurd_leaves_no_shell_behind(tmp_path: Path) -> None:
    """SIGKILL of the process running the shell (on a worker thread, as murmurd does): the
    whole group dies, the grandchild too, which the parent-death signal alone would miss."""
    program = (
        "import sys, threading\n"
        "from pathlib import Path\n"
        "from murmurd.session.shell import run_shell\n"
        "from murmurd.session.shell_model import ShellPolicy\n"
        "policy = ShellPolicy(allow={'sh'}, workdir=Path(sys.argv[1]), timeout_seconds=300)\n"
        "worker = threading.Thread(target=run_shell, args=(policy, 'sh', ['-c', sys.argv[2]]))\n"
        "worker.start(); worker.join()\n"
    )
    _kill_and_expect_no_survivor(program, tmp_path)


def test_a_group_is_known_to_the_watchdog_before_its_command_runs(tmp_path: Path) -> None:
    """The confinement helper announces its own group before it execs the command: a murmurd
    killed before its `register` ran still leaves no grandchild behind (here `register` never
    runs at all)."""
    program = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from murmurd.session.shell import prepare_shell\n"
        "from murmurd.session.shell_model import ShellPolicy\n"
        "from murmurd.session.shell_spawn import spawn_confined\n"
        "policy = ShellPolicy(allow={'sh'}, workdir=Path(sys.argv[1]))\n"
        "spawn_confined(policy, prepare_shell(policy, 'sh', ['-c', sys.argv[2]]))\n"
        "time.sleep(300)\n"
    )
    _kill_and_expect_no_survivor(program, tmp_path)


# --------------------------------------------------------------------------- what the model and traces see


def test_format_shell_result(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "sh", ["-c", "echo hi; echo oops >&2; exit 2"], host_env=HOST_ENV)
    assert format_shell_result("echo hi; echo oops >&2; exit 2", outcome) == (
        "$ echo hi; echo oops >&2; exit 2\nExit code: 2\nStdout:\nhi\nStderr:\noops"
    )


def test_format_shell_result_names_the_full_log_when_cut(policy: ShellPolicy) -> None:
    outcome = run_shell(policy, "python3", ["-c", "print('z' * 20000)"], host_env=HOST_ENV)
    text = format_shell_result("python3 -c ...", outcome)
    assert text.startswith("$ python3 -c ...\nExit code: 0\nStdout:\nzzz")
    assert text.endswith(f"[Output was cut; the full output is in {outcome.full_output_path}]")
    assert "\nStderr:\n" in text


def test_display_command() -> None:
    assert display_command(["-la", "my dir"]) == "-la 'my dir'"
    assert display_command(["-c", "echo hi"], script="echo hi") == "echo hi"
    long = display_command(["x" * 500])
    assert len(long) == 200 and long.endswith("…")
    assert len(display_command(["-c", "y" * 200], script="y" * 200)) == 200


def test_a_policy_rejects_nonsense_limits(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ShellPolicy(allow=ALLOW, workdir=tmp_path, timeout_seconds=0)


def test_a_symlinked_logs_dir_is_refused(policy: ShellPolicy, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, policy.workdir / "logs")
    with pytest.raises(ShellFailed, match="'logs': is a symlink"):
        run_shell(policy, "python3", ["-c", "print('w' * 20000)"], host_env=HOST_ENV)
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_capsule_home_is_refused(policy: ShellPolicy, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, policy.home)
    with pytest.raises(ShellFailed, match="cannot create HOME .*'.capsule-home': is a symlink"):
        run_shell(policy, "python3", ["-c", "open('planted', 'w')"], host_env=HOST_ENV)
    assert list(elsewhere.iterdir()) == []
