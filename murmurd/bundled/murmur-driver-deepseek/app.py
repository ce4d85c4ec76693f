"""murmur-driver-deepseek: DeepSeek chat completions through `wasi:http` (see README.md)."""

from __future__ import annotations

from typing import Any

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import chunks

import deepseek_chat
from driverkit.call import stream_call
from driverkit.entry import Answer, handle
from driverkit.settings import Settings, number, request_model

PROVIDER = "deepseek"
DEFAULT_ENDPOINT = "https://api.deepseek.com"


def call(request: dict[str, Any], settings: Settings) -> Answer:
    model = deepseek_chat.checked_model(request_model(request, settings))  # before any HTTP call
    headers = settings.extra_headers()
    if settings.api_key.strip():
        headers["authorization"] = f"Bearer {settings.api_key.strip()}"
    body = deepseek_chat.build_body(request, model, settings.config, settings.extra_body())
    timeout = number(settings.config, "read_timeout_seconds", 300.0)
    url = f"{settings.endpoint}/chat/completions"
    return Answer(stream_call(url, headers, body, settings.retry, timeout,
                              lambda events: deepseek_chat.assemble(events, chunks.emit_chunk,
                                                                    chunks.emit_thinking_chunk),
                              whole=deepseek_chat.answer_whole))


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        return handle(PROVIDER, DEFAULT_ENDPOINT, input.data, call)
