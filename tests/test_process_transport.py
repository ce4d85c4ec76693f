"""`inference.transport: process` with the real CLIs (issue 27): Claude Code and codex, each
against a loopback stand-in of its provider that scripts the model, reaching the capsule's WASM
tool over murmurd's per-session MCP server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import clikit
from conftest import EXAMPLES
from murmurd import ids
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.stage import StagedCapsule, StagingError, stage_capsule

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(clikit.missing_reason() is not None,
                                                     reason=str(clikit.missing_reason()))]

ECHO = {"name": "echo", "runtime": "tool", "source": str(EXAMPLES / "echo"), "local_source": True}
ARGS = {"text": "hello from the model"}


def process_capsule(root: Path, command: str, *, max_turns: int = 6, artifacts: list[dict] | None = None,
                    model: str | None = None, provider: str | None = None, **extra: Any) -> Path:
    """A process-transport capsule; `provider` (the stand-in's origin) is named in network.allow:
    the CLI's network reaches only the provider origins the manifest allows (and its MCP bridge)."""
    directory = root / "capsule"
    directory.mkdir(parents=True, exist_ok=True)
    inference: dict[str, Any] = {"transport": "process", "command": command, "max_turns": max_turns}
    if model:
        inference["model"] = model
    if provider is not None:
        capabilities = extra.setdefault("capabilities", {})
        capabilities.setdefault("network", {})["allow"] = [provider]
    manifest = {"name": "cli-agent", "version": "0.1.0", "artifacts": artifacts if artifacts is not None else [ECHO],
                "inference": inference, **extra}
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


async def run_task(capsule: Path, env: dict[str, str], host: ComponentHost, workdir: Path,
                   text: str = "Echo something, then tell me what the tool said.") -> tuple[StagedCapsule, TaskOutcome]:
    staged = stage_capsule(capsule, host=host, workdir=workdir, env=env)
    session = Session(staged, host)
    await session.open()
    try:
        outcome = await session.run_task(TaskSpec(ids.new_task_id(), text, context_id=ids.new_context_id()))
    finally:
        await session.close()
    return staged, outcome


def trace(staged: StagedCapsule) -> list[dict[str, Any]]:
    path = staged.workdir.root / staged.workdir.book("trace.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cli_setup(tmp_path: Path, script: clikit.ModelScript, dialect: str) -> tuple[dict[str, str], str]:
    bin_dir = tmp_path / "bin"
    target = clikit.claude_binary() if dialect == "claude" else clikit.codex_binary()
    clikit.linked_bin(bin_dir, dialect, target)
    return clikit.cli_env(tmp_path / "home", script, bin_dir), dialect


@pytest.mark.parametrize("dialect", ["claude", "codex"])
async def test_the_model_calls_a_wasm_tool_over_mcp_and_its_answer_is_the_result(
        tmp_path: Path, host: ComponentHost, dialect: str) -> None:
    with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
        env, command = cli_setup(tmp_path, script, dialect)
        model = clikit.CODEX_MODEL if dialect == "codex" else None
        staged, outcome = await run_task(process_capsule(tmp_path, command, model=model, provider=script.origin), env, host,
                                         tmp_path / "wd")
    assert outcome.ok, (outcome.error, script.problems)
    assert outcome.result_text.startswith(clikit.ANSWER_PREFIX)
    assert "hello from the model" in outcome.result_text  # the tool's output came back to the model
    assert (staged.workdir.root / staged.workdir.book("out/result.txt")).read_text() == outcome.result_text
    events = trace(staged)
    kinds = [e["event_type"] for e in events]
    assert kinds[0] == "task_start" and kinds[-1] == "task_end"
    calls = [e for e in events if e["event_type"] == "tool_call"]
    assert [(c["tool_name"], c["status"], c["input"]) for c in calls] == [("echo", "ok", ARGS)]
    inferences = [e for e in events if e["event_type"] == "inference"]
    assert [i["decision"] for i in inferences] == ["tool_call", "end_turn"]
    assert all(i["input_tokens"] == 0 and i["output_tokens"] == 0 for i in inferences)
    start = next(e for e in events if e["event_type"] == "session_start")
    assert start["tools_declared"] == ["echo"]
    end = next(e for e in events if e["event_type"] == "session_end")
    assert end["exit_status"] == "ok" and end["total_input_tokens"] == 0


@pytest.mark.parametrize("dialect", ["claude", "codex"])
async def test_max_turns_stops_a_model_that_keeps_calling_tools(tmp_path: Path, host: ComponentHost,
                                                                 dialect: str) -> None:
    with clikit.model_standin(clikit.ModelScript("echo", ARGS, always_call=True)) as script:
        env, command = cli_setup(tmp_path, script, dialect)
        model = clikit.CODEX_MODEL if dialect == "codex" else None
        staged, outcome = await run_task(process_capsule(tmp_path, command, max_turns=2, model=model, provider=script.origin),
                                         env, host,
                                         tmp_path / "wd")
    assert outcome.exit_status == "failed"
    assert outcome.error is not None and outcome.error.startswith("max_turns (2) exceeded")
    assert outcome.counters.turns == 3  # the third counted response is the overrun
    result = (staged.workdir.root / staged.workdir.book("out/result.txt")).read_text()
    assert result.startswith("error: max_turns (2) exceeded")
    events = trace(staged)
    assert [e["exit_status"] for e in events if e["event_type"] == "session_end"] == ["failed"]
    assert len([e for e in events if e["event_type"] == "inference"]) == 2


async def test_a_deny_hook_refuses_a_shell_call_made_over_mcp(tmp_path: Path, host: ComponentHost) -> None:
    hook = {"name": "policy-hook", "runtime": "hook", "source": str(EXAMPLES / "policy-hook"), "local_source": True}
    with clikit.model_standin(clikit.ModelScript("rm", {"command": "-rf important"})) as script:
        env, command = cli_setup(tmp_path, script, "claude")
        capsule = process_capsule(tmp_path, command, artifacts=[ECHO, hook], capabilities={"shell": {"allow": ["rm"]}},
                                  provider=script.origin)
        (tmp_path / "wd").mkdir()
        (tmp_path / "wd" / "important").write_text("keep me")
        staged, outcome = await run_task(capsule, env, host, tmp_path / "wd")
    assert outcome.ok, outcome.error
    assert outcome.result_text == clikit.ANSWER_PREFIX + "denied by hook policy-hook: policy-hook: rm is not allowed"
    assert (tmp_path / "wd" / "important").read_text() == "keep me"
    events = trace(staged)
    denials = [e for e in events if e["event_type"] == "call_denied"]
    assert [(e["hook_name"], e["tool_name"], e["kind"]) for e in denials] == [("policy-hook", "rm", "shell")]
    assert not [e for e in events if e["event_type"] == "shell"]  # nothing ran
    start = next(e for e in events if e["event_type"] == "session_start")
    assert start["tools_declared"] == ["echo", "rm"]  # the shell allowlist is offered too


@pytest.mark.parametrize("command", ["claude-not-installed", "codex"])
def test_a_missing_command_fails_pre_flight_before_anything_is_staged(tmp_path: Path, host: ComponentHost,
                                                                      command: str) -> None:
    capsule = process_capsule(tmp_path, command)
    env = {"PATH": str(tmp_path / "empty-bin"), "HOME": str(tmp_path)}
    with pytest.raises(StagingError) as raised:
        stage_capsule(capsule, host=host, workdir=tmp_path / "wd", env=env)
    text = str(raised.value)
    assert f"error[E-RUN-006]: inference.command '{command}' not found on PATH" in text
    hint = "https://developers.openai.com/codex/cli" if command == "codex" else "https://claude.ai/download"
    assert f"hint: install the {'codex' if command == 'codex' else 'claude'} CLI from {hint}" in text
    assert not (tmp_path / "wd").exists()


def cli_processes(root: Path) -> list[int]:
    """Live processes spawned as a process-transport CLI beneath `root`: their TMPDIR is a
    session workdir's `.capsule-home/tmp` (murmurd's own processes have no such TMPDIR); a
    wrapper's children inherit it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        tmpdirs = [e for e in environ if e.startswith(f"TMPDIR={root}".encode()) and e.endswith(b".capsule-home/tmp")]
        if tmpdirs and state != b"Z":
            found.append(int(entry))
    return found


async def test_cancel_leaves_no_process_of_the_cli_behind_even_the_npm_node_wrapper(
        tmp_path: Path, host: ComponentHost) -> None:
    import asyncio

    with clikit.model_standin(clikit.ModelScript("echo", ARGS, always_call=True)) as script:
        bin_dir = tmp_path / "bin"
        clikit.linked_bin(bin_dir, "codex", clikit.codex_wrapper())  # node bin/codex.js -> native codex child
        env = clikit.cli_env(tmp_path / "home", script, bin_dir)
        capsule = process_capsule(tmp_path, "codex", max_turns=10_000, model=clikit.CODEX_MODEL, provider=script.origin)
        staged = stage_capsule(capsule, host=host, workdir=tmp_path / "wd", env=env)
        session = Session(staged, host)
        await session.open()
        run = asyncio.create_task(session.run_task(TaskSpec(ids.new_task_id(), "loop", context_id=ids.new_context_id())))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while script.model_calls("/v1/responses") < 2:  # the native codex is running its loop
            assert loop.time() < deadline and not run.done(), script.problems
            await asyncio.sleep(0.05)
        tree = cli_processes(tmp_path)
        assert len(tree) >= 2  # the node wrapper and the native codex
        for pid in tree:  # the CLI's environment is narrowed: murmurd's other secrets stay in murmurd
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [e for e in environ if e.startswith(b"UNRELATED_SECRET_TOKEN=")]
            assert f"CODEX_HOME={tmp_path / 'home' / '.codex'}".encode() in environ
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await session.close()
        assert cli_processes(tmp_path) == []  # an orphaned native codex would still be here
    events = trace(staged)
    assert [e["exit_status"] for e in events if e["event_type"] == "task_end"] == ["failed"]


@pytest.mark.parametrize(("dialect", "script", "expected"), [
    ("claude", "echo 'Segmentation fault'\nexit 0\n",
     "claude: malformed JSON on subprocess stdout: Expecting value: line 1 column 1 (char 0): Segmentation fault"),
    ("codex", "echo 'not json, skipped'\necho 'auth failed: no key' >&2\nexit 3\n",
     "codex: inference subprocess closed stdout without producing a result (exit code 3)\n"
     "--- subprocess stderr (tail) ---\nauth failed: no key"),
])
async def test_a_cli_that_prints_garbage_or_exits_fails_the_task_naming_the_cli(
        tmp_path: Path, host: ComponentHost, dialect: str, script: str, expected: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / dialect  # a real executable that misbehaves as a broken install would
    fake.write_text(f"#!/bin/sh\n{script}")
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    staged, outcome = await run_task(process_capsule(tmp_path, dialect), env, host, tmp_path / "wd")
    assert outcome.exit_status == "failed"
    assert outcome.error == expected
    assert (staged.workdir.root / staged.workdir.book("out/result.txt")).read_text() == f"error: {expected}"


def test_murmurd_run_prints_the_cli_answer_and_refuses_a_missing_command(tmp_path: Path, artifacts) -> None:
    import sys

    artifacts.example("echo")
    with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
        env, command = cli_setup(tmp_path, script, "claude")
        capsule = process_capsule(tmp_path, command, provider=script.origin)
        ran = subprocess.run([sys.executable, "-m", "murmurd", "run", "-v", str(capsule), "--task", "echo, then answer"],
                             capture_output=True, text=True, env=env, timeout=600, cwd=clikit.ROOT)
    assert ran.returncode == 0, ran.stderr
    assert clikit.ANSWER_PREFIX in ran.stdout and "hello from the model" in ran.stdout
    assert "driver: claude process (default model)" in ran.stderr
    missing = process_capsule(tmp_path / "other", "claude-missing")
    refused = subprocess.run([sys.executable, "-m", "murmurd", "run", str(missing), "--task", "x"],
                             capture_output=True, text=True, env=env, timeout=600, cwd=clikit.ROOT)
    assert refused.returncode == 1
    assert "error[E-RUN-006]: inference.command 'claude-missing' not found on PATH" in refused.stderr
    assert "hint: install the claude CLI from https://claude.ai/download" in refused.stderr


async def test_hooks_fire_and_spans_mirror_the_trace_with_zero_tokens(tmp_path: Path, host: ComponentHost,
                                                                      artifacts) -> None:
    from hookkit import hook_events
    from test_otel import Collector, _attrs

    artifacts.example("debug-hook")
    debug = {"name": "debug-hook", "runtime": "hook", "source": str(EXAMPLES / "debug-hook"), "local_source": True}
    collector = Collector()
    try:
        with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
            env, command = cli_setup(tmp_path, script, "claude")
            capsule = process_capsule(tmp_path, command, artifacts=[ECHO, debug], provider=script.origin,
                                      observability={"otel_endpoint": collector.url})
            staged, outcome = await run_task(capsule, env, host, tmp_path / "wd")
        assert outcome.ok, outcome.error
        names = [e["event"] for e in hook_events(staged.workdir.runtime, "debug-hook")]
        assert names[:3] == ["on-stage", "on-session-start", "on-task-start"]
        assert names[-2:] == ["on-task-end", "on-session-end"]
        assert names.count("on-inference") == 2  # one per counted assistant message
        assert names.count("on-tool-call") == 1  # the one call (an observing hook hears it once, as for http)
        inference = sorted(collector.named("capsule.inference"), key=lambda s: _attrs(s)["turn"])
        assert [(_attrs(s)["turn"], _attrs(s)["input_tokens"], _attrs(s)["output_tokens"], _attrs(s)["decision"])
                for s in inference] == [(0, 0, 0, "tool_call"), (1, 0, 0, "end_turn")]
        assert [_attrs(s)["tool_name"] for s in collector.named("capsule.tool_call")] == ["echo"]
        # the system text Claude Code was given: upstream's notices, no [Capsule] block
        system = next(r["body"]["system"] for r in script.requests if r["body"].get("tools"))
        joined = json.dumps(system)
        assert "MURMUR.md is machine-generated" in joined and "[Capsule]" not in joined
    finally:
        collector.close()


async def test_a_cli_past_the_wall_clock_limit_is_killed_and_the_task_fails(
        tmp_path: Path, host: ComponentHost, monkeypatch: pytest.MonkeyPatch) -> None:
    from murmurd.session.process import spawn

    monkeypatch.setattr(spawn, "RUN_SECONDS", 3.0)  # upstream's 600 s, shortened for the test
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stuck = bin_dir / "claude"  # a real CLI-shaped process that never answers, with a child of its own
    # It may run nothing but its interpreter (the CLI's profile): both block opening a FIFO no one writes.
    stuck.write_text("#!/bin/sh\necho 'still thinking' >&2\nsh -c 'read x < never.fifo' &\nread x < never.fifo\n")
    stuck.chmod(0o755)
    (tmp_path / "wd").mkdir()
    os.mkfifo(tmp_path / "wd" / "never.fifo")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    staged, outcome = await run_task(process_capsule(tmp_path, "claude"), env, host, tmp_path / "wd")
    assert outcome.exit_status == "failed"
    assert outcome.error == "inference subprocess timed out after 3s\n--- subprocess stderr (tail) ---\nstill thinking"
    assert cli_processes(tmp_path) == []  # the sleeping child went with it


@pytest.mark.skipif(not plan_containment(probe_host(), "auto").netns,
                    reason=f"no network namespace on this host: {probe_host().netns_error}")
async def test_the_cli_reaches_only_the_provider_origins_network_allow_names(tmp_path: Path, host: ComponentHost) -> None:
    """codex configured for a provider on a loopback port network.allow does not name: in its
    namespace that port has no listener, so the host's port counts zero accepts and the task fails
    naming the CLI. (The bridge is reached through the same relay: every other test's tool call.)"""
    from test_shell_egress import accepts, counting_listener

    ungranted = counting_listener()
    try:
        with clikit.model_standin(clikit.ModelScript("echo", ARGS)) as script:
            env, command = cli_setup(tmp_path, script, "codex")
            config = Path(env["CODEX_HOME"]) / "config.toml"
            config.write_text(config.read_text().replace(script.origin,
                                                         f"http://127.0.0.1:{ungranted.getsockname()[1]}"))
            staged, outcome = await run_task(process_capsule(tmp_path, command, model=clikit.CODEX_MODEL,
                                                             provider=script.origin), env, host, tmp_path / "wd")
        assert outcome.exit_status == "failed"
        assert outcome.error is not None and outcome.error.startswith("codex"), outcome.error
        assert "Connection failed" in outcome.error  # refused inside its namespace: no listener on that port
        assert accepts(ungranted) == 0  # the host's port never saw a connection
        assert script.requests == []  # and nothing reached the granted origin it is not configured for
    finally:
        ungranted.close()


@pytest.mark.skipif(not plan_containment(probe_host(), "auto").landlock,
                    reason=f"no Landlock on this host: {probe_host().landlock_error}")
async def test_the_cli_reads_only_what_its_profile_grants(tmp_path: Path, host: ComponentHost) -> None:
    """A CLI (a `#!/bin/sh` script: it runs its interpreter and nothing else) reads its own
    /proc/self, never the host's files, not through /proc/self/root, nor another process's /proc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    probe = bin_dir / "claude"
    probe.write_text("#!/bin/sh\nfor f in /proc/self/status /etc/passwd /proc/self/root/etc/passwd /proc/1/environ "
                     f"{tmp_path / 'outside.txt'}; do\n"
                     "  if read line < \"$f\"; then echo \"read $f\"; else echo \"refused $f\"; fi\n"
                     "done > probe.txt 2>/dev/null\nexit 3\n")
    probe.chmod(0o755)
    (tmp_path / "outside.txt").write_text("a file beside the workdir\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    staged, outcome = await run_task(process_capsule(tmp_path, "claude"), env, host, tmp_path / "wd")
    assert outcome.exit_status == "failed"
    assert (staged.workdir.root / "probe.txt").read_text().splitlines() == [
        "read /proc/self/status", "refused /etc/passwd", "refused /proc/self/root/etc/passwd",
        "refused /proc/1/environ", f"refused {tmp_path / 'outside.txt'}"]
