"""Compaction: replacing a conversation that reached its window with what a hook committed.

When the full conversation (never the smaller continuation payload) reaches
`inference.compaction.threshold` of `context.max_tokens`, `on-compaction` fires before anything
is replaced. A committed `replace-context` is checked (`rebuild`), recounted, replaces the
history, drops a held continuation (the driver's state no longer matches) and is traced as
`compaction`; with `dump_summaries` one line in upstream's shape (`turn`, `tokens_before`,
`tokens_after`, `summary`: the replacement's text) goes to `out/compaction-summaries.jsonl`. A bound hook's failure ends the session: nothing else can get
the conversation back under the window. `prompt_cache_key` is per task, so it never changes here.

Hooks see messages as role and text. A message a hook hands back unchanged (its `id` names a
history message with the same role and text, or a `tool` message whose text equals an unused
tool answer) is *kept*: it gets its original structure back (tool-call blocks, `tool_call_id`).
Every other message is *written* by the hook: plain `user`/`assistant` text. A `tool` message
survives only kept, calls and answers must still pair up, and the result must count fewer tokens
than what it replaces, or the replacement is refused whole (the history stays; a note in
`logs/bootstrap.log`; the threshold is checked again after the next turn).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from murmurd import workdir_fs
from murmurd.hooks.dispatcher import CompactionEvent, CompactionFailed, ContextArm, LifecycleDispatcher
from murmurd.manifest.capsule import CapsuleManifest
from murmurd.session.continuation import ContinuationState
from murmurd.session.failures import SessionEnded
from murmurd.session.messages import Message, pairing_problem
from murmurd.workdir import COMPACTION_SUMMARIES, Workdir
from murmurd.trace.writer import TraceWriteError, TraceWriter

WRITABLE_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class CompactionSettings:
    """What the manifest says about compaction (`context.max_tokens`, `inference.compaction`)."""

    window: int | None  # None: no `context.max_tokens`, compaction off
    fraction: float
    model: str | None
    system_prompt: str | None  # inline, or `system_prompt_file`'s text (read at load)
    dump_summaries: bool

    @property
    def threshold(self) -> int | None:
        return int(self.window * self.fraction) if self.window else None


def settings_for(manifest: CapsuleManifest) -> CompactionSettings:
    compaction = manifest.inference.compaction if manifest.inference else None
    window = manifest.context.max_tokens if manifest.context else None
    if compaction is None:
        return CompactionSettings(None, 0.98, None, None, False)
    return CompactionSettings(window, compaction.threshold, compaction.model, compaction.system_prompt,
                              compaction.dump_summaries)


@dataclass(frozen=True)
class Rebuilt:
    """A replacement as the loop keeps it, and which of its messages the hook wrote itself."""

    messages: list[Message]
    written: list[Message]


def rebuild(history: list[Message], arm: ContextArm) -> Rebuilt | str:
    """The replacement a hook committed, made whole from `history`; or why it is refused."""
    if not arm.messages:
        return "an empty replacement leaves the model no conversation"
    by_id = {m.id: m for m in history}
    used: set[str] = set()
    out: list[Message] = []
    written: list[Message] = []
    for position, (message, hook_id) in enumerate(zip(arm.messages, arm.hook_ids), start=1):
        original = _kept(message, by_id.get(hook_id), history, used)
        if original is not None:
            used.add(original.id)
            out.append(replace(original, id=message.id, source_id=message.source_id))
            continue
        if message.role not in WRITABLE_ROLES:
            what = "is not a verbatim tool answer of the history" if message.role == "tool" else "has no known role"
            return f"message {position} (role {message.role!r}) {what}"
        out.append(message)
        written.append(message)
    problem = pairing_problem(out)
    return problem if problem is not None else Rebuilt(out, written)


def _kept(message: Message, by_id: Message | None, history: list[Message], used: set[str]) -> Message | None:
    """The history message `message` is an unchanged copy of, if any."""
    if by_id is not None and by_id.id not in used and (by_id.role, by_id.text) == (message.role, message.text):
        return by_id
    if message.role != "tool":
        return None
    return next((m for m in history if m.role == "tool" and m.id not in used and m.text == message.text), None)


def summary_line(turn: int, before: int, after: int, rebuilt: Rebuilt) -> str:
    """One `out/compaction-summaries.jsonl` line, upstream's four fields: `turn`, the two token
    counts the `compaction` trace line records, and `summary`, the replacement's text (every
    message but the `tool` answers, in order, joined by newlines) as one string."""
    summary = "\n".join(m.text for m in rebuilt.messages if m.role != "tool" and m.text)
    record = {"turn": turn, "tokens_before": before, "tokens_after": after, "summary": summary}
    return json.dumps(record, ensure_ascii=False) + "\n"


class Compactor:
    """Runs compaction for one session loop: dispatch, check, replace, trace, dump."""

    def __init__(self, settings: CompactionSettings, dispatcher: LifecycleDispatcher, trace: TraceWriter,
                 continuation: ContinuationState, workdir: Workdir, note: Callable[[str], None],
                 spend_refusals: Callable[[], int]) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.trace = trace
        self.continuation = continuation
        self.workdir = workdir
        self.note = note
        self.spend_refusals = spend_refusals

    def due(self, tokens: int) -> bool:
        threshold = self.settings.threshold
        return threshold is not None and tokens >= threshold

    async def compact(self, messages: list[Message], turn: int, tokens: int,
                      recount: Callable[[list[Message]], Awaitable[int]]) -> bool:
        """Fire `on-compaction` for a conversation at `tokens`; replace `messages` in place with
        a committed replacement. True when it was replaced. Raises SessionEnded when a bound hook fails."""
        threshold = self.settings.threshold or 0
        refusals = self.spend_refusals()
        answer = await self.dispatcher.on_compaction(CompactionEvent(
            list(messages), tokens, threshold, self.settings.fraction, self.settings.model, self.settings.system_prompt,
        ))
        if isinstance(answer, CompactionFailed):
            status = "spend_ceiling_reached" if self.spend_refusals() > refusals else "failed"
            raise SessionEnded(f"compaction hook {answer.hook_name} failed at turn {turn} ({answer.reason}); "
                               f"the conversation cannot get back under its context window", status)
        if answer is None:
            self.note(f"turn {turn}: context at {tokens} tokens reached the compaction threshold "
                      f"{threshold}; no compaction hook committed a replacement, continuing\n")
            return False
        rebuilt = rebuild(messages, answer)
        if isinstance(rebuilt, str):
            self.note(f"turn {turn}: compaction replacement from hook {answer.hook_name} rejected whole: {rebuilt}\n")
            return False
        after = await recount(rebuilt.messages)
        if after >= tokens:
            self.note(f"turn {turn}: compaction replacement from hook {answer.hook_name} rejected whole: "
                      f"it does not shrink the conversation ({tokens} -> {after} tokens)\n")
            return False
        messages[:] = rebuilt.messages
        self.continuation.drop()
        try:
            self.trace.write("compaction", turn=turn, tokens_before=tokens, tokens_after=after)
        except TraceWriteError as exc:  # the one event whose loss does not end the session
            self.note(f"turn {turn}: compaction trace event not written: {exc}\n")
        if self.settings.dump_summaries:
            self._dump(summary_line(turn, tokens, after, rebuilt), turn)
        return True

    def _dump(self, line: str, turn: int) -> None:
        try:
            workdir_fs.append_text(self.workdir.root, self.workdir.book(COMPACTION_SUMMARIES), line)
        except OSError as exc:  # a refused file (a planted symlink) costs the line, not the session
            self.note(f"turn {turn}: {COMPACTION_SUMMARIES} not written: {exc}\n")
