"""murmur-hook-compact 0.4.0, as published: on `on-compaction`, the whole conversation summarized by
one `run-inference` call, and that summary, one `user` message, replaces the context.

The transcript is upstream's: an `assistant` message stays `assistant`, every other role becomes
`user`; a `tool` message holding the host's envelope (`{"__murmur_tool_msg__": true,
"tool_call_id", "is_error", "body"}`) reads `[tool result for call <id>]` (` (error)` when it
failed), then its body; other content is the text of a JSON array's `text` blocks, a JSON
string's value, or the content as it is. A last `user` message asks for the summary now.

The system prompt is the event's (`inference.compaction.system_prompt`) verbatim when set, a
replacement of the built-in one; the model is the event's (`inference.compaction.model`). When
that call fails and a model was named, one retry with the capsule's own model (`model: none`);
when every attempt fails the hook returns `err`, which at `on-compaction` ends the session. There
is no deterministic fallback and the hook writes no files.

Upstream JSON-encodes the summary because its host parses a returned message's content as
JSON; murmurd's host keeps the content as the message's text, so the summary goes as plain text
and the model reads the same words under either runtime.
"""

from __future__ import annotations

import json
from typing import Any

from componentize_py_types import Err
from hookkit import Silent
from wit_world.imports import inference, lifecycle

SOURCE_ID = "murmur-hook-compact:summary"
TOOL_MARKER = "__murmur_tool_msg__"
SUMMARY_INSTRUCTION = "The conversation above is the session to compact. Write the summary now."
DEFAULT_SYSTEM_PROMPT = (
    "You are compacting an agent session so it can continue in a fresh, smaller context window. "
    "Read the conversation transcript and write a summary that lets the agent resume without "
    "re-reading any of it.\n\n"
    "Cover, in this order and only where the transcript supports it:\n"
    "1. The task the agent was given, in the user's own terms.\n"
    "2. What has already been done, including files created or modified and commands run.\n"
    "3. Decisions taken and the reasons for them, so they are not re-litigated.\n"
    "4. Facts discovered about the codebase or environment that were expensive to find.\n"
    "5. What is still outstanding, and the immediate next step.\n\n"
    "Be specific: name files, symbols, commands and identifiers exactly as they appeared. Do not "
    "invent anything the transcript does not state, and do not address the user \u2014 write it as "
    "notes for the agent's own future self."
)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def extract_text(content: str) -> str:
    """A JSON array's `text` blocks joined by a space, a JSON string's value, else the content."""
    value = _parsed(content)
    if isinstance(value, list):
        parts = [b["text"] for b in value if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        if parts:
            return " ".join(parts)
    if isinstance(value, str):
        return value
    return content


def _tool_envelope(content: str) -> str | None:
    value = _parsed(content)
    if not isinstance(value, dict) or value.get(TOOL_MARKER) is not True:
        return None
    call_id = value.get("tool_call_id")
    status = " (error)" if value.get("is_error") is True else ""
    body = value.get("body")
    text = "" if body is None else extract_text(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
    return f"[tool result for call {call_id if isinstance(call_id, str) else 'unknown'}{status}]\n{text}"


def render(message: lifecycle.Message) -> lifecycle.Message:
    role = "assistant" if message.role == "assistant" else "user"
    text = _tool_envelope(message.content) if message.role == "tool" else None
    return lifecycle.Message(role, extract_text(message.content) if text is None else text, "", None)


def transcript(messages: list[lifecycle.Message]) -> list[lifecycle.Message]:
    return [*map(render, messages), lifecycle.Message("user", SUMMARY_INSTRUCTION, "", None)]


def _summary(messages: list[lifecycle.Message], system_prompt: str, model: str | None) -> str:
    return inference.run_inference(inference.InferenceRequest(messages, system_prompt, model)).text


def compact(event: lifecycle.CompactionEvent) -> str:
    """The summary; one fallback to the capsule's model when a named model failed."""
    messages = transcript(event.messages)
    system_prompt = event.system_prompt if event.system_prompt is not None else DEFAULT_SYSTEM_PROMPT
    try:
        return _summary(messages, system_prompt, event.model)
    except Err as first:
        if event.model is None:
            raise Err(f"compaction inference failed: {first.value}") from None
        try:
            return _summary(messages, system_prompt, None)
        except Err as fallback:
            raise Err(f"compaction inference failed with model '{event.model}' ({first.value}) and with "
                      f"the capsule's primary model ({fallback.value})") from None


class Lifecycle(Silent):
    def on_compaction(self, event: lifecycle.CompactionEvent) -> lifecycle.HookOutput:
        summary = compact(event)
        return lifecycle.HookOutput_ReplaceContext([lifecycle.Message("user", summary, "", SOURCE_ID)])
