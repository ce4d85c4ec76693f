"""The manifest's identity: `version` (and each artifact's) must be a string, not a YAML number or date."""

from __future__ import annotations

import datetime as dt
from typing import Any

from murmurd.manifest.checks.context import Context, is_number
from murmurd.manifest.diagnostics import Diagnostic, diagnostic


def rule_identity(ctx: Context) -> list[Diagnostic]:
    found = [_version_hint("version", ctx.raw.get("version"))]
    found += [_version_hint(f"artifacts[{i}].version", a.get("version")) for i, a in ctx.artifacts()]
    return [d for d in found if d is not None]


def _version_hint(path: str, value: Any) -> Diagnostic | None:
    if not (is_number(value) or isinstance(value, (dt.date, dt.datetime))):
        return None
    rule = 'must be a string; quote it (version: "1.0") so YAML does not read it as a number or date'
    return diagnostic("E-MAN-009", path, rule, value if is_number(value) else str(value))

