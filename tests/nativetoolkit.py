"""Helpers for tests of murmurd's bundled native tools through real sessions: a scripted
capsule naming the tool by name (no source, no `shell.allow`), one call per input."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.staging.stage import StagedCapsule


async def native_calls(tmp_path: Path, host, name: str, inputs: list[dict[str, Any] | tuple[str, dict[str, Any]]], *,
                       prepare: Callable[[Path], None] | None = None, also: tuple[str, ...] = (),
                       **capsule: Any) -> tuple[list[str], list[bool], StagedCapsule]:
    """Run one task calling bundled tool `name` once per input (or the tool an input's
    `(tool, input)` pair names, one of `also`); (result texts, is_error flags, the staged
    capsule). `prepare(workdir)` runs after staging, before the task."""
    steps = [step if isinstance(step, tuple) else (name, step) for step in inputs]
    responses = [tool_call(f"c{i}", tool, value) for i, (tool, value) in enumerate(steps)] + [end_turn()]
    capsule.setdefault("inference", {"max_turns": len(inputs) + 5})
    entries = [bundled(tool) for tool in (name, *also)]
    staged = stage(hooked_capsule(tmp_path, entries, responses, **capsule), host, tmp_path)
    assert all(staged.artifacts[tool].resolved.native for tool in (name, *also))
    if prepare is not None:
        prepare(staged.workdir.root)
    events = Recorder()
    (outcome,) = await run_session(staged, host, "go", events=events)
    assert outcome.ok, outcome.error
    calls = [e for e in trace_events(staged) if e["event_type"] == "tool_call" and e.get("tool_name") in (name, *also)]
    assert len(calls) == len(inputs)
    return [text for _n, text in events.tool_results], [c["status"] == "error" for c in calls], staged


def as_json(text: str) -> Any:
    """A result text that is `data` (JSON); a failure's text leads with its summary line."""
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text.split("\n", 1)[1])


def git_repo(workdir: Path) -> Path:
    """`workdir/proj`: a real git repository with one commit of `calc.py` and that file edited since."""
    repo = workdir / "proj"
    repo.mkdir()
    run = lambda *args: subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("config", "user.name", "Ada Test")
    run("config", "user.email", "ada@example.test")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    run("add", "calc.py")
    run("commit", "-q", "-m", "calc: add")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    return repo
