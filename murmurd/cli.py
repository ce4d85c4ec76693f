# PYTHON_ARGCOMPLETE_OK
"""The `murmurd` command line. Each subcommand parses its arguments and calls one library function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from murmurd import __version__, gc_command
from murmurd.commands.argtypes import capsule_dir, non_negative_int
from murmurd.commands.chat import add_chat
from murmurd.commands.completion import add_completion, autocomplete
from murmurd.commands.init import add_init
from murmurd.commands.serve_flags import add_serve_arguments
from murmurd.commands.tasks import add_task_commands

if TYPE_CHECKING:
    from murmurd.a2a.http.auth.config import AuthConfig
    from murmurd.a2a.http.auth.tls import TlsFiles


def _eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _cmd_build(args: argparse.Namespace) -> int:
    from murmurd.authoring.build import BuildError, build_artifact
    from murmurd.manifest.artifact import ArtifactManifestError
    from murmurd.registry.commands import pack_built
    from murmurd.registry.errors import RegistryError

    status = 0
    for directory in args.artifact_dirs:
        try:
            result = build_artifact(Path(directory), progress=_eprint)
        except (BuildError, ArtifactManifestError) as exc:
            _eprint(f"murmurd build: {exc}")
            status = 1
            continue
        print(result.output)
        try:  # and the .mur.zip upstream's `mur build` packs (murmur.yaml + requires_files)
            print(pack_built(Path(directory), result.manifest, result.output))
        except RegistryError as exc:
            _eprint(f"murmurd build: {exc}")
            status = 1
    return status


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _cmd_call(args: argparse.Namespace) -> int:
    from murmurd.contract import Role
    from murmurd.host import CallGrant, ComponentHost, HostError, Limits, ToolInput, ToolStatus

    try:
        env = _parse_env(args.env)
    except ValueError as exc:
        _eprint(f"murmurd call: {exc}")
        return 2
    data = args.data
    if args.data_file is not None:
        data = Path(args.data_file).read_text(encoding="utf-8")
    grant_dir = Path(args.grant_dir).resolve() if args.grant_dir else None
    if grant_dir is not None and not grant_dir.is_dir():
        _eprint(f"murmurd call: --grant-dir {args.grant_dir}: not a directory")
        return 2
    limits = Limits(memory_bytes=args.memory_mib * 1024 * 1024, deadline_seconds=args.deadline)
    grant = CallGrant(env=env, preopen=grant_dir, log_path=Path(args.log) if args.log else None, limits=limits)

    streamed: list[str] = []

    def stream(chunk: str) -> None:
        streamed.append(chunk)
        print(chunk, end="", file=sys.stderr, flush=True)

    host = ComponentHost()
    try:
        loaded = host.load(Path(args.component), progress=_eprint)
        if loaded.role is Role.CAPSULE:
            host.run_capsule_sync(loaded, grant=grant)
            print(json.dumps({"role": "capsule", "status": "returned"}))
            return 0
        result = host.call_tool_sync(
            loaded,
            ToolInput(data=data, log_path=args.log),
            grant=grant,
            on_chunk=stream,
            on_thinking=stream,
        )
    except HostError as exc:
        _eprint(f"murmurd call: {exc}")
        return 2
    finally:
        host.close()
        if streamed and not streamed[-1].endswith("\n"):
            _eprint("")
    print(json.dumps(result.to_json(), indent=2))
    return 0 if result.status is ToolStatus.PASSED else 1


def _cmd_validate(args: argparse.Namespace) -> int:
    from murmurd.manifest.validate import load_capsule

    env = _run_env(args, "validate")  # the environment `run` would launch with
    if env is None:
        return 1
    manifest, report = load_capsule(Path(args.capsule_dir), env)
    if manifest is not None:  # each local hook's own contract, as staging would judge it
        from murmurd.staging.hook_contracts import local_hook_findings

        report.extend(local_hook_findings(manifest, Path(args.capsule_dir).resolve()))
    if manifest is not None:  # what staging would certainly refuse (an unknown name, a refused endpoint)
        from murmurd.staging.launch_checks import launch_checks

        report.extend(launch_checks(manifest, Path(args.capsule_dir)))
    print(report.to_json() if args.json else report.to_text())
    return 0 if report.ok else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    from murmurd.manifest.validate import load_capsule, load_capsule_for_report
    from murmurd.staging.grants import compute_grants, effective_grants

    env = _run_env(args, "explain")  # the environment `run` would launch with, `.env` included
    if env is None:
        return 1
    manifest, report = load_capsule(Path(args.capsule_dir), env)
    if manifest is None:  # an unmet containment floor alone is reported, `floor met: no`
        manifest = load_capsule_for_report(Path(args.capsule_dir), env)
    if manifest is None:
        print(report.to_text(), file=sys.stderr)
        return 1
    grants = compute_grants(manifest, env)
    containment = _containment_summary(effective_grants(manifest, grants, env=env))
    if args.json:
        print(json.dumps({**grants.to_json(), "containment": containment}, indent=2, sort_keys=True))
        return 0
    print(f"{manifest.name} {manifest.version}")
    print(f"  containment: {containment['achieved']} (declared {containment['declared']}, "
          f"mechanism {containment['mechanism']}, floor met: {'yes' if containment['floor_met'] else 'no'})")
    for code in report.warnings:
        if code.code.startswith(("W-SEC-", "W-INF-001")):
            print(f"  {code.code}: {code.message}")
    for name, grant in [("(capsule)", grants.capsule), *sorted(grants.components.items())]:
        print(f"  {name}:")
        for key, value in grant.to_json().items():
            print(f"    {key}: {value}")
    for warning in grants.warnings:
        print(f"warning: {warning}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from murmurd.staging.artifacts import ResolveError
    from murmurd.staging.bundled import bundled_artifacts

    try:
        bundled = bundled_artifacts()
    except ResolveError as exc:
        _eprint(f"murmurd list: {exc}")
        return 1
    rows = [{"name": a.manifest.name, "version": a.manifest.version, "runtime": a.manifest.runtime,
             "description": a.manifest.description} for a in bundled]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len("NAME"), *(len(r["name"]) for r in rows)])
    print(f"{'NAME':<{width}}  {'VERSION':<8}  {'RUNTIME':<7}  DESCRIPTION")  # upstream `mur list`'s columns
    for row in rows:
        first = next(iter((row["description"] or "").splitlines()), "")  # a block description's first line
        print(f"{row['name']:<{width}}  {row['version']:<8}  {row['runtime']:<7}  {first}")
    return 0


def _task_text(value: str) -> str:
    """`--task` is a file path when such a file exists, else the task text itself."""
    candidate = Path(value)
    try:
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    except OSError:
        pass
    return value


def _run_env(args: argparse.Namespace, command: str) -> dict[str, str] | None:
    """The environment the capsule launches with: the process's, plus the project `.env`
    (never overriding) unless `--no-env-file`. None after reporting a malformed `.env`."""
    import os

    from murmurd.dotenv import DotenvError, with_dotenv

    if args.no_env_file:
        return dict(os.environ)
    try:
        return with_dotenv(Path(args.capsule_dir), os.environ)
    except DotenvError as exc:
        _eprint(f"murmurd {command}: {exc}")
        return None


def _launch_lines(staged: object, verbose: bool) -> list[str]:
    """What `mur run` prints at launch: the session always; with -v the workdir, manifest,
    driver and installed skills."""
    from murmurd.staging.stage import StagedCapsule

    assert isinstance(staged, StagedCapsule)
    lines = [f"session: {staged.session_id}"]
    if not verbose:
        return lines
    manifest = staged.manifest
    lines += [f"workdir: {staged.workdir.root}", f"manifest: {manifest.name} v{manifest.version}"]
    inference = manifest.inference
    if inference is not None and inference.driver is not None:
        lines.append(f"driver: {inference.driver.artifact} ({inference.model or 'default model'})")
    elif inference is not None and inference.transport == "process":  # upstream: `<cmd> process (<model>)`
        lines.append(f"driver: {inference.command} process ({inference.model or 'default model'})")
    skills = sum(1 for a in staged.artifacts.values() if a.kind == "skill")
    if skills:
        lines.append(f"skills: {skills} installed")
    return lines


def _containment_summary(grants: dict) -> dict:
    """The containment part of `effective_grants`, as `murmurd explain` shows it."""
    summary = {"declared": grants["declared_containment"], "achieved": grants["achieved_containment"],
               "mechanism": grants["enforcement_tier"], "floor_met": grants["floor_met"],
               "workdir_exec": grants["workdir_exec"]}
    if "shortfall_reason" in grants:
        summary["shortfall_reason"] = grants["shortfall_reason"]
    return summary


def _render_scope(grants: dict) -> str:
    """`--explain-scope`'s human layout (upstream's): containment, then every effective grant."""
    def shown(value: object) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) or "<none>"
        return "<none>" if value is None else str(value)

    lines = ["Containment", f"  declared:  {grants['declared_containment']}",
             f"  achieved:  {grants['achieved_containment']}", f"  floor met: {shown(grants['floor_met'])}"]
    if "shortfall_reason" in grants:
        lines.append(f"  reason:    {grants['shortfall_reason']}")
    lines += [f"  mechanism: {grants['enforcement_tier']}", "Effective grants"]
    for label, key in (("filesystem scope", "filesystem_scope"), ("workdir exec", "workdir_exec"),
                       ("network allow", "network_allow"), ("unix sockets", "unix_sockets"),
                       ("shell allow", "shell_allow"), ("spawn allow", "spawn_allow"), ("env allow", "env_allow"),
                       ("interpreter runtime", "interpreter_runtime_grants"),
                       ("staged runtime", "staged_runtime_grants")):
        lines.append(f"  {label + ':':<21}{shown(grants[key])}")
    if not grants["floor_met"]:
        lines.append("This is a report only — `murmurd run` without --explain-scope would refuse to launch here.")
    return "\n".join(lines)


def _containment_check(args: argparse.Namespace, env: dict[str, str], command: str) -> int | None:
    """`--explain-scope` (report, exit 0) and the `--containment` floor (refuse before staging when
    murmurd cannot meet it). None: go on and launch."""
    from murmurd.manifest.validate import load_capsule, load_capsule_for_report
    from murmurd.containment.host import probe_host
    from murmurd.containment.plan import floor_refusal
    from murmurd.staging.grants import compute_grants, containment_floor, containment_plan, effective_grants

    explain = getattr(args, "explain_scope", False)
    if not explain and args.containment is None:
        return None
    if explain:
        manifest = load_capsule_for_report(Path(args.capsule_dir), env)
    else:
        manifest, _ = load_capsule(Path(args.capsule_dir), env)
    if manifest is None:
        return None  # staging reports every error
    floor = containment_floor(manifest, args.containment)
    if explain:
        grants = effective_grants(manifest, compute_grants(manifest, env), floor, env)
        print(json.dumps(grants) if args.json else _render_scope(grants), flush=True)
        return 0
    shell = manifest.capabilities.shell
    refusal = floor_refusal(floor, containment_plan(manifest, env), probe_host(), subprocesses=bool(shell and shell.allow))
    if refusal is None:
        return None
    _eprint(f"murmurd {command}: {refusal[0]}: containment floor not met: {refusal[1]}")
    return 1


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from murmurd.host import ComponentHost
    from murmurd.manifest.validate import load_capsule
    from murmurd.session.events import TaskEvents
    from murmurd.session.run_once import PrintingEvents, run_once, stderr_writer, stdout_writer
    from murmurd.staging.stage import StagingError
    from murmurd.trace.writer import TraceWriteError

    env = _run_env(args, "run")
    if env is None:
        return 1
    refused = _containment_check(args, env, "run")
    if refused is not None:
        return refused
    if args.system_prompt is not None:
        manifest, _ = load_capsule(Path(args.capsule_dir), env)
        if manifest is not None and manifest.inference is None:
            _eprint("murmurd run: E-IO-003: --system-prompt needs an inference: block; "
                    f"{args.capsule_dir} is a script capsule")
            return 1
    quiet_stdout = args.json  # --json: stdout carries exactly one line, the summary
    events: TaskEvents = PrintingEvents(
        (lambda _text: None) if quiet_stdout else stdout_writer,
        stderr_writer,
    )

    def on_staged(staged: object) -> None:
        if not args.json:
            for line in _launch_lines(staged, args.verbose):
                _eprint(line)

    host = ComponentHost()
    try:
        result = asyncio.run(run_once(
            Path(args.capsule_dir), _task_text(args.task) if args.task is not None else None, host=host,
            workdir=Path(args.workdir) if args.workdir else None, progress=_eprint, events=events,
            env=env, system_prompt=args.system_prompt, on_staged=on_staged,
        ))
    except StagingError as exc:
        _eprint(f"murmurd run: cannot launch {args.capsule_dir}:\n{exc}")
        return 1
    except TraceWriteError as exc:  # the session's trace or OTel log is refused (a symlink in --workdir)
        _eprint(f"murmurd run: cannot open the session: {exc}")
        return 1
    finally:
        host.close()
    outcome, staged = result.outcome, result.staged
    _keep_sessions(staged.workdir.runtime.parent, args.keep_sessions)
    if args.json:
        print(json.dumps({
            "pid": os.getpid(), "session_id": staged.session_id, "name": staged.manifest.name,
            "version": staged.manifest.version, "workdir": str(staged.workdir.root),
            "task_id": outcome.task_id, "context_id": outcome.context_id, "exit_status": outcome.exit_status,
            "result": outcome.result_text if outcome.delivered else None, "error": outcome.error,
        }), flush=True)
    else:
        assert isinstance(events, PrintingEvents)
        if events.wrote_text:
            print(flush=True)
        _eprint(f"workdir: {staged.workdir.root}")
        _eprint(f"status:  {outcome.exit_status}")
    if not outcome.ok:
        _eprint(f"murmurd run: task ended {outcome.exit_status}: {outcome.error}")
    return 0 if outcome.ok else 1


def _keep_sessions(where: Path, keep: int) -> None:
    """`run --keep-sessions N`: the workdir's older sessions go (a live one never does)."""
    from murmurd.traceview.errors import ReadError
    from murmurd.workdir_gc import keep_newest

    try:
        done = keep_newest(where, keep)
    except (OSError, ReadError) as exc:
        _eprint(f"murmurd run: old sessions not removed: {exc}")
        return
    for name, why in done.failed:
        _eprint(f"murmurd run: could not remove old session {name}: {why}")


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from murmurd.a2a.http.auth.binding import UnsafeServe
    from murmurd.a2a.serve import PortTaken, ServeOptions, serve_capsule
    from murmurd.a2a.core.state_dir import StateDirError
    from murmurd.a2a.stores.base import TaskStoreError
    from murmurd.host import ComponentHost
    from murmurd.staging.stage import StagingError
    from murmurd.trace.writer import TraceWriteError

    from murmurd import logsetup

    logsetup.configure(args.log_format, args.log_level)
    env = _run_env(args, "serve")
    if env is None:
        return 1
    refused = _containment_check(args, env, "serve")
    if refused is not None:
        return refused
    security = _serve_security(args)
    if security is None:
        return 2
    auth, tls, load_auth = security
    options = ServeOptions(
        env=env, host=args.host, port=args.port, state_dir=Path(args.state_dir) if args.state_dir else None,
        store=args.store or os.environ.get("MURMURD_STORE") or None, replica_lease_secs=args.replica_lease,
        task_acceptance=args.task_acceptance, after_task=args.after_task, grace_seconds=args.grace,
        max_concurrent_tasks=args.max_concurrent_tasks, session_idle_secs=args.session_idle,
        task=_task_text(args.task) if args.task is not None else None,
        max_body_bytes=args.max_body_bytes, stream_buffer=args.stream_buffer,
        stream_buffer_bytes=args.stream_buffer_bytes, max_batch=args.max_batch,
        header_timeout_secs=args.header_timeout, body_timeout_secs=args.body_timeout,
        keep_alive_secs=args.keep_alive, max_connections=args.max_connections,
        max_streams=args.max_streams, max_streams_per_client=args.max_streams_per_client,
        max_response_bytes=args.max_response_bytes, write_timeout_secs=args.write_timeout,
        retain_finished_secs=args.retain_finished_secs or None, retain_finished_count=args.retain_finished_count or None,
        auth=auth, load_auth=load_auth, tls=tls, insecure=args.insecure,
        cors_origins=tuple(args.cors_origins), public_url=args.public_url,
        stream_ticket_ttl=args.stream_ticket_ttl,
        max_open_contexts=args.max_open_contexts or None, keep_context_sessions=args.keep_context_sessions,
    )
    host = ComponentHost()
    try:
        return asyncio.run(serve_capsule(Path(args.capsule_dir), options, component_host=host, progress=_eprint))
    except StagingError as exc:
        _eprint(f"murmurd serve: cannot launch {args.capsule_dir}:\n{exc}")
        return 1
    except TraceWriteError as exc:
        _eprint(f"murmurd serve: cannot open the session: {exc}")
        return 1
    except (PortTaken, StateDirError, TaskStoreError) as exc:
        _eprint(f"murmurd serve: {exc}")
        return 1
    except UnsafeServe as exc:
        _eprint(f"murmurd serve: {exc}")
        return 2
    finally:
        host.close()


