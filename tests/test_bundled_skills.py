"""The default set's two skills, bundled by name (issue 28 item 2): staged into the workdir as
`tools/<name>/skill.md`, listed in MURMUR.md, and their text reaches the model when it calls one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundledkit import bundled
from hookkit import Recorder, end_turn, hooked_capsule, run_session, tool_call
from loopkit import stage, trace_events
from murmurd.staging.bundled import BUNDLED_ROOT

CREATE, CHECKPOINT = "murmur-skill-create-manifest", "murmur-skill-investigation-checkpoint"


@pytest.mark.anyio
async def test_both_skills_are_staged_listed_and_their_text_reaches_the_model(tmp_path: Path, host) -> None:
    responses = [tool_call("c0", CREATE, {}), tool_call("c1", CHECKPOINT, {}), end_turn()]
    capsule = hooked_capsule(tmp_path, [bundled(CREATE, "skill", version="0.1.0"), bundled(CHECKPOINT, "skill")],
                             responses)
    staged = stage(capsule, host, tmp_path)
    root = staged.workdir.root
    for name in (CREATE, CHECKPOINT):
        shipped = (BUNDLED_ROOT / name / "skill.md").read_text()
        assert (root / "tools" / name / "skill.md").read_text() == shipped
        assert staged.artifacts[name].resolved.origin.startswith("bundled:")
    inventory = staged.workdir.inventory.read_text()
    assert f"- `{CREATE}` (v0.1.0, skill): Reference for writing a murmur.yaml" in inventory
    assert f"- `{CHECKPOINT}` (v0.1.0, skill): Convention for recording investigation verdicts" in inventory

    events = Recorder()
    (outcome,) = await run_session(staged, host, "write me a manifest", events=events)
    assert outcome.ok, outcome.error
    texts = dict(events.tool_results)
    assert "# Writing a murmur.yaml" in texts[CREATE] and "implementation: native" in texts[CREATE]
    assert "`investigations` array" in texts[CHECKPOINT] and "ruled-out" in texts[CHECKPOINT]
    # what the model is sent next: the skill's guidance as the tool results
    tool_messages = [m.text for m in outcome.messages if m.role == "tool"]
    assert tool_messages == [texts[CREATE], texts[CHECKPOINT]]
    calls = [e for e in trace_events(staged) if e["event_type"] == "skill_call"]
    assert len(calls) == 2, calls


def test_a_version_other_than_the_bundled_one_is_refused_with_the_way_out(tmp_path: Path, host) -> None:
    from murmurd.staging.stage import StagingError

    capsule = hooked_capsule(tmp_path, [bundled(CHECKPOINT, "skill", version="9.9.9")], [end_turn()])
    with pytest.raises(StagingError) as caught:
        stage(capsule, host, tmp_path)
    assert "version 9.9.9 asked for, but murmurd" in str(caught.value)
    assert f"bundles {CHECKPOINT} 0.1.0" in str(caught.value)


def test_murmurd_list_shows_this_slice_of_the_default_set() -> None:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "murmurd", "list", "--json"], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: (r["version"], r["runtime"]) for r in json.loads(proc.stdout)}
    assert rows[CREATE] == rows[CHECKPOINT] == ("0.1.0", "skill")
    assert rows["murmur-driver-deepseek"] == ("0.1.0", "driver")
    assert rows["murmur-tool-registry-search"] == rows["murmur-tool-create"] == ("0.1.0", "tool")
