"""Memory hook: seeds every task with the notes an operator keeps in `notes.md`.

Bound to `on-task-start` with `commit_policy: seed-context`. It reads `notes.md` from its `.`,
which is the filesystem scope the capsule grants it (`capabilities.filesystem.scope` on the
hook's artifact entry, e.g. `memory`, a directory of the session workdir); a hook holds no grant
at all by default, so without one it finds no file and seeds nothing. Each paragraph (blank-line
separated) becomes one `user` message, oldest first, tagged with `source-id`
`memory-hook:notes.md#<n>` so a trace reader can tell where it came from.

It declines (`none`) when `budget-tokens` is `0`: the capsule declared no `context.max_tokens` ×
`context.seed_budget`, and the runtime would refuse any seed. Otherwise it offers every note and
lets the runtime measure them: commit whole, trim the oldest, or summarize the overflowing front
through the capsule's compaction hook.
"""

from __future__ import annotations

from wit_world import exports
from wit_world.imports import lifecycle

NONE = lifecycle.HookOutput_None_()
NOTES = "notes.md"


def paragraphs(text: str) -> list[str]:
    return [block.strip() for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]


def read_notes() -> str | None:
    try:
        with open(NOTES, encoding="utf-8") as handle:
            return handle.read()
    except OSError:  # no scope granted, or no notes yet
        return None


class Lifecycle(exports.Lifecycle):
    def on_task_start(self, event: lifecycle.TaskStartEvent) -> lifecycle.HookOutput:
        if event.budget_tokens == 0:
            return NONE
        text = read_notes()
        notes = paragraphs(text) if text else []
        if not notes:
            return NONE
        return lifecycle.HookOutput_SeedContext([
            lifecycle.Message("user", f"memory: {note}", "", f"memory-hook:{NOTES}#{n}")
            for n, note in enumerate(notes, start=1)
        ])

    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_start(self, ctx: lifecycle.SessionContext) -> lifecycle.HookOutput:
        return NONE

    def on_inference(self, event: lifecycle.InferenceEvent) -> lifecycle.HookOutput:
        return NONE

    def on_tool_call(self, event: lifecycle.ToolEvent) -> lifecycle.HookOutput:
        return NONE

    def on_shell(self, event: lifecycle.ShellEvent) -> lifecycle.HookOutput:
        return NONE

    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        return NONE

    def on_task_end(self, event: lifecycle.TaskEndEvent) -> lifecycle.HookOutput:
        return NONE

    def on_session_end(self, event: lifecycle.SessionEndEvent) -> lifecycle.HookOutput:
        return NONE
