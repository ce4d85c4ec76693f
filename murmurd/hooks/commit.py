"""The commit table (seed: "What each handler can commit"), as one pure judgement.

A handler may return any `hook-output` arm, but the runtime commits one arm per event:
`COMMITTED_ARM[handler]`, and `deny` only at the decision-point dispatch of a gated event.
`none` is always silent; any other arm is a fault: discarded, logged and traced, never fatal.
An async hook commits nothing (nothing waits for its return value), so every non-`none` arm it
returns is a fault too. Issue 10's arms (`seed-context`, `replace-context`, `reopen-task`) pass
through here like the others, so their semantics plug in behind a `Committed`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from murmurd.manifest.hooks import COMMITTED_ARM
from murmurd.text import valid_json_value


class Dispatch(str, Enum):
    """Which dispatch of an event a handler answers."""

    ONCE = "once"  # every handler but the gated two
    DECISION = "decision"  # on-tool-call / on-shell before the call (`outcome: none`)
    OBSERVATION = "observation"  # on-tool-call / on-shell after the call


@dataclass(frozen=True)
class Committed:
    """An arm the runtime applies; `value` is the arm's payload (an artifact already parsed)."""

    arm: str
    value: Any


@dataclass(frozen=True)
class Fault:
    """A discarded arm and why: logged to `logs/hook-<name>.log` and traced as `hook_dispatch_error`."""

    arm: str
    reason: str


Verdict = Committed | Fault | None  # None: `none`, silent

ARTIFACT_MAX_BYTES = 1024 * 1024
"""The default cap on one hook artifact (its JSON text, UTF-8): each one is kept in the task, the
stream's replay buffer and every subscriber's queue, so a hook returning 16 MiB a turn would
otherwise hold the daemon's memory. Over it: a fault (discarded, logged, `hook_dispatch_error`)."""


def judge(handler: str, dispatch: Dispatch, arm: str, value: Any = None, *, asynchronous: bool = False,
          artifact_max_bytes: int = ARTIFACT_MAX_BYTES) -> Verdict:
    """What the runtime does with `arm` returned by `handler` at `dispatch`."""
    if arm == "none":
        return None
    if asynchronous:
        return Fault(arm, "an async hook commits nothing; its return value is never applied")
    honoured = COMMITTED_ARM.get(handler)
    if arm != honoured:
        what = f"{handler} commits only {honoured!r}" if honoured else f"{handler} commits nothing"
        return Fault(arm, what)
    if arm == "deny" and dispatch is not Dispatch.DECISION:
        return Fault(arm, "deny is honoured at the decision point only; the call already ran")
    if arm == "artifact":
        return _artifact(value, artifact_max_bytes)
    return Committed(arm, value)


def _over(text: str, cap: int) -> bool:
    """Whether `text` is more than `cap` bytes of UTF-8, encoding it only when its length cannot tell."""
    if len(text) > cap:
        return True  # every character is at least one byte
    if len(text) * 4 <= cap:
        return False  # and at most four
    return len(text.encode("utf-8", "surrogatepass")) > cap


def _artifact(value: Any, max_bytes: int) -> Committed | Fault:
    """An `artifact` is committed only as a JSON object (what an SSE `artifact` frame carries);
    its text is made valid Unicode (a `\\ud83d` escape would be a lone surrogate). One over
    `max_bytes` is refused before it is parsed."""
    if isinstance(value, str) and _over(value, max_bytes):
        return Fault("artifact", f"an artifact of {len(value)} characters is over the cap of {max_bytes} bytes "
                                 "per hook artifact")
    try:
        parsed = valid_json_value(json.loads(value)) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return Fault("artifact", "an artifact must be a JSON object")
    return Committed("artifact", parsed)
