"""compaction-hook: replaces the older conversation with a summary the capsule's own model writes.

murmurd's own compaction (murmur-hook-compact 0.1.0 before it became the published 0.4.0,
which summarizes everything into one message): it keeps the latest tool exchange verbatim.

Bound to `on-compaction` with `commit_policy: replace-context`. When the runtime reports the
conversation at its threshold, the hook splits it in two:

- the *tail*, kept verbatim: the latest tool exchange (the assistant message that made the calls,
  every `tool` answer after it, and whatever followed). It hands these messages back unchanged,
  `id` included, so the runtime restores their tool calls and the calls and answers stay paired;
- the *front*, everything older, which it summarizes with one `run-inference` call using the
  manifest's `inference.compaction.model` and `system_prompt` (the event carries both; absent,
  the capsule's model and this hook's own prompt).

It commits `[summary, *tail]`, and declines (`none`) when the front counts fewer than 48 tokens
(`murmur:runtime/tokens`): a summary would be as long as what it replaces, and the runtime asks
again after the next turn. With no tool exchange in sight (a `seed-context` the runtime asks
it to summarize, say) the whole list is the front. A refused completion (the spend ceiling) is
returned as `err`: at `on-compaction` that ends the session, which is the honest outcome when
the conversation cannot be brought back under the window.
"""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import inference, lifecycle, tokens

NONE = lifecycle.HookOutput_None_()
MIN_FRONT_TOKENS = 48  # less than this is not worth a summary
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
DEFAULT_PROMPT = ("You compact an agent's conversation. Summarize what was asked, what was done and "
                  "what was learned, in a few short sentences. Keep names, numbers and decisions.")


def tail_start(messages: list[lifecycle.Message]) -> int:
    """Where the kept tail begins: the assistant message ahead of the latest run of tool answers
    (len(messages) when there is none: everything is summarized)."""
    last_tool = max((i for i, m in enumerate(messages) if m.role == "tool"), default=None)
    if last_tool is None:
        return len(messages)
    start = last_tool
    while start > 0 and messages[start - 1].role == "tool":
        start -= 1
    return max(start - 1, 0)


def transcript(messages: list[lifecycle.Message]) -> str:
    """The front as plain text for the summarizer: one `role: content` paragraph per message."""
    return "\n\n".join(f"{m.role}: {m.content}" for m in messages)


def summarize(event: lifecycle.CompactionEvent, front: list[lifecycle.Message]) -> str:
    request = inference.InferenceRequest(
        [lifecycle.Message("user", transcript(front), "", None)],
        event.system_prompt or DEFAULT_PROMPT,
        event.model,
    )
    return inference.run_inference(request).text.strip()


def _silent(_self: object, _event: object) -> lifecycle.HookOutput:
    return NONE


class Lifecycle(exports.Lifecycle):
    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        start = tail_start(event.messages)
        front, tail = event.messages[:start], event.messages[start:]
        if tokens.count_tokens(transcript(front)) < MIN_FRONT_TOKENS:
            return NONE  # a summary would be as long as what it replaces: let the runtime go on

        try:
            text = summarize(event, front)
        except Err as exc:
            raise Err(f"murmur-hook-compact: the summary could not be written: {exc.value}") from None
        summary = lifecycle.Message("user", SUMMARY_PREFIX + text, "", "murmur-hook-compact:summary")
        return lifecycle.HookOutput_ReplaceContext([summary, *tail])

    # Every other handler is silent: the WIT requires each export, this hook has nothing to say there.
    on_stage = on_session_start = on_inference = on_tool_call = _silent
    on_shell = on_task_start = on_task_end = on_session_end = _silent
