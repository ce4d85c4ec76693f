"""One attempt of a process-transport task (process-transport.md §4-§9): the CLI spawned, its
stream read into turns, the bridge serving the capsule's tools, every outcome ending the CLI.

`ProcessLoop.run` has `AgentLoop.run`'s shape, so the session runs it in the agent loop's place
(attempts, reopen, `session_start`/`session_end`, `out/result.txt` are the session's). Each
counted assistant response is one turn, bounded by `inference.max_turns` (an overrun fails the
task, as upstream); its `inference` line and OTel span carry 0 tokens (the subprocess protocol
carries none) and `on-inference` hears it (the Claude dialect only, as upstream). Tool calls come
in over MCP and run through `AgentLoop.run_tool_call`: decision points, deny hooks, trace lines,
observation hooks. Text reaches SSE subscribers as each assistant message arrives.
"""

from __future__ import annotations

import asyncio
from typing import Any

from murmurd.hooks.dispatcher import InferenceEvent, LifecycleDispatcher
from murmurd.session.events import TaskEvents
from murmurd.session.failures import SessionEnded, TaskFailed
from murmurd.session.loop import AgentLoop, DriverSetup, LoopState
from murmurd.outlast import outlasting_cancels
from murmurd.session.own_thread import on_own_thread
from murmurd.session.process import command as cmd
from murmurd.session.process.claude_events import read_line as read_claude
from murmurd.session.process.codex_events import CodexStream
from murmurd.session.process.mcp_server import BridgeServer
from murmurd.session.process import spawn
from murmurd.session.process.spawn import CliProcess, cli_environment, cli_policy
from murmurd.session.process.stream import Done, HostCommand, StreamFailed, Turn
from murmurd.session.shell_model import HOME_DIR_NAME, TMP_DIR_NAME, ShellError
from murmurd.workdir import read_task_input
from murmurd.trace.writer import TraceWriteError, TraceWriter

STDERR_TAIL_BYTES = 4096
STDERR_GRACE_SECONDS = 5.0  # for a CLI's last stderr after it exited (a child may still hold the pipe)
STDOUT_LINE_LIMIT = 64 * 1024 * 1024  # one stream-json line (a tool result echoed back can be long)


