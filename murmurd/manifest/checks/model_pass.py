"""The model pass: the resolved mapping through the pydantic models, each error a diagnostic."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from murmurd.manifest.capsule import CapsuleManifest
from murmurd.manifest.checks.context import join
from murmurd.manifest.checks.inference import API_KEY_PATH
from murmurd.manifest.diagnostics import REDACTED, ROOT, Diagnostic, diagnostic, render_value


def build(resolved: dict) -> tuple[CapsuleManifest | None, list[Diagnostic]]:
    try:
        return CapsuleManifest.model_validate(resolved), []
    except ValidationError as exc:
        return None, [_from_pydantic(err) for err in exc.errors()]


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
_TYPE_RULES = {
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
}


def _from_pydantic(err: Any) -> Diagnostic:
    path = render_loc(err["loc"])
    kind = err["type"]
    if kind == "missing":
        return diagnostic("E-MAN-001", path, "is required")
    code, rule = _classify(kind, str(err["msg"]))
    shown = REDACTED if _may_hold_secret(path) else render_value(err.get("input"))
    return diagnostic(code, path, rule, rendered=shown)


def _classify(kind: str, msg: str) -> tuple[str, str]:
    if kind == "string_too_short":
        return "E-MAN-001", "must not be empty"
    rule = _TYPE_RULES.get(kind) or msg.replace("Input should be", "must be", 1)
    if kind == "literal_error":
        return "E-MAN-007", rule
    if kind in _RANGE_ERRORS:
        return "E-MAN-006", rule
    return "E-MAN-003", rule


def _may_hold_secret(path: str) -> bool:
    """The api key itself, anything inside it, or a block that contains it (`inference`)."""
    return path in (ROOT, "inference") or path == API_KEY_PATH or path.startswith(API_KEY_PATH + "[")


def render_loc(loc: Iterable[Any]) -> str:
    """('artifacts', 2, 'capabilities') -> 'artifacts[2].capabilities'."""
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else join(path, part)
    return path or ROOT

