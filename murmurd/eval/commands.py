"""`murmurd eval show | diff | run` (fact sheet §6). Errors print `error[CODE]: message`, exit 1."""

from __future__ import annotations

import errno
from pathlib import Path

from murmurd import workdir_fs
from murmurd.eval.records import NO_EVAL, EvalFile, diff_rows, parse_eval, score_value
from murmurd.workdir import EVAL
from murmurd.traceview.commands import Console
from murmurd.traceview.errors import IO_ERROR, ReadError
from murmurd.terminal import safe
from murmurd.traceview.render import Style, section, table
from murmurd.traceview.sessions import Source, resolve

MAX_EVAL_BYTES = 64 * 1024 * 1024

__all__ = ["Console", "diff", "load", "run", "show"]


def load(workdir: Path, selector: str | None) -> EvalFile:
    """A session's `eval.jsonl` (or the file a path names). Missing: `E-EVAL-002`."""
    source: Source = resolve(workdir, selector, file=EVAL)
    try:
        data = workdir_fs.read_bytes(source.root, source.rel, max_bytes=MAX_EVAL_BYTES)
    except (OSError, workdir_fs.UnsafePathError) as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            raise ReadError(NO_EVAL, f"no {EVAL} at {source.shown} (is murmur-hook-eval declared with a scope?)") from None
        raise ReadError(IO_ERROR, f"{source.shown}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_eval(data, source.shown)


def _pct(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.0f}%"


def render_show(parsed: EvalFile, style: Style) -> str:
    lines = [style.head(f"── Eval: {safe(parsed.path)} ──"), section("Scorers", style)]
    rows = [[safe(name), f"{s['pass']}/{s['total']} pass", f"({_pct(s['pass_rate'])})"] for name, s in parsed.scorers().items()]
    lines += table(rows) if rows else ["  (no scorers)"]
    run = parsed.dataset_run or {}
    lines += [section("Overall", style)]
    overall = safe(parsed.overall)
    lines += table([["result:", style.ok(overall) if parsed.overall == "pass" else style.bad(overall)
                     if parsed.overall == "fail" else overall],
                    ["case:", safe(run.get("case_id") or "—")], ["dataset:", safe(run.get("dataset_id") or "—")]])
    lines.append(section("Score summary", style))
    scores = run.get("scores") or {}
    lines += table([[safe(k), f"{score_value(v):.4f}"] for k, v in scores.items()]) if scores else ["  (no dataset_run)"]
    lines.append(section("Worst events", style))
    worst = parsed.worst()
    lines += table([[safe(e.scorer), f"turn {e.turn}", safe(e.reason)] for e in worst]) if worst \
        else ["  (no failing events)"]
    return "\n".join(lines)


def show(console: Console, workdir: Path, selector: str | None, *, as_json: bool = False) -> int:
    try:
        parsed = load(workdir, selector)
    except ReadError as exc:
        return console.error(exc)
    if as_json:
        console.json(parsed.to_json())
    else:
        console.print(render_show(parsed, console.style))
    return 0


def diff(console: Console, workdir: Path, a: str, b: str, *, as_json: bool = False) -> int:
    try:
        first, second = load(workdir, a), load(workdir, b)
    except ReadError as exc:
        return console.error(exc)
    rows = diff_rows(first, second)
    if as_json:
        console.json({"a": first.path, "b": second.path, "rows": [r.to_json() for r in rows],
                      "overall": {"a": first.overall, "b": second.overall}})
        return 0
    style = console.style
    body = [[style.head(h) for h in ("Scorer", "Run A", "Run B", "Delta")]]
    body += [[safe(r.scorer), _pct(r.a), _pct(r.b), r.delta] for r in rows]
    body.append(["overall", safe(first.overall), safe(second.overall), "=" if first.overall == second.overall else "—"])
    console.print("\n".join([f"Run A: {safe(first.path)}", f"Run B: {safe(second.path)}", *table(body, indent="")]))
    return 0


def run(console: Console, capsule_dir: Path, dataset: Path, *, no_env_file: bool = False) -> int:
    from murmurd.eval.run import run_cases

    return run_cases(console, capsule_dir, dataset, no_env_file=no_env_file)
