"""`murmurd trace show --html FILE`: one self-contained page of a session.

A timeline (one lane per turn: the model's inference, then each tool, skill and shell call,
placed by the trace's timestamps and durations), then the turns in detail. Inline CSS only, no
script, and a Content-Security-Policy that forbids every fetch, so opening the page never
touches the network. Every string from the trace is HTML-escaped.
"""

from __future__ import annotations

import errno
from html import escape
from pathlib import Path

from murmurd import workdir_fs
from murmurd.traceview import units
from murmurd.traceview.errors import ReadError
from murmurd.traceview.metrics import Call, SessionMetrics, Turn
from murmurd.traceview.render import compact_json

WRITE_ERROR = "E-IO-003"  # upstream's code for an HTML page that cannot be written
INPUT_CHARS = 300

_CSS = """
:root{--bg:#fff;--fg:#1d1f23;--mute:#6b7280;--line:#e5e7eb;--inf:#3b82f6;--tool:#10b981;--skill:#8b5cf6;
--shell:#f59e0b;--err:#ef4444;--red:#eab308}
@media (prefers-color-scheme:dark){:root{--bg:#111318;--fg:#e5e7eb;--mute:#9ca3af;--line:#2a2e37}}
*{box-sizing:border-box}body{margin:0;padding:24px;font:14px/1.45 system-ui,sans-serif;background:var(--bg);color:var(--fg)}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:28px 0 8px}code,.mono{font-family:ui-monospace,monospace;font-size:12px}
.meta{color:var(--mute)}.summary{display:flex;flex-wrap:wrap;gap:8px 24px;margin:12px 0}
.summary div b{display:block;font-size:18px}.ok{color:var(--tool)}.bad{color:var(--err)}
.legend span{display:inline-flex;align-items:center;gap:4px;margin-right:14px;color:var(--mute)}
.legend i{display:inline-block;width:12px;height:10px;border-radius:2px}
#timeline{border:1px solid var(--line);border-radius:6px;padding:8px 8px 4px}
.lane{display:grid;grid-template-columns:90px 1fr 150px;align-items:center;gap:8px;min-height:24px;border-bottom:1px dashed var(--line)}
.lane:last-child{border-bottom:0}.lane .label{color:var(--mute);font-size:12px}.lane .tokens{font-size:12px;color:var(--mute);text-align:right}
.track{position:relative;height:18px}
.bar{position:absolute;top:3px;height:12px;min-width:3px;border-radius:2px}
.bar.inference{background:var(--inf)}.bar.tool{background:var(--tool)}.bar.skill{background:var(--skill)}.bar.shell{background:var(--shell)}
.bar.failed{outline:2px solid var(--err);outline-offset:0}
.bar.redundant{background:repeating-linear-gradient(45deg,var(--red) 0 4px,#a16207 4px 8px)}
.attempt{margin:6px 0 2px;font-size:12px;color:var(--mute)}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{color:var(--mute);font-weight:600;font-size:12px}.badge{font-size:11px;padding:1px 6px;border-radius:8px;background:var(--red);color:#000}
.input{max-width:520px;overflow-wrap:anywhere}
.axis{display:grid;grid-template-columns:90px 1fr 150px;align-items:end;gap:8px;min-height:24px}
.axis .label,.axis .tokens{color:var(--mute);font-size:12px}.axis .tokens{text-align:right}
.axis .track{height:20px;border-bottom:1px solid var(--mute)}
.tick{position:absolute;bottom:0;height:6px;border-left:1px solid var(--mute)}
.tick span{position:absolute;bottom:7px;transform:translateX(-50%);font-size:11px;color:var(--mute);white-space:nowrap}
"""

MAX_TICKS = 8


def _span(m: SessionMetrics) -> tuple[int, int]:
    stamps = [s.timestamp for s in m.steps if s.timestamp is not None]
    stamps += [c.timestamp for s in m.steps for c in s.calls if c.timestamp is not None]
    starts = [s.started_ms for s in m.steps if s.started_ms is not None]
    starts += [c.timestamp - c.duration_ms for s in m.steps for c in s.calls if c.timestamp is not None]
    if not stamps:
        return 0, 1
    low = min([*starts, *stamps, m.started_ms or min(stamps)])
    return low, max(max(stamps), low + 1)


