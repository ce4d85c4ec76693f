"""Native tools (`implementation: native`): a host executable run once per call, as upstream's
native dispatch does (default-artifacts §2.2; the python-native guide).

- **Containment.** The executable runs through the shell runner's own path
  (`shell.run_prepared` → `spawn_confined`): the capsule's containment class, rlimits, cgroups,
  network namespace and egress relay, synthetic `HOME`, credential strip, `strip_env` and
  `baseline_env`, then the session's identity (`MURMUR_CAPSULE_*`, `MURMUR_SESSION_ID`, ...).
  It runs even when the capsule allows no shell binary, as upstream's. What runs is the resolved
  payload (a local artifact's `bin/<name>`, or the registry cache's copy): outside every workdir,
  so no capsule process can rewrite it, and executable under Landlock, which forbids execution
  beneath the workdir.
- **Protocol.** cwd is the workdir; stdin gets one JSON object
  `{"data": <the call's input as a JSON string>, "log_path": "logs/tool-<name>.log"}` and is
  closed; stdout must hold exactly one JSON object with `status` (`passed|failed|error`),
  `summary`, `data` (a string, or any JSON value, which is serialized) and optionally
  `data_path`/`metadata` (`state_effect`, `resource_id`). Exit status 0.
- **Failures** are error results fed back to the model, never a failed task: the deadline
  (`limits.deadline_seconds` of the artifact, 600 s by default; the whole group is killed), a
  non-zero exit or a signal (with the end of its stderr), output that is not one JSON object,
  output past `MAX_OUTPUT_BYTES`, a result without a valid `status`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd import workdir_fs
from murmurd.containment.closure import script_interpreters
from murmurd.staging.bundled_native import declared_binaries, helper_runtime, native_extensions, native_runtime
from murmurd.workdir import log_file
from murmurd.session.native_stores import with_stores
from murmurd.session.shell import run_prepared
from murmurd.session.shell_env import child_environment
from murmurd.session.shell_model import CancelFlag, ShellInvocation, ShellOutcome, ShellPolicy

MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # a native tool's stdout (its one JSON object)
STDERR_TAIL_CHARS = 2000
STATUSES = ("passed", "failed", "error")


class NativeToolError(Exception):
    """A native tool call that produced no result: the message is what the model sees."""


@dataclass(frozen=True)
class NativeResult:
    """One native call's result, normalized into the tool-result envelope."""

    status: str
    summary: str | None
    data: str | None
    data_path: str | None
    metadata: dict[str, str]
    exit_code: int


def native_policy(shell: ShellPolicy, deadline_seconds: float) -> ShellPolicy:
    """The capsule's shell policy with the tool's deadline and room for its JSON answer."""
    return dataclasses.replace(shell, timeout_seconds=deadline_seconds, max_stream_bytes=MAX_OUTPUT_BYTES,
                               max_log_stream_bytes=max(shell.max_log_stream_bytes, MAX_OUTPUT_BYTES))


def native_invocation(policy: ShellPolicy, name: str, executable: Path, host_env: Mapping[str, str],
                      manifest_extra: Mapping[str, Any] | None = None) -> ShellInvocation:
    """The checked call: the executable's absolute path, `argv[0]` the tool's name, the shell's
    environment rules; what it may read and execute is the executable and its interpreter's
    closure (`read_paths`), the binaries the tool's own manifest says it runs and, for a bundled
    tool, the extension modules it imports (murmurd/staging/bundled_native.py)."""
    path = os.path.abspath(executable)
    env = child_environment(policy, (), host_env)
    also = (*declared_binaries(dict(manifest_extra or {}), env.get("PATH")), *native_extensions(Path(path)))
    return ShellInvocation(name, os.path.realpath(path), path, [name], env,
                           allowed_paths=(*read_paths(Path(path), env.get("PATH")), *also))


def read_paths(executable: Path, path_env: str | None) -> list[str]:
    """What a native call must be able to read and execute: the executable and, for a `#!`
    script, its interpreter (through `env`, the one the child's `PATH` finds)."""
    real = os.path.realpath(executable)
    return [real, *(script_interpreters(real, path_env or os.defpath) or ())]


_PYTHON = re.compile(r"python3(\.\d+)?")


def interpreter_runtime(interpreters: list[str]) -> tuple[tuple[str, bool], ...]:
    """The standard library a native script's interpreter loads, granted read+list as an
    `interpreter_runtime` entry would be: for CPython, `<prefix>/lib/python3.N` beside its binary.
    Derived from the binary's path alone (the interpreter is never run to ask)."""
    found: list[tuple[str, bool]] = []
    for interpreter in interpreters:
        name = os.path.basename(interpreter)
        if not _PYTHON.fullmatch(name):
            continue
        library = Path(interpreter).parent.parent / "lib" / name
        if library.is_dir() and (str(library), True) not in found:
            found.append((str(library), True))
    return tuple(found)


