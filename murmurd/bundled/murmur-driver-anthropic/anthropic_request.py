"""A driver request (runtime-notes §2) as an Anthropic Messages API request body.

`prompt_cache_key` is never forwarded: the Messages API rejects fields it does not define.
Prompt caching instead marks `cache_control` on the system block (the `[Capsule]` block, the
notice and the system prompt: byte-identical every turn, and, with the tools before it, the
stable prefix) and on the last block of the conversation, so each turn reads what the previous
one wrote.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


def build_body(request: dict[str, Any], model: str, config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    caching = config.get("prompt_caching", True) is not False
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": int(request.get("max_tokens") or 8192),
        "messages": messages(request.get("messages", [])),
        "stream": True,
    }
    system = request.get("system")
    if isinstance(system, str) and system:
        block: dict[str, Any] = {"type": "text", "text": system}
        if caching:
            block["cache_control"] = dict(EPHEMERAL)
        body["system"] = [block]
    tools = [tool(t) for t in request.get("tools", []) if isinstance(t, dict)]
    if tools:
        body["tools"] = tools
    if isinstance(config.get("thinking_budget"), int) and config["thinking_budget"] > 0:
        body["thinking"] = {"type": "enabled", "budget_tokens": config["thinking_budget"]}
    body.update(extra)
    if caching:
        mark_last_block(body["messages"])
    return body


def tool(spec: dict[str, Any]) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": spec.get("name")}
    if spec.get("description"):
        wire["description"] = spec["description"]
    wire["input_schema"] = spec.get("parameters") or {"type": "object", "properties": {}}
    return wire


def messages(history: list[Any]) -> list[dict[str, Any]]:
    """Runtime messages as alternating user/assistant turns: a `tool` message becomes a
    `tool_result` block of a user turn, and neighbours of one role merge into one turn."""
    out: list[dict[str, Any]] = []
    for message in history:
        if not isinstance(message, dict):
            continue
        role = "assistant" if message.get("role") == "assistant" else "user"
        blocks = tool_result(message) if message.get("role") == "tool" else content(message.get("content"))
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for turn in out:  # tool results open their user turn, as the API requires
        turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return out


def content(blocks: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks if isinstance(blocks, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            out.append({"type": "text", "text": block["text"]})
        elif kind == "tool_call":
            tool_input = block.get("input")
            out.append({"type": "tool_use", "id": str(block.get("id")), "name": block.get("name"),
                        "input": tool_input if isinstance(tool_input, dict) else {}})
        elif kind == "thinking" and isinstance(block.get("signature"), str):
            out.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": block["signature"]})
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            out.append({"type": "redacted_thinking", "data": block["data"]})
    return out


def tool_result(message: dict[str, Any]) -> list[dict[str, Any]]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id"))}
    texts = [b for b in content(message.get("content")) if b["type"] == "text"]
    if texts:
        result["content"] = texts
    if message.get("is_error"):
        result["is_error"] = True
    return [result]


def mark_last_block(turns: list[dict[str, Any]]) -> None:
    """`cache_control` on the conversation's last cacheable block (thinking blocks cannot carry it)."""
    if not turns:
        return
    for block in reversed(turns[-1]["content"]):
        if block.get("type") not in _UNCACHEABLE:
            block["cache_control"] = dict(EPHEMERAL)
            return
