"""`lifecycle`: the reopen budget's two names agree; a concurrency bound only where tasks queue."""

from __future__ import annotations

from murmurd.manifest.checks.context import Context
from murmurd.manifest.diagnostics import Diagnostic, diagnostic


def rule_lifecycle(ctx: Context) -> list[Diagnostic]:
    """The reopen budget's two names (the seed's `lifecycle.max_task_reopens`, upstream v0.2's
    `inference.max_task_reopens`) must not disagree; a concurrency bound applies to `queue` only."""
    lifecycle = ctx.section("lifecycle") or {}
    found: list[Diagnostic] = []
    seed = lifecycle.get("max_task_reopens")
    older = (ctx.section("inference") or {}).get("max_task_reopens")
    if isinstance(seed, int) and isinstance(older, int) and seed != older:
        rule = f"disagrees with inference.max_task_reopens ({older}); set the budget once, under lifecycle"
        found.append(diagnostic("E-LIF-001", "lifecycle.max_task_reopens", rule, seed))
    bound = lifecycle.get("max_concurrent_tasks")
    acceptance = lifecycle.get("task_acceptance", "single")
    if isinstance(bound, int) and bound > 1 and acceptance != "queue":
        rule = f"applies to task_acceptance: queue; with {acceptance} one task runs at a time"
        found.append(diagnostic("W-LIF-001", "lifecycle.max_concurrent_tasks", rule, bound))
    return found

