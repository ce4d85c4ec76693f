"""`murmurd trace` as text: upstream's sections and tables, aligned, colour only on a terminal.

Every string taken from a trace is hostile (a tool name, an input, a hook's reason): control
characters are shown escaped, so a trace cannot move the cursor or recolour the terminal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from murmurd.terminal import safe
from murmurd.traceview import units
from murmurd.traceview.aggregate import Report, Stat
from murmurd.traceview.compare import Row
from murmurd.traceview.labels import distinct_labels
from murmurd.traceview.metrics import Call, SessionMetrics, Turn

INPUT_WIDTH = 120
VERBOSE_WIDTH = 60
REASON_WIDTH = 80
def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width] + "…"


@dataclass(frozen=True)
class Style:
    colour: bool = False

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def head(self, text: str) -> str:
        return self._wrap("1", text)

    def ok(self, text: str) -> str:
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        return self._wrap("31", text)

    def warn(self, text: str) -> str:
        return self._wrap("33", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell (by visible characters); the last column unpadded."""
    widths = [max(len(_visible(r[i])) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    out = []
    for row in rows:
        cells = [cell + " " * (widths[i] - len(_visible(cell))) if i < len(row) - 1 else cell
                 for i, cell in enumerate(row)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _visible(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def section(title: str, style: Style) -> str:
    return style.head(f"── {title} ──")


def compact_json(value: Any) -> str:
    """`value` as compact JSON; a value nested past what the encoder allows is shown as such."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (RecursionError, ValueError):
        return "(nested too deeply to show)"


def compact_input(value: Any) -> str:
    return cut(safe(compact_json(value)), INPUT_WIDTH)


def _mark(call: Call, style: Style) -> str:
    return style.ok("✓") if call.ok else style.bad("✗")


def _tool_rows(m: SessionMetrics, style: Style) -> list[list[str]]:
    rows = []
    for step in m.steps:
        tools = [c for c in step.calls if c.kind == "tool"]
        if not tools:
            skills = [c for c in step.calls if c.kind == "skill"]
            what = f"skill {safe(skills[0].name)}" if skills else safe(step.decision)
            rows.append([f"turn {step.turn}", style.dim(what)])
        for call in tools:
            rows.append([f"turn {step.turn}", safe(call.name), units.duration(call.duration_ms), _mark(call, style),
                         compact_input(call.input)])
    return rows


def show(m: SessionMetrics, style: Style) -> str:
    lines = [section("Session", style)]
    lines += table([["session:", safe(m.session_id)], ["capsule:", f"{safe(m.capsule_name)} v{safe(m.capsule_version)}"],
                    ["model:", safe(m.model)], ["status:", _status(m.exit_status, style)],
                    ["duration:", units.duration(m.duration_ms)]])
    lines += [section("Turns", style), f"  count: {m.turns}  (max: {m.max_turns})"]
    lines.append(section("Tokens", style))
    lines += table([
        ["input:", units.count(m.input_tokens), f"(avg {units.count(m.per_turn(m.input_tokens))}/turn)"],
        ["output:", units.count(m.output_tokens), f"(avg {units.count(m.per_turn(m.output_tokens))}/turn)"],
        ["total:", units.count(m.input_tokens + m.output_tokens)],
    ])
    lines += _token_sources(m, style)
    lines.append(section("Tool calls", style))
    lines.append(f"  count: {len(m.tools)}  ({m.tool_ok} ok, {m.tool_errors} error)  "
                 f"success {units.percent(m.tool_success_rate)}")
    lines.append(f"  latency: avg {units.duration(m.avg_tool_ms)}")
    rows = _tool_rows(m, style)
    if rows:
        lines += table(rows)
    lines.append(section("Redundant calls", style))
    lines.append(f"  count: {len(m.redundant)}")
    if m.redundant:
        lines += table([[f"turn {r.turn}", safe(r.tool_name), style.warn(safe(r.resource)), f"(re-reads turn {r.prior_turn})"]
                        for r in m.redundant])
    lines += _skills(m, style) + _shells(m, style)
    lines.append(section("Compaction", style))
    if m.compaction is None:
        lines.append("  fired: no")
    else:
        turn, before, after = m.compaction
        lines.append(f"  fired: yes  at turn {turn}  ({units.count(before)} → {units.count(after)} tokens)")
    if m.reopens:
        lines.append(section("Reopens", style))
        lines += table([[f"reopen {r.number}", f"by {safe(r.hook_name)}", f'"{cut(safe(r.reason), REASON_WIDTH)}"']
                        for r in m.reopens])
    if len(m.tasks) > 1:
        lines.append(section("Tasks", style))
        labels = distinct_labels([t.task_id for t in m.tasks])
        lines += table([[f"task {i}", safe(labels[t.task_id]), f"turns: {t.turns}", f"in: {units.count(t.input_tokens)}",
                         f"out: {units.count(t.output_tokens)}", _status(t.exit_status, style), units.duration(t.duration_ms),
                         *([f"reopens: {t.reopen_count}"] if t.reopen_count else [])]
                        for i, t in enumerate(m.tasks, start=1)])
    return "\n".join(lines)


def _token_sources(m: SessionMetrics, style: Style) -> list[str]:
    """Which counts are whose: the rows above are murmurd's own counts of what each turn sent and
    got; the provider's `usage` report, when it sent one, is shown beside them."""
    lines = [style.dim("  (the runtime's own estimate: its tokenizer over each turn's request and answer)")]
    reported = m.reported_tokens
    if reported is None:
        lines.append(style.dim("  provider reported: nothing (the driver passed on no usage)"))
    else:
        given, taken, turns = reported
        lines.append(f"  provider reported: {units.count(given)} in, {units.count(taken)} out "
                     f"({turns} of {len(m.steps)} turns)")
    return lines


def _skills(m: SessionMetrics, style: Style) -> list[str]:
    ok = sum(1 for c in m.skills if c.ok)
    lines = [section("Skill calls", style), f"  count: {len(m.skills)}  ({ok} ok, {len(m.skills) - ok} error)"]
    if m.skills:
        lines.append(f"  latency: avg {units.duration(m.avg_skill_ms)}")
        lines += table([[f"turn {c.turn}", safe(c.name), units.duration(c.duration_ms), _mark(c, style)] for c in m.skills])
    return lines


def _shells(m: SessionMetrics, style: Style) -> list[str]:
    lines = [section("Shell calls", style), f"  count: {len(m.shells)}"]
    if m.shells:
        lines.append(f"  exit codes: {exit_codes(m.shells)}")
        lines.append(f"  latency: avg {units.duration(m.avg_shell_ms)}")
    return lines


def exit_codes(shells: list[Call]) -> str:
    ok = sum(1 for c in shells if c.ok)
    failed = [c.exit_code for c in shells if not c.ok]
    text = f"{ok} ok, {len(failed)} failed"
    if failed:
        text += f" (exit {', '.join(str(c) for c in sorted(set(failed)))})"
    return text


def _status(status: str, style: Style) -> str:
    shown = safe(status)
    if status in ("ok", "completed"):
        return style.ok(shown)
    return style.warn(shown) if status in ("canceled", "open") else style.bad(shown)


def first_string(value: Any) -> str | None:
    """The first string anywhere in a JSON value, depth first, in key order (no recursion: a
    trace's input may be nested as deep as the JSON decoder allows)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            return item
        children = list(item.values()) if isinstance(item, dict) else item if isinstance(item, list) else []
        stack.extend(reversed(children))
    return None


def step_row(step: Turn, verbose: bool) -> list[str]:
    first = step.calls[0] if step.calls else None
    tool = step.tool_name if step.tool_name is not None else "—"
    row = [str(step.turn), safe(step.decision), safe(tool), units.duration(first.duration_ms) if first else "—"]
    if verbose:
        tool_call = next((c for c in step.calls if c.kind == "tool"), None)
        text = first_string(tool_call.input) if tool_call is not None else None
        row.append(f'"{cut(safe(text), VERBOSE_WIDTH)}"' if text is not None else "")
    return row


def steps(m: SessionMetrics, verbose: bool, style: Style) -> str:
    lines = [style.head(f"Session {safe(m.session_id)}  ({len(m.steps)} turns)")]
    header = ["TURN", "DECISION", "TOOL", "DURATION", *(["INPUT"] if verbose else [])]
    lines += table([[style.dim(h) for h in header], *(step_row(s, verbose) for s in m.steps)])
    return "\n".join(lines)


def diff(rows: list[Row], a: SessionMetrics, b: SessionMetrics, style: Style) -> str:
    def run(label: str, m: SessionMetrics) -> str:
        return f"Run {label}: {safe(m.session_id)}  ({safe(m.path)})" + (style.warn("  [open: still running]")
                                                                        if m.open else "")

    lines = [run("A", a), run("B", b)]
    body = [[style.head(h) for h in ("Metric", "Run A", "Run B", "Delta")]]
    for row in rows:
        shown = row.delta
        if row.better is not None:
            shown = style.ok(shown) if row.better == "B" else style.bad(shown)
        body.append([row.metric, safe(row.shown_a), safe(row.shown_b), shown])
    return "\n".join(lines + table(body, indent=""))


def _stat_table(stats: list[Stat], style: Style) -> list[str]:
    rows = [[style.head(h) for h in ("Metric", "Mean", "StdDev", "Min", "Max")]]
    rows += [[s.metric, f"{s.mean:,.1f}", f"{s.stddev:,.1f}", units.count(s.minimum), units.count(s.maximum)] for s in stats]
    return table(rows, indent="")


def report(r: Report, workdir: str, style: Style) -> str:
    lines: list[str] = []
    labels = distinct_labels([m.session_id for m in r.sessions])
    for m in r.sessions:
        lines.append(style.head(f"Session {safe(labels[m.session_id])}  {units.duration(m.duration_ms)}  {m.turns} turns  "
                                f"{safe(m.exit_status)}"))
        lines.append(f"  tool calls: {len(m.tools)}  ({m.tool_ok} ok, {m.tool_errors} error)")
        if m.skills:
            ok = sum(1 for c in m.skills if c.ok)
            lines.append(f"  skill calls: {len(m.skills)}  ({ok} ok, {len(m.skills) - ok} error)")
        if m.shells:
            lines.append(f"  shell exit codes: {exit_codes(m.shells)}")
        if m.redundant:
            lines.append(style.warn(f"  Redundant calls: {len(m.redundant)}"))
        lines.append(f"  avg latency: {units.duration(m.avg_tool_ms)}")
    lines += ["", f"Sessions: {len(r.sessions)}  ({safe(workdir)})", *_stat_table(r.stats, style), "", "Exit status:"]
    lines += table([[safe(s), str(c), f"({p:.0f}%)"] for s, c, p in r.exit_statuses])
    if r.per_task is not None:
        lines += ["", section("Per-task averages", style), *_stat_table(r.per_task, style)]
    return "\n".join(lines)
