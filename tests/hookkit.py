"""Helpers for hook tests: hook variants of one built component, capsules that run them, their logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


from conftest import EXAMPLES
from loopkit import driver_capsule, local
from murmurd.hooks.dispatch import DispatchSettings
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.session.events import TaskEvents
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.stage import StagedCapsule

ECHO = EXAMPLES / "echo"


def hook_variant(root: Path, name: str, wasm: Path, *, binding: str | None = None, mode: str = "blocking",
                 policy: str = "none") -> Path:
    """An artifact directory holding `wasm` under its own `murmur.yaml` contract (no rebuild)."""
    directory = root / "hooks" / name
    directory.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"name": name, "version": "0.1.0", "runtime": "hook", "execution_mode": mode,
                                "commit_policy": policy}
    if binding is not None:
        manifest["binding"] = binding
    (directory / "murmur.yaml").write_text(dump_yaml(manifest, sort_keys=True))
    shutil.copyfile(wasm, directory / f"{name}.wasm")
    return directory


def hook_ref(root: Path, name: str, wasm: Path, *, config_var: str | None = None, overflow: str | None = None,
             capabilities: dict[str, Any] | None = None, **contract: Any) -> dict[str, Any]:
    """The capsule's `artifacts[]` entry for a hook variant; `config_var` is granted to it."""
    caps = dict(capabilities or {})
    if config_var is not None:
        caps["env"] = {"allow": [config_var]}
    extra: dict[str, Any] = {}
    if caps:
        extra["capabilities"] = caps
    if overflow is not None:
        extra["on_overflow"] = overflow
    return local(name, "hook", hook_variant(root, name, wasm, **contract), **extra)


def tool_call(call_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": call_id, "name": name, "input": tool_input}]}


def end_turn(text: str = "done") -> dict[str, Any]:
    return {"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def hooked_capsule(root: Path, hooks: list[dict[str, Any]], responses: list[dict[str, Any]], **extra: Any) -> Path:
    """A scripted capsule with the echo tool and these hooks (in this order)."""
    return driver_capsule(root, "scripted-driver", {"responses": responses},
                          extra_artifacts=[local("echo", "tool", ECHO), *hooks], **extra)


def hook_log(workdir: Path, name: str) -> list[str]:
    path = workdir / "logs" / f"hook-{name}.log"
    return path.read_text().splitlines() if path.exists() else []


def hook_events(workdir: Path, name: str) -> list[dict[str, Any]]:
    """The JSON event lines a hook logged (its own output), in order."""
    return [json.loads(line) for line in hook_log(workdir, name) if line.startswith("{")]


def runtime_lines(workdir: Path, name: str) -> list[str]:
    """The lines murmurd itself wrote to the hook's log (faults, failures)."""
    return [line for line in hook_log(workdir, name) if line.startswith("[murmurd")]


class Recorder(TaskEvents):
    """Keeps what a task streamed: artifacts and tool results."""

    def __init__(self) -> None:
        self.artifacts: list[tuple[str, Any]] = []
        self.tool_results: list[tuple[str, str]] = []

    def artifact(self, tool_name: str, content: Any) -> None:
        self.artifacts.append((tool_name, content))

    def tool_result(self, tool_name: str, content: str) -> None:
        self.tool_results.append((tool_name, content))


async def run_session(staged: StagedCapsule, host: ComponentHost, *tasks: TaskSpec | str,
                      settings: DispatchSettings | None = None, events: TaskEvents | None = None) -> list[TaskOutcome]:
    """Open a session, run `tasks` in order, close it (queues drained)."""
    session = Session(staged, host, hook_settings=settings)
    await session.open()
    outcomes = []
    try:
        for i, task in enumerate(tasks):
            spec = task if isinstance(task, TaskSpec) else TaskSpec(f"tsk_{i:032x}", task)
            outcomes.append(await session.run_task(spec, events))
    finally:
        await session.close()
    return outcomes


def faults(trace: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(hook_name, event, arm) of every hook_dispatch_error line."""
    return [(e["hook_name"], e["event"], e["arm"]) for e in trace if e["event_type"] == "hook_dispatch_error"]