def _serve_security(
        args: argparse.Namespace) -> tuple[AuthConfig, TlsFiles | None, Callable[[], AuthConfig]] | None:
    """(credentials, TLS files, how to read the credentials again) for `serve`, or None after
    reporting why they are unusable."""
    import os

    from murmurd.a2a.http.auth.config import CredentialsError, load_auth
    from murmurd.a2a.http.auth.tls import TlsFiles

    if (args.tls_cert is None) != (args.tls_key is None) or (args.tls_client_ca and args.tls_cert is None):
        _eprint("murmurd serve: --tls-cert and --tls-key go together; --tls-client-ca needs both")
        return None
    tls = None if args.tls_cert is None else TlsFiles(
        Path(args.tls_cert), Path(args.tls_key), Path(args.tls_client_ca) if args.tls_client_ca else None)
    credentials = Path(args.credentials) if args.credentials else None
    token_file = Path(args.token_file) if args.token_file else None

    def load() -> AuthConfig:
        return load_auth(credentials, token_file, os.environ)

    try:
        auth = load()
    except CredentialsError as exc:
        _eprint(f"murmurd serve: {exc}")
        return None
    return auth, tls, load


def _base_url(url: str) -> str:
    return url if "://" in url else f"http://{url}"


def _client_token(args: argparse.Namespace, command: str) -> str | None | bool:
    """The bearer token `send`/`watch` present (None: none); False after reporting a bad one."""
    import os

    from murmurd.a2a.http.auth.config import CredentialsError, client_token

    try:
        return client_token(Path(args.token_file) if args.token_file else None, os.environ)
    except CredentialsError as exc:
        _eprint(f"murmurd {command}: {exc}")
        return False