def with_runtime(policy: ShellPolicy, invocation: ShellInvocation) -> ShellPolicy:
    """The policy with the invocation's interpreter runtime added to the capsule's grants."""
    plan = policy.containment
    extra = (*interpreter_runtime(list(invocation.allowed_paths[1:])), *native_runtime(Path(invocation.executable)),
             *helper_runtime(invocation.allowed_paths[1:]))
    if plan is None or not extra:
        return policy
    return dataclasses.replace(policy, containment=dataclasses.replace(plan, runtime=(*plan.runtime, *extra)))


def request_bytes(data: str | None, log_path: str | None) -> bytes:
    """The one JSON request a native tool reads on stdin (`data`: the call's input, JSON text)."""
    return (json.dumps({"data": data, "log_path": log_path}) + "\n").encode()


def call_native(staged: Any, shell: ShellPolicy, name: str, data: str | None,
                cancel: CancelFlag | None = None) -> NativeResult:
    """One call of the staged capsule's native tool `name` under the capsule's shell policy."""
    policy = native_policy(shell, float(staged.grant_for(name).limits.deadline_seconds))
    resolved = staged.artifacts[name].resolved
    log = staged.workdir.book(log_file(f"tool-{name}.log"))
    try:  # the tool opens the path it is given: its directory must be there (made when first needed)
        workdir_fs.make_dirs(staged.workdir.root, log.rpartition("/")[0])
    except OSError as exc:
        raise NativeToolError(f"native tool {name}: its log is refused: {exc}") from None
    request = request_bytes(data, log)
    invocation = native_invocation(policy, name, resolved.payload, staged.host_env, resolved.manifest.model_extra)
    policy, invocation = with_stores(staged, name, with_runtime(policy, invocation), invocation)
    return run_native(policy, invocation, request, cancel)


def run_native(policy: ShellPolicy, invocation: ShellInvocation, request: bytes,
               cancel: CancelFlag | None = None) -> NativeResult:
    """Run one call to completion (blocking: call it from a worker thread). Raises
    `NativeToolError` for a timeout, a crash or bad output; the shell runner's own errors
    (`ShellFailed`, `WorkdirExceeded`) pass through."""
    outcome = run_prepared(policy, invocation, cancel, stdin_data=request)
    return parse_outcome(invocation.binary, outcome, policy.timeout_seconds)


def _stderr_tail(outcome: ShellOutcome) -> str:
    text = outcome.stderr.strip()
    if not text:
        return ""
    tail = text[-STDERR_TAIL_CHARS:]
    return f"; stderr: {tail}"


def parse_outcome(name: str, outcome: ShellOutcome, deadline: float) -> NativeResult:
    """What the process produced as a result, or why it produced none (pure)."""
    label = f"native tool {name}"
    if outcome.timed_out:
        raise NativeToolError(f"{label} timed out after {deadline:g} s; its process group was killed")
    if outcome.resource_limit is not None:
        raise NativeToolError(f"{label} was stopped by capabilities.resources.{outcome.resource_limit}"
                              f"{_stderr_tail(outcome)}")
    if outcome.exit_code != 0:
        signal = f" (killed by signal {outcome.exit_code - 128})" if outcome.exit_code > 128 else ""
        raise NativeToolError(f"{label} exited with code {outcome.exit_code}{signal}{_stderr_tail(outcome)}")
    if outcome.stdout_bytes > MAX_OUTPUT_BYTES:
        raise NativeToolError(f"{label} wrote {outcome.stdout_bytes} bytes to stdout; a result is at most "
                              f"{MAX_OUTPUT_BYTES} bytes")
    text = outcome.stdout.strip()
    try:
        value = json.loads(text)
    except ValueError as exc:
        shown = text[:200] if text else "(nothing)"
        raise NativeToolError(f"{label}: its output is not one JSON object ({exc}); stdout began: {shown!r}") from None
    if not isinstance(value, dict):
        raise NativeToolError(f"{label}: its output is not one JSON object (a JSON {type(value).__name__})")
    return _envelope(label, value, outcome.exit_code)


def _envelope(label: str, value: dict[str, Any], exit_code: int) -> NativeResult:
    status = value.get("status")
    if status not in STATUSES:
        raise NativeToolError(f"{label}: its result's status is {status!r}, not one of {', '.join(STATUSES)}")
    data = value.get("data")
    if data is not None and not isinstance(data, str):
        data = json.dumps(data)
    summary = value.get("summary")
    data_path = value.get("data_path")
    metadata_value = value.get("metadata")
    metadata = ({k: v for k, v in metadata_value.items() if isinstance(k, str) and isinstance(v, str) and v}
                if isinstance(metadata_value, dict) else {})
    return NativeResult(status, summary if isinstance(summary, str) else None, data,
                        data_path if isinstance(data_path, str) and data_path else None, metadata, exit_code)
