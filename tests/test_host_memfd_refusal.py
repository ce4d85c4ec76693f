"""The kernel refusing a memfd seal for a moment does not fail a call (CI, 2026-12-06: a driver's
first turn on a loaded two-core machine failed with "cannot add seals to the memfd").

Each test runs `tests/refused_seals.py` in a process of its own: a seccomp filter hands the
call's `fcntl(F_ADD_SEALS)` to a supervisor thread that answers EBUSY as often as asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from murmurd.host.prelinked import INSTANTIATE_ATTEMPTS

SCRIPT = Path(__file__).with_name("refused_seals.py")


def call_with_refused_seals(wasm: Path, refusals: int) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(wasm), str(refusals)],
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout), done.stderr


def test_a_refused_seal_is_tried_again_and_the_call_succeeds(artifacts) -> None:
    outcome, stderr = call_with_refused_seals(artifacts.fixture("counter"), INSTANTIATE_ATTEMPTS - 1)
    assert outcome == {"refused": INSTANTIATE_ATTEMPTS - 1, "passed": 1, "result": {"calls": 1, "seen": ["sealed"]}}
    assert f"instantiating counter: cannot add seals to the memfd (attempt 1 of {INSTANTIATE_ATTEMPTS}); trying again" in stderr


def test_a_seal_refused_every_time_ends_the_call_with_an_instantiation_error(artifacts) -> None:
    outcome, _ = call_with_refused_seals(artifacts.fixture("counter"), INSTANTIATE_ATTEMPTS)
    assert outcome == {"refused": INSTANTIATE_ATTEMPTS, "passed": 0, "error": "InstantiationError",
                       "message": "counter: cannot instantiate: cannot add seals to the memfd"}


def test_with_no_refusal_the_seal_is_made_once(artifacts) -> None:
    """The contrast that shows the filter sees wasmtime's seal: one seal, let through."""
    outcome, stderr = call_with_refused_seals(artifacts.fixture("counter"), 0)
    assert outcome == {"refused": 0, "passed": 1, "result": {"calls": 1, "seen": ["sealed"]}}
    assert "trying again" not in stderr