def _bar(kind: str, start: int, end: int, span: tuple[int, int], title: str, extra: str = "") -> str:
    low, high = span
    width = high - low
    left = 100.0 * min(max(units.ratio(start - low, width), 0.0), 1.0)  # huge stamps: exact ratios, clamped
    size = 100.0 * min(max(units.ratio(max(end - start, 0), width), 0.0), 1.0)
    return (f'<div class="bar {kind}{extra}" style="left:{left:.3f}%;width:{size:.3f}%" '
            f'title="{escape(title)}"></div>')


def tick_step(width_ms: int, max_ticks: int = MAX_TICKS) -> int:
    """The interval between axis ticks: 1, 2 or 5 times a power of ten ms, the smallest that
    puts at most `max_ticks` intervals across `width_ms`."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if width_ms <= max_ticks * step * factor:  # integers: a 400-digit width never overflows a float
                return step * factor
        step *= 10


def _axis(span: tuple[int, int]) -> str:
    """The time axis over the lanes: ticks from the session's first event, labelled `+1.5s`."""
    low, high = span
    width = high - low
    step = tick_step(width)
    ticks = "".join(f'<div class="tick" style="left:{100.0 * units.ratio(t, width):.3f}%"><span>+{escape(units.duration(t))}</span></div>'
                    for t in range(0, width + 1, step))
    return (f'<div class="axis" data-step-ms="{step}"><div class="label">time</div>'
            f'<div class="track">{ticks}</div><div class="tokens">since the first event</div></div>')


def _call_title(call: Call, redundant: dict[int, int]) -> str:
    what = {"tool": "tool", "skill": "skill", "shell": "shell"}[call.kind]
    parts = [f"{what} {call.name}", units.duration(call.duration_ms), "ok" if call.ok else "failed"]
    if call.exit_code is not None:
        parts.append(f"exit {call.exit_code}")
    if call.line in redundant:
        parts.append(f"redundant: re-reads turn {redundant[call.line]}")
    return " · ".join(parts)


def _lane(step: Turn, span: tuple[int, int], redundant: dict[int, int]) -> str:
    bars = []
    if step.timestamp is not None:
        start = step.started_ms if step.started_ms is not None else step.timestamp
        title = (f"turn {step.turn} inference · {step.decision} · {units.duration(step.timestamp - start)} · "
                 f"{step.input_tokens:,} in / {step.output_tokens:,} out")
        bars.append(_bar("inference", start, step.timestamp, span, title))
    for call in step.calls:
        if call.timestamp is None:
            continue
        extra = (" failed" if not call.ok else "") + (" redundant" if call.line in redundant else "")
        bars.append(_bar(call.kind, call.timestamp - call.duration_ms, call.timestamp, span,
                         _call_title(call, redundant), extra))
    return (f'<div class="lane" data-turn="{step.turn}" data-attempt="{step.attempt}">'
            f'<div class="label">turn {step.turn}</div><div class="track">{"".join(bars)}</div>'
            f'<div class="tokens">{step.input_tokens:,} in · {step.output_tokens:,} out</div></div>')


def _timeline(m: SessionMetrics, redundant: dict[int, int]) -> str:
    span = _span(m)
    parts, attempt = [], None
    for step in m.steps:
        if step.attempt != attempt and m.steps[-1].attempt > 0:
            parts.append(f'<div class="attempt">attempt {step.attempt + 1}</div>')
        attempt = step.attempt
        parts.append(_lane(step, span, redundant))
    return (_axis(span) + "".join(parts)) if parts else '<p class="meta">No turns in this trace.</p>'


def _short(value: object) -> str:
    text = value if isinstance(value, str) else compact_json(value)
    return text if len(text) <= INPUT_CHARS else text[:INPUT_CHARS] + "…"


