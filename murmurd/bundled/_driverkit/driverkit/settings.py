"""What a driver reads from its WASI environment (runtime-notes §2) and its `driver.config`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from driverkit.errors import ConfigError
from driverkit.retry import RetryPolicy

ENDPOINT = "MURMUR_INFERENCE_ENDPOINT"
API_KEY = "MURMUR_INFERENCE_API_KEY"
MODEL = "MURMUR_INFERENCE_MODEL"
DRIVER_CONFIG = "MURMUR_INFERENCE_DRIVER_CONFIG"


@dataclass(frozen=True)
class Settings:
    endpoint: str
    api_key: str
    model: str
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(
            budget_seconds=number(self.config, "retry_budget_seconds", 60.0),
            max_retries=int(number(self.config, "max_retries", 6)),
            base_delay=number(self.config, "retry_base_delay_seconds", 0.5),
            max_delay=number(self.config, "retry_max_delay_seconds", 8.0),
        )

    def extra_body(self) -> dict[str, Any]:
        """`config.request`: provider fields merged into every request body as they are."""
        extra = self.config.get("request", {})
        if not isinstance(extra, dict):
            raise ConfigError('driver.config "request" must be a JSON object')
        return extra

    def extra_headers(self) -> dict[str, str]:
        headers = self.config.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise ConfigError('driver.config "headers" must map names to strings')
        return {str(k).lower(): v for k, v in headers.items()}


def load_settings(env: Mapping[str, str], default_endpoint: str) -> Settings:
    raw = env.get(DRIVER_CONFIG) or "{}"
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{DRIVER_CONFIG} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{DRIVER_CONFIG} must be a JSON object")
    endpoint = (env.get(ENDPOINT) or default_endpoint).rstrip("/")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"inference.endpoint {endpoint!r} is not an http(s) URL")
    return Settings(endpoint, env.get(API_KEY, ""), env.get(MODEL, ""), config)


def number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"driver.config {key!r} must be a non-negative number, got {value!r}")
    return float(value)


def api_url(endpoint: str, path: str) -> str:
    """`<endpoint>/v1/<path>`; an endpoint that already ends in a version (`.../v1`, as
    OpenAI-compatible servers are usually given) gets only `/<path>`."""
    last = urlsplit(endpoint).path.rstrip("/").rsplit("/", 1)[-1]
    if len(last) >= 2 and last[0] == "v" and last[1:].isdigit():
        return f"{endpoint}/{path}"
    return f"{endpoint}/v1/{path}"


def request_model(request: Mapping[str, Any], settings: Settings) -> str:
    model = request.get("model") or settings.model
    if not isinstance(model, str) or not model:
        raise ConfigError("no model: set inference.model")
    return model
