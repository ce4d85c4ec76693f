import json
from pathlib import Path
import pytest
from hookkit import *
from loopkit import stage, run_tasks, trace_events
from conftest import EXAMPLES
pytestmark = pytest.mark.anyio

async def test_smoke(tmp_path, host, artifacts):
    debug = artifacts.example("debug-hook")
    capsule = hooked_capsule(tmp_path, [hook_ref(tmp_path, "debug-hook", debug)],
        [tool_call("c1", "echo", {"text": "x"}), tool_call("c2", "printf", {"command": "hi"}), end_turn()],
        capabilities={"shell": {"allow": ["printf"]}})
    staged = stage(capsule, host, tmp_path)
    (o,) = await run_tasks(staged, host, "go")
    assert o.ok, o.error
    for l in hook_log(staged.workdir.root, "debug-hook"): print(l[:300])
    for e in trace_events(staged): print(e)
