"""How `murmurd tasks` shows tasks (pure): A2A 1.0 task JSON in, terminal lines out."""

from __future__ import annotations

import datetime as dt
from typing import Any

FIRST_WORDS = 48


def state_of(task: dict[str, Any]) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input-required`."""
    state = (task.get("status") or {}).get("state") or "unknown"
    return str(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def parts_text(parts: Any) -> str:
    return "".join(p.get("text", "") for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def first_user_text(task: dict[str, Any]) -> str:
    first = next((m for m in task.get("history") or [] if m.get("role") == "ROLE_USER"), None)
    return parts_text(first.get("parts")) if first else ""


def status_text(task: dict[str, Any]) -> str:
    message = (task.get("status") or {}).get("message")
    return parts_text(message.get("parts")) if isinstance(message, dict) else ""


def provenance(task: dict[str, Any]) -> dict[str, Any]:
    murmurd = (task.get("metadata") or {}).get("murmurd")
    return murmurd if isinstance(murmurd, dict) else {}


def parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(since: dt.datetime | None, now: dt.datetime) -> str:
    """`42s`, `3m05s`, `2h10m`, `3d4h`: how long ago, to two units."""
    if since is None:
        return "-"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, mins = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{mins:02d}m"
    days, hrs = divmod(hours, 24)
    return f"{days}d{hrs}h"


def clip(text: str, width: int = FIRST_WORDS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def who(task: dict[str, Any]) -> str:
    """The caller that created the task: its credential's principal, else its origin."""
    origin = provenance(task)
    return str(origin.get("principal") or origin.get("origin") or "-")


def list_lines(tasks: list[dict[str, Any]], now: dt.datetime) -> list[str]:
    """One row per task: id, state, age, waiting (for input-required), context, who, first words;
    a waiting task's question on the line below it."""
    header = ("ID", "STATE", "AGE", "WAITING", "CONTEXT", "FROM", "FIRST WORDS")
    rows = []
    for task in tasks:
        state = state_of(task)
        created = parse_time(provenance(task).get("createdAt"))
        waited = age(parse_time((task.get("status") or {}).get("timestamp")), now) if state == "input-required" else ""
        rows.append((str(task.get("id")), state, age(created, now), waited, str(task.get("contextId")),
                     who(task), clip(first_user_text(task))))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(header)).rstrip()]
    for task, row in zip(tasks, rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if row[1] == "input-required" and status_text(task):
            lines.append(f"  asks: {clip(status_text(task), 100)}")
    return lines


def detail_lines(task: dict[str, Any], now: dt.datetime, url: str) -> list[str]:
    """One task: state (and how long it has waited), context, who and when, the question it waits
    on, its messages, its answer and artifacts, and how to act on it."""
    state = state_of(task)
    origin = provenance(task)
    created = parse_time(origin.get("createdAt"))
    changed = parse_time((task.get("status") or {}).get("timestamp"))
    lines = [f"task     {task.get('id')}", f"state    {state}" + (f" (waiting {age(changed, now)})"
                                                                   if state == "input-required" else ""),
             f"context  {task.get('contextId')}",
             f"created  {created.isoformat(timespec='seconds') if created else '-'} ({age(created, now)} ago)"
             f" by {who(task)}"]
    if state == "input-required":
        lines.append(f"asks     {status_text(task)}")
    elif state in ("failed", "canceled", "rejected") and status_text(task):
        lines.append(f"reason   {status_text(task)}")
    lines.append("messages")
    for message in task.get("history") or []:
        role = "user " if message.get("role") == "ROLE_USER" else "agent"
        lines.append(f"  {role}  {parts_text(message.get('parts'))}")
    if state == "completed":
        lines += ["answer", *(f"  {line}" for line in status_text(task).splitlines() or [""])]
    shown = [a for a in task.get("artifacts") or [] if a.get("name") not in ("result", "prompt")]
    if shown:
        lines.append("artifacts")
        lines += [f"  {a.get('name') or a.get('artifactId')}: {clip(parts_text(a.get('parts')), 200)}" for a in shown]
    if state == "input-required":
        lines.append(f"answer it: murmurd reply {url} {task.get('id')} TEXT")
    if state in ("submitted", "working", "input-required"):
        lines.append(f"cancel it: murmurd cancel {url} {task.get('id')}")
    return lines