def _rows(m: SessionMetrics, redundant: dict[int, int]) -> str:
    rows = []
    for step in m.steps:
        calls = step.calls or [None]
        for i, call in enumerate(calls):
            head = (f"<td>{step.turn}</td><td>{escape(step.decision)}</td>"
                    f"<td class='mono'>{step.input_tokens:,} / {step.output_tokens:,}</td>") if i == 0 else "<td></td>" * 3
            if call is None:
                rows.append(f"<tr>{head}<td class='meta'>—</td><td></td><td></td><td></td></tr>")
                continue
            badge = (f" <span class='badge'>redundant · re-reads turn {redundant[call.line]}</span>"
                     if call.line in redundant else "")
            status = "<span class='ok'>✓</span>" if call.ok else "<span class='bad'>✗</span>"
            detail = call.command if call.kind == "shell" else call.input
            rows.append(f"<tr class='call {call.kind}'>{head}<td>{escape(call.kind)} <b>{escape(call.name)}</b>{badge}</td>"
                        f"<td class='mono'>{escape(units.duration(call.duration_ms))}</td><td>{status}</td>"
                        f"<td class='input mono'>{escape(_short(detail)) if detail is not None else ''}</td></tr>")
    return "".join(rows)


def page(m: SessionMetrics) -> str:
    redundant = {r.line: r.prior_turn for r in m.redundant}
    status_class = "ok" if m.exit_status in ("ok", "completed") else "bad"
    compaction = "none" if m.compaction is None else f"turn {m.compaction[0]} ({m.compaction[1]:,} → {m.compaction[2]:,})"
    summary = [("status", f"<span class='{status_class}'>{escape(m.exit_status)}</span>"),
               ("duration", escape(units.duration(m.duration_ms))), ("turns", f"{m.turns} / {m.max_turns}"),
               ("tokens", f"{m.input_tokens:,} in · {m.output_tokens:,} out"),
               ("tool calls", f"{len(m.tools)} ({m.tool_errors} failed)"), ("skill calls", str(len(m.skills))),
               ("shell calls", str(len(m.shells))), ("redundant calls", str(len(m.redundant))),
               ("compaction", escape(compaction))]
    return "".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>{escape(m.capsule_name)} · {escape(m.session_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(m.capsule_name)} v{escape(m.capsule_version)}</h1>",
        f"<div class='meta mono'>{escape(m.session_id)} · model {escape(m.model)}</div>",
        "<div class='summary'>", *(f"<div><span class='meta'>{k}</span><b>{v}</b></div>" for k, v in summary), "</div>",
        "<h2>Timeline</h2><div class='legend'><span><i style='background:var(--inf)'></i>inference</span>"
        "<span><i style='background:var(--tool)'></i>tool</span><span><i style='background:var(--skill)'></i>skill</span>"
        "<span><i style='background:var(--shell)'></i>shell</span>"
        "<span><i class='bar redundant' style='position:static'></i>redundant</span>"
        "<span><i style='outline:2px solid var(--err)'></i>failed</span></div>",
        f"<div id='timeline'>{_timeline(m, redundant)}</div>",
        "<h2>Turns</h2><table id='turns'><thead><tr><th>turn</th><th>decision</th><th>tokens in / out</th>"
        "<th>call</th><th>duration</th><th></th><th>input</th></tr></thead>",
        f"<tbody>{_rows(m, redundant)}</tbody></table>",
        f"<p class='meta mono'>{escape(m.path)}</p></body></html>\n",
    ])


def write_page(path: Path, m: SessionMetrics) -> None:
    """Write the page to the operator's `path` (replaced whole; a symlink there is refused)."""
    try:
        workdir_fs.write_text(path.parent if str(path.parent) else Path("."), path.name, page(m))
    except OSError as exc:
        reason = exc.strerror or str(exc) if exc.errno != errno.ELOOP else "is a symlink"
        raise ReadError(WRITE_ERROR, f"cannot write {path}: {reason}") from None
