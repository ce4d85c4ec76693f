"""A task's test runs against their pre-edit baselines: the verdict, its record, its reason (pure).

The published hook's rules (murmur-hook-regression-verifier 0.2.0): a command's first run before
the task's first edit is its baseline, every later run its current result; at task end each
command with both is compared. A test failing now that did not fail in the baseline is a
regression, and so are passing tests lost (`lost_passing`); losing at least 90% of the baseline's
passing tests at once is a collection failure (an import or module-load break).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testruns import Run, parse_run

COLLECTION_FAILURE_RATIO = 0.9
EDIT_TOOLS = ("murmur-tool-editor", "murmur-tool-create")
TEST_COMMAND_MARKERS = ("pytest", "cargo test", "go test", "npx jest", "npm test", "yarn test")


@dataclass(frozen=True)
class CommandVerdict:
    command: str
    baseline_passed: int
    current_passed: int
    regressions: list[str]
    lost_passing: int
    collection_failure: bool
    newly_passing: list[str]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions) or self.lost_passing > 0


@dataclass(frozen=True)
class Verdict:
    reopen: bool
    collection_failure: bool
    regressions: list[str]
    newly_passing: list[str]
    commands: list[CommandVerdict]


@dataclass
class Observations:
    """One task's runs (kept across its reopens, reset at the next task)."""

    baselines: dict[str, Run] = field(default_factory=dict)
    currents: dict[str, Run] = field(default_factory=dict)
    edited: bool = False

    def reset(self) -> None:
        self.baselines.clear()
        self.currents.clear()
        self.edited = False

    def tool(self, name: str) -> None:
        if name in EDIT_TOOLS:
            self.edited = True

    def shell(self, command: str, stdout: str, stderr: str) -> None:
        if not any(marker in command for marker in TEST_COMMAND_MARKERS):
            return
        run = parse_run(f"{stdout}\n{stderr}")
        if run is None:
            return
        if not self.edited and command not in self.baselines:
            self.baselines[command] = run
        else:
            self.currents[command] = run

    def verdict(self) -> Verdict:
        commands = []
        for command in sorted(self.baselines):
            current = self.currents.get(command)
            if current is None:
                continue
            base = self.baselines[command]
            lost = max(0, base.passed - current.passed)
            commands.append(CommandVerdict(
                command, base.passed, current.passed,
                sorted(set(current.failed) - set(base.failed)), lost,
                base.passed > 0 and lost >= COLLECTION_FAILURE_RATIO * base.passed,
                sorted(set(base.failed) - set(current.failed))))
        return Verdict(any(c.regressed for c in commands), any(c.collection_failure for c in commands),
                       sorted({name for c in commands for name in c.regressions}),
                       sorted({name for c in commands for name in c.newly_passing}), commands)


def record(verdict: Verdict, task_id: str, exit_status: str) -> dict[str, Any]:
    """The line appended to `regression-verifier.jsonl`, the same keys for either decision."""
    return {
        "record_type": "regression_verdict", "task_id": task_id, "task_exit_status": exit_status,
        "decision": "reopen" if verdict.reopen else "clean", "reopen": verdict.reopen,
        "collection_failure": verdict.collection_failure, "regressions": verdict.regressions,
        "newly_passing": verdict.newly_passing,
        "commands": [{"command": c.command, "baseline_passed": c.baseline_passed,
                      "current_passed": c.current_passed, "regressions": c.regressions,
                      "lost_passing": c.lost_passing, "collection_failure": c.collection_failure,
                      "newly_passing": c.newly_passing} for c in verdict.commands],
    }


def reason(verdict: Verdict) -> str:
    """The feedback the reopened task starts from: what broke, and that it is a failed fix."""
    parts = ["Regression check failed: your change broke tests that were passing before you started "
             "editing this task. A change that makes a previously-passing test fail is a failed fix, "
             "not a partial success: revise it so those tests pass again, or revert it."]
    for c in verdict.commands:
        if not c.regressed:
            continue
        if c.collection_failure:
            parts.append(
                f"- `{c.command}`: COLLECTION FAILURE. {c.lost_passing} of {c.baseline_passed} "
                "previously-passing tests no longer pass: nearly the whole module broke at once, the "
                "signature of an import- or collection-time break (a syntax error, a bad import, a "
                "module-load panic), not of a few failing assertions. Make the module load again first.")
            continue
        line = f"- `{c.command}`: {max(len(c.regressions), c.lost_passing)} previously-passing test(s) now fail"
        if c.regressions:
            line += ": " + ", ".join(c.regressions)
        unnamed = c.lost_passing - len(c.regressions)
        if unnamed > 0:
            line += f" (and {unnamed} more previously-passing test(s) no longer appear among the passing)"
        parts.append(line + ".")
    if verdict.newly_passing:
        parts.append(f"(For context only: {len(verdict.newly_passing)} test(s) pass now that did not in the "
                     f"baseline: {', '.join(verdict.newly_passing)}. Good, but it does not offset the "
                     "regressions above.)")
    return "\n\n".join(parts)
