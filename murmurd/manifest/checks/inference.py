"""`inference`: the driver, the endpoint, prompt sources, compaction, and what `transport: process` refuses."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from murmurd.manifest.checks.context import Context, hide_userinfo, is_number, section
from murmurd.manifest.checks.network import is_loopback_host
from murmurd.manifest.diagnostics import REDACTED, Diagnostic, diagnostic

API_KEY_PATH = "inference.api_key"
_PROMPT_SOURCES = ("system_prompt", "system_prompt_file", "system_prompt_artifact")


def rule_inference(ctx: Context) -> list[Diagnostic]:
    inference = ctx.section("inference")
    if inference is None:
        return []
    if inference.get("transport") == "process":
        return (_process_rules(inference) + _single_source(inference, "inference", _PROMPT_SOURCES)
                + _prompt_artifact_rules(ctx, inference))
    found = _endpoint_rules(inference.get("endpoint"))
    found += _single_source(inference, "inference", _PROMPT_SOURCES)
    found += _driver_rules(ctx, inference)
    found += _prompt_artifact_rules(ctx, inference)
    compaction = section(inference, "compaction")
    if compaction is not None:
        found += _single_source(compaction, "inference.compaction", _PROMPT_SOURCES[:2])
        threshold = compaction.get("threshold")
        if is_number(threshold) and not 0 < threshold <= 1:
            rule = "must be a fraction of context.max_tokens in (0, 1]"
            found.append(diagnostic("E-INF-009", "inference.compaction.threshold", rule, threshold))
    return found


def _process_rules(inference: dict) -> list[Diagnostic]:
    """`transport: process` (upstream's parser): a CLI agent drives, so the fields of a WASM
    driver's request are refused, each by name; `command` is required."""
    found: list[Diagnostic] = []
    rule = "is not valid with transport: process (the CLI agent talks to its own provider)"
    if "driver" in inference or "provider" in inference:
        found.append(diagnostic("E-INF-011", "inference.driver.artifact", rule))
    for key in ("endpoint", "api_key"):
        value = inference.get(key)
        if value is not None and not (isinstance(value, str) and not value.strip()):
            found.append(diagnostic("E-INF-011", f"inference.{key}", rule,
                                    rendered=REDACTED if key == "api_key" else None))
    if "max_tokens" in inference:
        found.append(diagnostic("E-INF-011", "inference.max_tokens",
                                "is not valid with transport: process (no driver payload is built)"))
    command = inference.get("command")
    if not isinstance(command, str) or not command.strip():
        found.append(diagnostic("E-MAN-001", "inference.command",
                                "is required with transport: process (the CLI agent to spawn: claude, codex)"))
    return found


def _endpoint_rules(endpoint: Any) -> list[Diagnostic]:
    if not isinstance(endpoint, str):
        return []
    problem = endpoint_problem(endpoint)
    if problem is None:
        return []
    code, rule = problem
    return [diagnostic(code, "inference.endpoint", rule, hide_userinfo(endpoint))]


def endpoint_problem(endpoint: str) -> tuple[str, str] | None:
    """(code, rule) when `endpoint` is not https:// or http:// to a loopback host."""
    allowed = "use https://host (plain http:// only to localhost, 127.0.0.0/8 or ::1)"
    if "://" not in endpoint:
        return "E-INF-001", f"has no scheme; {allowed}"
    parts = urlsplit(endpoint)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return "E-INF-003", f"scheme {parts.scheme!r} is not allowed; {allowed}"
    try:
        host, _ = parts.hostname, parts.port
    except ValueError:
        return "E-INF-003", f"has an invalid port; {allowed}"
    if not host:
        return "E-INF-003", f"names no host; {allowed}"
    if scheme == "http" and not is_loopback_host(host):
        return "E-INF-002", (
            "plain http:// is allowed only to a loopback host (localhost, 127.0.0.0/8, ::1); "
            "use https://"
        )
    return None


def _single_source(block: dict, prefix: str, keys: tuple[str, ...]) -> list[Diagnostic]:
    present = [k for k in keys if block.get(k) is not None]
    if len(present) < 2:
        return []
    rule = f"at most one of {', '.join(keys)} may be set; this manifest sets {', '.join(present)}"
    return [diagnostic("E-INF-006", f"{prefix}.{present[1]}", rule, present)]


def driver_name(inference: dict) -> tuple[Any, str]:
    """The driver artifact's name and the path it came from: `driver.artifact` wins over its older
    spelling `provider.artifact`, as upstream reads them."""
    name = (section(inference, "driver") or {}).get("artifact")
    if name is None and (section(inference, "provider") or {}).get("artifact") is not None:
        return section(inference, "provider")["artifact"], "inference.provider.artifact"  # type: ignore[index]
    return name, "inference.driver.artifact"


def _driver_rules(ctx: Context, inference: dict) -> list[Diagnostic]:
    name, path = driver_name(inference)
    if name is None and "driver" not in inference and "provider" not in inference:
        rule = ("an inference block needs a driver: declare a runtime: driver artifact and name it in "
                "inference.driver.artifact (or remove the block for a script capsule)")
        return [diagnostic("E-INF-010", "inference.driver.artifact", rule)]
    if not isinstance(name, str) or not name:
        return []
    declared = [a for _, a in ctx.artifacts() if a.get("name") == name]
    if any(a.get("runtime") == "driver" for a in declared):
        return []
    if declared:
        runtime = declared[0].get("runtime", "tool")
        rule = f"must name a runtime: driver artifact; {name!r} is declared with runtime {runtime!r}"
    else:
        rule = "must name an artifact declared in artifacts[] with runtime: driver; none has this name"
    return [diagnostic("E-INF-008", path, rule, name)]


def _prompt_artifact_rules(ctx: Context, inference: dict) -> list[Diagnostic]:
    name = inference.get("system_prompt_artifact")
    declared = [a for _, a in ctx.artifacts() if a.get("name") == name] if isinstance(name, str) else []
    if not declared:
        return []
    art = declared[0]
    payload = art.get("prompt_payload")
    allowed = payload if isinstance(payload, bool) else art.get("runtime") == "skill"
    if allowed:
        return []
    rule = ("names an artifact that is not a prompt payload; set prompt_payload: true on it "
            "(the default only for a skill)")
    return [diagnostic("E-INF-012", "inference.system_prompt_artifact", rule, name)]

