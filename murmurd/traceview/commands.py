"""`murmurd trace show | steps | diff | report`: select, read, compute, print.

Errors print `error[CODE]: message` on stderr and exit 1; success exits 0 (fact sheet §5).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from murmurd import terminal
from murmurd.traceview import render
from murmurd.traceview.aggregate import build_report
from murmurd.traceview.compare import diff_rows
from murmurd.traceview.errors import BAD_SELECTOR, BAD_TRACE, ReadError
from murmurd.traceview.html import write_page
from murmurd.traceview.metrics import SessionMetrics, Turn, session_metrics
from murmurd.traceview.sessions import read_trace, resolve, select_many

DEFAULT_WORKDIR = Path("workdir")


@dataclass
class Console:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    reader_gone: bool = False

    @property
    def style(self) -> render.Style:
        """Colour only on a terminal, and never with NO_COLOR set."""
        isatty = getattr(self.out, "isatty", None)
        return render.Style(colour=bool(isatty and isatty()) and not os.environ.get("NO_COLOR"))

    def print(self, text: str) -> None:
        if self.reader_gone:
            return
        try:
            print(text, file=self.out, flush=True)
        except BrokenPipeError:  # `murmurd trace show | head`: the reader left; nothing to report
            self.reader_gone = True

    def json(self, value: Any) -> None:
        self.print(terminal.json_text(value))

    def error(self, exc: ReadError) -> int:
        print(str(exc), file=self.err, flush=True)
        return 1


def load(workdir: Path, selector: str | None, *, allow_at: bool = False, allow_open: bool = False) -> SessionMetrics:
    return session_metrics(read_trace(resolve(workdir, selector, allow_at=allow_at), allow_open=allow_open))


def show(console: Console, workdir: Path, selector: str | None, *, as_json: bool = False,
         html: Path | None = None) -> int:
    try:
        metrics = load(workdir, selector)
        if html is not None:
            write_page(html, metrics)
            console.print(f"wrote {html}")
            return 0
    except ReadError as exc:
        return console.error(exc)
    if as_json:
        console.json(metrics.to_json())
    else:
        console.print(render.show(metrics, console.style))
    return 0


def steps(console: Console, workdir: Path, selector: str | None, *, verbose: bool = False,
          as_json: bool = False) -> int:
    try:
        metrics = load(workdir, selector)
    except ReadError as exc:
        return console.error(exc)
    if as_json:
        console.json({"session_id": metrics.session_id, "turns": len(metrics.steps),
                      "steps": [_step_json(s, verbose) for s in metrics.steps]})
    else:
        console.print(render.steps(metrics, verbose, console.style))
    return 0


def _step_json(step: Turn, verbose: bool) -> dict[str, Any]:
    first = step.calls[0] if step.calls else None
    out = {"turn": step.turn, "decision": step.decision, "tool": step.tool_name,
           "duration_ms": first.duration_ms if first is not None else None}
    if verbose:
        tool = next((c for c in step.calls if c.kind == "tool"), None)
        out["input"] = render.first_string(tool.input) if tool is not None else None
    return out


def diff(console: Console, workdir: Path, selectors: list[str], *, as_json: bool = False) -> int:
    try:
        if len(selectors) == 1:
            raise ReadError(BAD_SELECTOR, "diff takes two sessions (or none: @2 @1), not one")
        if len(selectors) > 2:
            raise ReadError(BAD_SELECTOR, f"diff takes two sessions, not {len(selectors)}")
        first, second = selectors or ["@2", "@1"]
        # a session still running compares as it is so far (render.diff marks it open)
        a = load(workdir, first, allow_at=True, allow_open=True)
        b = load(workdir, second, allow_at=True, allow_open=True)
    except ReadError as exc:
        return console.error(exc)
    rows = diff_rows(a, b)
    if as_json:
        console.json({"a": {"session_id": a.session_id, "path": a.path, "open": a.open},
                      "b": {"session_id": b.session_id, "path": b.path, "open": b.open},
                      "rows": [r.to_json() for r in rows]})
    else:
        console.print(render.diff(rows, a, b, console.style))
    return 0


def report(console: Console, workdir: Path, selectors: list[str], *, last: int | None = None,
           since: str | None = None, as_json: bool = False) -> int:
    try:
        sources = select_many(workdir, selectors, last, since)
        sessions, skipped = [], 0
        for source in sources:
            try:
                sessions.append(session_metrics(read_trace(source)))
            except ReadError as exc:
                if exc.code != BAD_TRACE:
                    raise
                skipped += 1
        if skipped:
            print(f"note: skipped {skipped} incomplete session(s)", file=console.err, flush=True)
        if not sessions:
            raise ReadError(BAD_TRACE, f"no complete session to report in {workdir}")
    except ReadError as exc:
        return console.error(exc)
    built = build_report(sessions)
    if as_json:
        console.json({"workdir": str(workdir), "skipped": skipped, **built.to_json()})
    else:
        console.print(render.report(built, str(workdir), console.style))
    return 0
