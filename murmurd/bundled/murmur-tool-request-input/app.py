"""murmur-tool-request-input: ask the task's supervisor a question, return the answer.

`murmur:task/task#request-input` pauses the agent loop; murmurd marks the A2A task
`input-required` with the prompt, and the next message on that task is the reply. The prompt is
refused when empty: a blank question would leave the supervisor nothing to answer.
"""

from __future__ import annotations

import json

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import task


def _prompt(data: str | None) -> str:
    """`{"prompt": ...}`; plain text is taken as the prompt itself."""
    try:
        value = json.loads(data or "")
    except ValueError:
        return (data or "").strip()
    if isinstance(value, dict):
        prompt = value.get("prompt")
        return prompt.strip() if isinstance(prompt, str) else ""
    return value.strip() if isinstance(value, str) else ""


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        prompt = _prompt(input.data)
        if not prompt:
            return run.ToolResult(run.Status.FAILED, "request-input: `prompt` must be a non-empty string",
                                  None, None, False, [])
        reply = task.request_input(prompt)
        return run.ToolResult(run.Status.PASSED, "answered", reply, None, False, [])
