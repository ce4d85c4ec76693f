"""murmur-driver-openai: OpenAI Chat Completions or Responses through `wasi:http` (see README.md)."""

from __future__ import annotations

from typing import Any

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import chunks

import openai_chat
import openai_responses
from driverkit.call import stream_call
from driverkit.entry import Answer, handle
from driverkit.errors import ConfigError
from driverkit.settings import Settings, api_url, number, request_model

PROVIDER = "openai"
DEFAULT_ENDPOINT = "https://api.openai.com/v1"
CONTINUATION = "continuation_id"


def call(request: dict[str, Any], settings: Settings) -> Answer:
    config = settings.config
    api = config.get("api", "chat")
    model = request_model(request, settings)
    headers = settings.extra_headers()
    if settings.api_key:
        headers["authorization"] = f"Bearer {settings.api_key}"
    timeout = number(config, "read_timeout_seconds", 300.0)
    emit = (chunks.emit_chunk, chunks.emit_thinking_chunk)
    if api == "chat":
        body = openai_chat.build_body(request, model, settings.endpoint, config, settings.extra_body())
        url = api_url(settings.endpoint, "chat/completions")
        return Answer(stream_call(url, headers, body, settings.retry, timeout,
                                  lambda events: openai_chat.assemble(events, *emit)))
    if api == "responses":
        body = openai_responses.build_body(request, model, config, settings.extra_body())
        url = api_url(settings.endpoint, "responses")
        answer, response_id = stream_call(url, headers, body, settings.retry, timeout,
                                          lambda events: openai_responses.assemble(events, *emit))
        held = response_id if openai_responses.stores(config) and response_id else None
        return Answer(answer, [(CONTINUATION, held)] if held else [])
    raise ConfigError(f'driver.config "api" must be "chat" or "responses", got {api!r}')


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        return handle(PROVIDER, DEFAULT_ENDPOINT, input.data, call)
