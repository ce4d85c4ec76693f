"""What a CLI's stdout stream says, dialect-neutral: the events the run acts on, and the
failure a stream can end in. Pure."""

from __future__ import annotations

from dataclasses import dataclass


class StreamFailed(Exception):
    """The stream ended the run: the CLI reported an error, or printed what no dialect reads."""


@dataclass(frozen=True)
class Turn:
    """One counted assistant response (§6: an `assistant` event with a non-thinking block; §7: an
    `agent_message` or `mcp_tool_call` item)."""

    decision: str  # tool_call | end_turn
    text: str  # the response's text blocks, joined ("" for a tool call)
    output: str  # what `on-inference` gets as `output`: the content as JSON, or the text
    tool_name: str | None = None  # codex names the tool; Claude's line carries null, as upstream


@dataclass(frozen=True)
class HostCommand:
    """A host command the CLI ran outside the bridge (codex's `command_execution`)."""

    command: str
    exit_code: int | None
    output: str


@dataclass(frozen=True)
class Done:
    """The CLI's final result: reading stops."""

    result: str