def _cmd_watch(args: argparse.Namespace) -> int:
    from murmurd.a2a.peers import client

    token = _client_token(args, "watch")
    if token is False:
        return 2
    assert token is None or isinstance(token, str)
    try:
        client.watch(_base_url(args.url), lambda t: print(t, end="", flush=True), token=token)
    except client.ClientError as exc:
        _eprint(f"murmurd watch: {exc}")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from murmurd.traceview import commands

    console, workdir = commands.Console(), Path(args.workdir)
    if args.trace_command == "show":
        return commands.show(console, workdir, args.session, as_json=args.json,
                             html=Path(args.html) if args.html else None)
    if args.trace_command == "steps":
        return commands.steps(console, workdir, args.session, verbose=args.verbose, as_json=args.json)
    if args.trace_command == "diff":
        return commands.diff(console, workdir, args.sessions, as_json=args.json)
    return commands.report(console, workdir, args.sessions, last=args.last, since=args.since, as_json=args.json)


def _cmd_eval(args: argparse.Namespace) -> int:
    from murmurd.eval import commands

    console = commands.Console()
    if args.eval_command == "show":
        return commands.show(console, Path(args.workdir), args.session, as_json=args.json)
    if args.eval_command == "diff":
        return commands.diff(console, Path(args.workdir), args.a, args.b, as_json=args.json)
    return commands.run(console, Path(args.capsule_dir), Path(args.dataset), no_env_file=args.no_env_file)


