"""What a task (or a whole session) spent: turns, tokens, calls."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    shell_calls: int = 0
