"""A capsule whose only subprocesses are native tools still hears what its containment does not
enforce (issue 28 item 1): native tools run under the shell children's containment, so the
`W-SEC` warnings (and a floor's refusal) apply to them, at `validate` and at every launch, even
with no `shell.allow`. A capsule with neither hears none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bundledkit import bundled
from hookkit import end_turn, hooked_capsule
from loopkit import stage

ROOT = Path(__file__).resolve().parent.parent
NATIVE = "murmur-tool-test-report"


def _validate(capsule: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "murmurd", "validate", str(capsule), "--json", "--no-env-file"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    return json.loads(proc.stdout)


def _sec(diagnostics: list[dict]) -> list[dict]:
    return [d for d in diagnostics if d["code"].startswith("W-SEC-") and d["code"] != "W-SEC-008"]


def _diagnostics(report: dict) -> list[dict]:
    return report["diagnostics"]


def test_validate_warns_for_a_capsule_whose_only_subprocesses_are_native_tools(tmp_path: Path) -> None:
    native = hooked_capsule(tmp_path / "native", [bundled(NATIVE)], [end_turn()])
    plain = hooked_capsule(tmp_path / "plain", [], [end_turn()])
    found = _sec(_diagnostics(_validate(native)))
    assert found, "no W-SEC warning for a capsule running a native tool"
    assert all(NATIVE in d["path"] and d["path"].startswith("artifacts[") for d in found
               if d["path"].startswith("artifacts") or "shell.allow" in d["path"]), found
    assert not any("shell.allow" in d["path"] for d in found)  # it has no shell.allow to blame
    assert _sec(_diagnostics(_validate(plain))) == []


def test_every_launch_repeats_the_warnings_for_a_bundled_native_tool(tmp_path: Path, host) -> None:
    staged = stage(hooked_capsule(tmp_path / "native", [bundled(NATIVE)], [end_turn()]), host, tmp_path)
    assert staged.artifacts[NATIVE].resolved.native
    launched = [d for d in staged.report.warnings if d.code.startswith("W-SEC-") and d.code != "W-SEC-008"]
    assert launched and all(NATIVE in d.path for d in launched if d.path.startswith("artifacts"))
    plain = stage(hooked_capsule(tmp_path / "plain", [], [end_turn()]), host, tmp_path)
    assert [d for d in plain.report.warnings if d.code.startswith("W-SEC-")] == []