class ProcessLoop:
    """Runs a task through the capsule's CLI agent in the agent loop's place."""

    def __init__(self, tools: AgentLoop, setup: DriverSetup, trace: TraceWriter, dispatcher: LifecycleDispatcher,
                 prompt: str | None, run_seconds: float | None = None) -> None:
        self.tools = tools
        self.setup = setup
        self.trace = trace
        self.dispatcher = dispatcher
        self.staged = tools.staged
        inference = self.staged.manifest.inference
        assert inference is not None
        self.command = inference.command or cmd.DEFAULT_COMMAND
        self.model = inference.model or ""
        self.dialect = cmd.dialect_of(self.command)
        self.system = cmd.system_text(prompt)
        self.run_seconds = run_seconds if run_seconds is not None else spawn.RUN_SECONDS
        self._turn = 0  # turns counted in this attempt
        self._fatal: TaskFailed | None = None  # a tool call that ended the task
        self._cli: CliProcess | None = None

    async def run(self, state: LoopState, events: TaskEvents) -> str:
        executable = cmd.find_on_path(self.command, self.staged.host_env.get("PATH"))
        if executable is None:
            raise TaskFailed(f"'{self.command}': binary not found on PATH\n"
                             f"  hint: install it from {cmd.INSTALL_HINTS[self.dialect]}")
        task = await self._task_text(state)
        tool_names = [t.name for t in self.setup.tools]
        self._turn = 0

        self._fatal = None
        self._cli = None
        one_at_a_time = asyncio.Lock()  # as the http loop runs a turn's calls: in order, one by one

        async def dispatch(name: str, arguments: Any) -> tuple[str, bool]:
            async with one_at_a_time:
                if self._fatal is not None:
                    return f"tool '{name}' failed: the task has ended", True
                turn = max(self._turn - 1, 0) if self.dialect == "claude" else self._turn
                try:
                    return await self.tools.run_tool_call(state, name, arguments, turn, events)
                except TaskFailed as failure:  # a tool ended the task (abort-task, a lost trace): so does the CLI
                    self._fatal = failure
                    if self._cli is not None:  # its own thread: the kill waits for the CLI to end
                        await on_own_thread(self._cli.kill)
                    return f"tool '{name}' failed: {failure}", True

        if not tool_names:
            return await self._spawn_and_read(state, events, executable, task, None)
        async with BridgeServer(self.setup.tools, dispatch) as bridge:
            return await self._spawn_and_read(state, events, executable, task, bridge)

    async def _task_text(self, state: LoopState) -> str:
        """`task.md`, else `input.txt` (upstream reads them; "" when missing), and a reopen's
        feedback after it."""
        try:
            task = await asyncio.to_thread(read_task_input, self.staged.workdir) or ""
        except OSError:
            task = ""
        last = state.messages[-1] if state.messages else None
        if last is not None and (last.source_id or "").startswith("hook:") and isinstance(last.content, str):
            task = f"{task}\n\n{last.content}"
        return task

    def _argv(self, executable: str, task: str, bridge: cmd.Bridge | None) -> list[str]:
        if self.dialect == "codex":
            return cmd.codex_argv(executable, self.model, bridge, self.system, task)
        return cmd.claude_argv(executable, self.model, [t.name for t in self.setup.tools], bridge, self.system)

    async def _spawn_and_read(self, state: LoopState, events: TaskEvents, executable: str, task: str,
                              bridge: cmd.Bridge | None) -> str:
        host_env = self.staged.host_env
        policy = cli_policy(self.tools.runner.policy, host_env, executable, self.dialect,
                            bridge.url if bridge is not None else None, self.staged.grants.capsule.network)
        env = cli_environment(host_env, policy.workdir / HOME_DIR_NAME / TMP_DIR_NAME, policy.home)
        env.update(self.staged.identity)  # the session's identity, as every driver sees it
        argv = self._argv(executable, task, bridge)
        claude = self.dialect == "claude"
        try:
            # the loop's executor, never a thread that ends: the CLI dies with the thread that spawned it
            cli = await asyncio.to_thread(CliProcess.start, policy, argv, env, piped_stdin=claude)
        except ShellError as exc:
            raise TaskFailed(f"failed to spawn '{self.command}': {exc}") from None
        except OSError as exc:
            raise TaskFailed(f"failed to spawn '{self.command}': {exc.strerror or exc}") from None
        self._cli = cli
        stderr_tail = bytearray()
        transports: list[asyncio.BaseTransport] = []
        drain: asyncio.Task[None] | None = None
        try:
            loop = asyncio.get_running_loop()
            stdout = asyncio.StreamReader(limit=STDOUT_LINE_LIMIT)
            stderr = asyncio.StreamReader()
            for reader, pipe in ((stdout, cli.proc.stdout), (stderr, cli.proc.stderr)):
                transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
                transports.append(transport)  # the transport owns the pipe now: it closes it
            cli.proc.stdout = cli.proc.stderr = None
            drain = asyncio.create_task(_drain_tail(stderr, stderr_tail))
            try:
                async with asyncio.timeout(self.run_seconds):  # a CLI that reads no stdin times out too
                    if claude:  # its own thread: the kill below ends a write blocked on a full pipe
                        await on_own_thread(cli.feed_stdin, cmd.claude_stdin(task))
                    result = await self._read(stdout, state, events)
            except TimeoutError:
                raise TaskFailed(self._with_tail(f"inference subprocess timed out after {self.run_seconds:g}s",
                                                 stderr_tail)) from None
            except StreamFailed as exc:
                raise TaskFailed(self._with_tail(f"{self.command}: {exc}", stderr_tail)) from None
            if self._fatal is not None:
                raise self._fatal
            if result is None:
                code = await on_own_thread(_exit_code, cli)
                try:  # what it said on its way out, once it has exited (its stderr closes)
                    await asyncio.wait_for(asyncio.shield(drain), STDERR_GRACE_SECONDS)
                except (TimeoutError, asyncio.TimeoutError):
                    pass
                raise TaskFailed(self._with_tail(
                    f"{self.command}: inference subprocess closed stdout without producing a result"
                    f" (exit code {code})", stderr_tail))
            events.turn_finished(True, result)
            return result
        finally:
            try:
                _, interrupted = await outlasting_cancels(on_own_thread(cli.kill))  # its teardown must finish
            finally:  # the reader and the pipes go whatever the kill raised
                if drain is not None:
                    drain.cancel()
                for transport in transports:
                    transport.close()
            if interrupted:
                raise asyncio.CancelledError

    async def _read(self, stdout: asyncio.StreamReader, state: LoopState, events: TaskEvents) -> str | None:
        """Read the stream until its result (None: stdout closed first)."""
        codex = CodexStream() if self.dialect == "codex" else None
        while True:
            try:
                raw = await stdout.readline()
            except ValueError:
                raise StreamFailed(f"a stdout line is past {STDOUT_LINE_LIMIT} bytes") from None
            if not raw:
                return None
            line = raw.decode("utf-8", errors="replace")
            found = codex.read_line(line) if codex is not None else read_claude(line)
            for event in found:
                if isinstance(event, Done):
                    return event.result
                if isinstance(event, Turn):
                    await self._turn_seen(event, state, events)
                elif isinstance(event, HostCommand):
                    self._write("tool_call", turn=max(self._turn - 1, 0), tool_name=f"codex-shell: {event.command}",
                                input=event.command, input_bytes=len(event.command.encode()),
                                output_bytes=len(event.output.encode()), duration_ms=0,
                                status="ok" if event.exit_code == 0 else "error")

    async def _turn_seen(self, event: Turn, state: LoopState, events: TaskEvents) -> None:
        state.counters.turns += 1
        self.tools.totals.turns += 1
        if state.counters.turns > self.setup.max_turns:
            raise TaskFailed(f"max_turns ({self.setup.max_turns}) exceeded")
        turn, self._turn = self._turn, self._turn + 1
        self._write("inference", turn=turn, input_tokens=0, output_tokens=0, decision=event.decision,
                    tool_name=event.tool_name, duration_ms=0)
        if self.dialect == "claude":
            outputs = await self.dispatcher.on_inference(InferenceEvent(
                turn, 0, 0, event.decision, event.tool_name, output=event.output))
            for artifact in outputs.artifacts:
                events.artifact(artifact.hook_name, artifact.content)
        if event.text:
            events.text_chunk(event.text)

    def _with_tail(self, message: str, tail: bytearray) -> str:
        if not tail:
            return message
        text = bytes(tail).decode("utf-8", errors="replace").strip()
        return f"{message}\n--- subprocess stderr (tail) ---\n{text}"

    def _write(self, event_type: str, **fields: Any) -> None:
        try:
            self.trace.write(event_type, **fields)
        except TraceWriteError as exc:
            raise SessionEnded(str(exc)) from None


async def _drain_tail(reader: asyncio.StreamReader, tail: bytearray) -> None:
    """Keep the last `STDERR_TAIL_BYTES` of the CLI's stderr."""
    while chunk := await reader.read(65536):
        tail += chunk
        del tail[:-STDERR_TAIL_BYTES]


def _exit_code(cli: CliProcess) -> int | None:
    try:
        return cli.proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running: the teardown kills it
        return None