def _add_trace(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    trace = commands.add_parser("trace", help="read session traces: show, steps, diff, report")
    sub = trace.add_subparsers(dest="trace_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workdir", default="workdir", help="where the ses_* session directories are (default ./workdir)")
    where.add_argument("--json", action="store_true", help="the same content as JSON")
    selector = "a session: id, id suffix, or a trace path (default: the latest)"
    show = sub.add_parser("show", parents=[where], help="one session's sections")
    show.add_argument("session", nargs="?", help=selector)
    show.add_argument("--html", metavar="FILE", help="write a self-contained HTML timeline of the session to FILE")
    steps = sub.add_parser("steps", parents=[where], help="one row per inference turn")
    steps.add_argument("session", nargs="?", help=selector)
    steps.add_argument("-v", "--verbose", action="store_true", help="add the first string of each turn's input")
    diff = sub.add_parser("diff", parents=[where], help="two sessions side by side (default @2 @1)")
    diff.add_argument("sessions", nargs="*", help="two sessions (also @N: the N-th most recent)")
    report = sub.add_parser("report", parents=[where], help="statistics over several sessions")
    report.add_argument("sessions", nargs="*", help="sessions (default: every session)")
    report.add_argument("--last", type=int, help="the N most recent sessions")
    report.add_argument("--since", help="sessions started within <N>m, <N>h or <N>d")
    trace.set_defaults(handler=_cmd_trace)


def _add_eval(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    evals = commands.add_parser("eval", help="read and run evals: show, diff, run")
    sub = evals.add_subparsers(dest="eval_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workdir", default="workdir", help="where the ses_* session directories are (default ./workdir)")
    where.add_argument("--json", action="store_true", help="the same content as JSON")
    show = sub.add_parser("show", parents=[where], help="one session's eval.jsonl")
    show.add_argument("session", nargs="?", help="a session: id, id suffix, or an eval.jsonl path (default: the latest)")
    diff = sub.add_parser("diff", parents=[where], help="two sessions' pass rates per scorer")
    diff.add_argument("a", help="the first session")
    diff.add_argument("b", help="the second session")
    run = sub.add_parser("run", help="run every case of a task set and score it (sessions in <capsule-dir>/workdir)")
    run.add_argument("capsule_dir", metavar="capsule-dir", nargs="?", default=".", help="the capsule (default .)")
    run.add_argument("--dataset", default="eval.jsonl", help="the task set, JSON lines (default ./eval.jsonl)")
    run.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    evals.set_defaults(handler=_cmd_eval)


SERVE_DESCRIPTION = (
    "Serve a capsule as an A2A agent until it is stopped. Lifecycle: a manifest that sets neither "
    "lifecycle.task_acceptance nor lifecycle.after_task (and no --task-acceptance/--after-task) is served "
    "as task_acceptance: queue + after_task: sleep, so it stays up and the idle rule's empty task never "
    "runs. Setting either one, in murmur.yaml or by flag, gets upstream's lifecycle exactly (the other "
    "field takes upstream's default: single, exit): a single/exit capsule exits after its first task, "
    "and the log says why. `murmurd run` always keeps upstream's defaults."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="murmurd", description="Run murmur capsules and serve them over A2A.")
    parser.add_argument("--version", action="version", version=f"murmurd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="compile a Python artifact (murmur.yaml + app.py) into a component")
    build.add_argument("artifact_dirs", nargs="+", metavar="artifact-dir", help="a directory holding murmur.yaml and app.py")
    build.set_defaults(handler=_cmd_build)

    call = commands.add_parser("call", help="run one tool, driver or capsule call and print the result")
    call.add_argument("component", help="path to a .wasm component")
    call.add_argument("--data", help="tool-input data (verbatim; usually JSON)")
    call.add_argument("--data-file", help="read tool-input data from this file")
    call.add_argument("--grant-dir", help="directory preopened as the guest's '.'")
    call.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="guest environment variable")
    call.add_argument("--log", help="file receiving the guest's stdout and stderr")
    call.add_argument("--deadline", type=float, default=600.0, help="wall-clock limit in seconds (default 600)")
    call.add_argument("--memory-mib", type=int, default=512, help="linear memory limit in MiB (default 512)")
    call.set_defaults(handler=_cmd_call)

    run = commands.add_parser("run", help="stage a capsule and run one task, streaming the answer")
    run.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    run.add_argument("--task", help="the task text, or a file holding it (default: task.md, else input.txt, "
                                    "in --workdir)")
    run.add_argument("--workdir", help="session workdir (default <capsule-dir>/workdir/<session-id>)")
    run.add_argument("--system-prompt", help="replace the manifest's system prompt for this run (blank clears it)")
    run.add_argument("--json", action="store_true",
                     help="print exactly one JSON line on stdout (session, workdir, task, result); no streamed text")
    run.add_argument("-v", "--verbose", action="store_true", help="also print workdir, manifest, driver and skills")
    run.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    run.add_argument("--containment", choices=["advisory", "scoped", "sealed"],
                     help="a containment floor (can only raise the manifest's); refused when murmurd cannot meet it")
    run.add_argument("--explain-scope", action="store_true",
                     help="print the containment and every effective grant (with --json: one JSON line), then exit")
    run.add_argument("--keep-sessions", type=non_negative_int, default=gc_command.DEFAULT_KEEP_SESSIONS, metavar="N",
                     help="keep the N newest session directories of the workdir, remove older ones "
                          "(default 20; 0 keeps every one; a session still running is never removed)")
    run.set_defaults(handler=_cmd_run)

    serve = commands.add_parser("serve", help="serve a capsule as an A2A agent", description=SERVE_DESCRIPTION)
    add_serve_arguments(serve)
    serve.set_defaults(handler=_cmd_serve)

    add_task_commands(commands)
    add_chat(commands)
    add_init(commands)
    add_completion(commands)

    watch = commands.add_parser("watch", help="render a capsule's live stream (stream/watch)")
    watch.add_argument("url", help="the daemon's address (http://host:port/)")
    watch.add_argument("--token-file", help="present the bearer token in this file (default $MURMUR_TOKEN_FILE or $MURMUR_TOKEN)")
    watch.set_defaults(handler=_cmd_watch)

    validate = commands.add_parser("validate", help="report every error and warning in a capsule's murmur.yaml")
    validate.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    validate.add_argument("--json", action="store_true", help="machine-readable output")
    validate.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    validate.set_defaults(handler=_cmd_validate)

    explain = commands.add_parser("explain", help="print the grants every component would run under")
    explain.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    explain.set_defaults(handler=_cmd_explain)

    listing = commands.add_parser("list", help="show the artifacts bundled with murmurd (name, version, runtime)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=_cmd_list)

    _add_trace(commands)
    gc_command.add_parser(commands)
    _add_eval(commands)
    from murmurd.registry.commands import add_commands  # install, doctor, publish, registry serve

    add_commands(commands)
    return parser


def _check_serve_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Limits that depend on each other: streams must leave ordinary requests a connection."""
    if args.max_streams is not None and args.max_streams >= args.max_connections:
        parser.error(f"--max-streams {args.max_streams} must be below --max-connections {args.max_connections}, "
                     "so ordinary requests always have a connection")
    from murmurd.a2a.http.cors import BadOrigin, check_origin

    for origin in args.cors_origins:
        try:
            check_origin(origin)
        except BadOrigin as exc:
            parser.error(f"--cors-origin: {exc}")
    from murmurd.a2a.http.public_url import BadPublicUrl, check_public_url

    if args.public_url is not None:
        try:
            check_public_url(args.public_url)
        except BadPublicUrl as exc:
            parser.error(f"--public-url: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    autocomplete(parser)  # a shell asking for completions is answered here (commands/completion.py)
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is _cmd_serve:
        _check_serve_options(parser, args)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
