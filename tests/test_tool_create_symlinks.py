"""murmur-tool-create against a link the guest planted (attack review, issue 28): `tools` (or
`tools/<name>`) pointing out of the workdir never has the scaffold written through it; the WASM
tool's preopen refuses the escape."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage

pytestmark = pytest.mark.anyio
TOOL = "murmur-tool-create"


async def test_a_planted_link_out_of_the_workdir_is_never_written_through(tmp_path: Path, host) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    requests = [{"type": "tool", "name": "first"}, {"type": "tool", "name": "second"}]
    responses = [tool_call(f"c{i}", TOOL, r) for i, r in enumerate(requests)] + [end_turn()]
    staged = stage(hooked_capsule(tmp_path, [bundled(TOOL, version="0.1.0")], responses), host, tmp_path)
    tools = staged.workdir.root / "tools"
    tools.mkdir(exist_ok=True)
    os.symlink(outside, tools / "first")  # the scaffold's own directory
    os.symlink(outside, tools / "second-link")
    os.symlink(outside / "second", tools / "second")  # a dangling link the scaffold would create through
    events = Recorder()
    (outcome,) = await run_session(staged, host, "scaffold", events=events)
    assert outcome.ok, outcome.error
    assert list(outside.iterdir()) == [], [t for _n, t in events.tool_results]
