"""Unknown keys: a warning for every key the models do not know (with a close match), and a named
one for each upstream field murmurd does not implement."""

from __future__ import annotations

import difflib
import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from murmurd.manifest.checks.context import join
from murmurd.manifest.diagnostics import Diagnostic, diagnostic, render_value


# Fields upstream murmur documents (shared/spec/upstream-manifest-cli.md) that murmurd does not
# implement: each gets a W-MAN-002 warning naming what it does upstream, in `validate` and at
# launch. A block murmurd does not model (`capabilities.spawn`) is one warning for the whole block.
UPSTREAM_UNIMPLEMENTED: dict[str, str] = {
    "mur_version": "pins the mur release the capsule was written for (upstream warns when it differs)",
    "capabilities.spawn": "lets a capsule component spawn native subprocesses; murmurd has no spawn interface",
    "capabilities.shell.staged_runtime": "binds a pinned host tree into a sealed root; murmurd never builds one",
    "artifacts[].capabilities.containment": "is inert on an artifact upstream too (capsule-wide only)",
    "artifacts[].capabilities.resources": "is inert on an artifact (capabilities.resources is capsule-wide)",
    "artifacts[].capabilities.spawn": "lets a component spawn native subprocesses; murmurd has no spawn interface",
}


def unknown_keys(model: type[BaseModel], raw: dict, prefix: str = "") -> list[Diagnostic]:
    """A warning for every key of `raw` (recursively) that `model` does not declare."""
    found: list[Diagnostic] = []
    fields = model.model_fields
    for key, value in raw.items():
        path = join(prefix, key)
        field = fields.get(key) if isinstance(key, str) else None
        upstream = upstream_field(path)
        if upstream is not None:  # upstream's field, known or not to the models: named, never W-MAN-001
            found.append(diagnostic("W-MAN-002", path, f"{upstream}; murmurd ignores it", rendered=render_value(value)))
            if field is None:
                continue
        if field is None:
            found.append(_unknown_key(path, key, prefix, list(fields)))
            continue
        nested, many = _nested_model(field.annotation)
        if nested is None:
            continue
        if many and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += unknown_keys(nested, item, f"{path}[{i}]")
        elif not many and isinstance(value, dict):
            found += unknown_keys(nested, value, path)
    return found


def upstream_field(path: str) -> str | None:
    """What an upstream-documented field murmurd does not implement does upstream, or None."""
    return UPSTREAM_UNIMPLEMENTED.get(re.sub(r"\[\d+\]", "[]", path))


def _unknown_key(path: str, key: Any, prefix: str, known: list[str]) -> Diagnostic:
    where = prefix or "the manifest"
    rule = f"unknown key in {where}, ignored; known keys: {', '.join(known)}"
    close = difflib.get_close_matches(str(key), known, n=1)
    if close:
        rule += f"; did you mean {close[0]!r}?"
    return diagnostic("W-MAN-001", path, rule, rendered=repr(str(key)))


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model inside `M`, `M | None` or `list[M]`, and whether it is a list."""
    origin = get_origin(annotation)
    if origin is list:
        inner, _ = _nested_model(get_args(annotation)[0])
        return inner, True
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            inner, many = _nested_model(arg)
            if inner is not None:
                return inner, many
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False

