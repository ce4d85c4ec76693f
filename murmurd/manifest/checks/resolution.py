"""The resolution pass: `inference.api_key: ${VAR}` read from the environment, and the prompt files
(relative to the manifest directory) read into the prompt, on a copy of the raw mapping."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path

from murmurd.manifest.checks.context import Context, section
from murmurd.manifest.checks.inference import API_KEY_PATH, driver_name
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.manifest.reading import UnreadableFile, read_text_file

_ENV_REF = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
_ENV_REF_LIKE = re.compile(r"\$\{.*\}", re.DOTALL)


def resolve(ctx: Context) -> tuple[dict, list[Diagnostic]]:
    """A copy of the raw mapping with the api key and prompt files resolved."""
    resolved = copy.deepcopy(ctx.raw)
    inference = section(resolved, "inference")
    if inference is None:
        return resolved, []
    name, path = driver_name(inference)
    if path == "inference.provider.artifact":
        inference["driver"] = {**(section(inference, "driver") or {}), "artifact": name}
    found = _resolve_api_key(inference, ctx.env)
    found += _resolve_prompt_file(inference, "inference", ctx.manifest_dir)
    compaction = section(inference, "compaction")
    if compaction is not None:
        found += _resolve_prompt_file(compaction, "inference.compaction", ctx.manifest_dir)
    return resolved, found


def _resolve_api_key(inference: dict, env: Mapping[str, str]) -> list[Diagnostic]:
    key = inference.get("api_key")
    if not isinstance(key, str):
        return []
    match = _ENV_REF.fullmatch(key)
    if match:
        value = env.get(match.group(1))
        if value:
            inference["api_key"] = value
            return []
        inference["api_key"] = None
        rule = f"environment variable {match.group(1)} is unset or empty; export it before launch"
        return [diagnostic("E-INF-004", API_KEY_PATH, rule, rendered=repr(key))]
    if _ENV_REF_LIKE.fullmatch(key):
        inference["api_key"] = None
        rule = "an environment reference must be ${UPPER_SNAKE_NAME}"
        return [diagnostic("E-INF-005", API_KEY_PATH, rule, rendered=repr(key))]
    return []  # a literal key


def _resolve_prompt_file(block: dict, prefix: str, manifest_dir: Path) -> list[Diagnostic]:
    name = block.get("system_prompt_file")
    if not isinstance(name, str):
        return []
    file = manifest_dir / name
    try:
        text = read_text_file(file)
    except (UnreadableFile, OSError) as exc:
        reason = exc.reason if isinstance(exc, UnreadableFile) else exc.strerror
        rule = f"cannot read {file} ({reason}); the path is relative to the manifest directory"
        return [diagnostic("E-INF-007", f"{prefix}.system_prompt_file", rule, name)]
    if block.get("system_prompt") is None:
        block["system_prompt"] = text
    return []

