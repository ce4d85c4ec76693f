"""murmur-driver-anthropic: the Anthropic Messages API through `wasi:http` (see README.md)."""

from __future__ import annotations

from typing import Any

from wit_world import exports
from wit_world.exports import run
from wit_world.imports import chunks

import anthropic_request
import anthropic_stream
from driverkit.call import stream_call
from driverkit.entry import Answer, handle
from driverkit.settings import Settings, api_url, number, request_model

PROVIDER = "anthropic"
DEFAULT_ENDPOINT = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


def call(request: dict[str, Any], settings: Settings) -> Answer:
    config = settings.config
    body = anthropic_request.build_body(request, request_model(request, settings), config, settings.extra_body())
    headers = {"anthropic-version": str(config.get("anthropic_version", API_VERSION)), **settings.extra_headers()}
    if settings.api_key:
        headers["x-api-key"] = settings.api_key
    response = stream_call(
        api_url(settings.endpoint, "messages"), headers, body, settings.retry,
        number(config, "read_timeout_seconds", 300.0),
        lambda events: anthropic_stream.assemble(events, chunks.emit_chunk, chunks.emit_thinking_chunk),
    )
    return Answer(response)


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        return handle(PROVIDER, DEFAULT_ENDPOINT, input.data, call)
