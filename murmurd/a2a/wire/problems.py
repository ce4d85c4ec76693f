"""Pydantic validation errors as plain words: the field a client got wrong and what was expected.

A validator's own report names its internals: a union's branches appear in the location
(`status.literal['TASK_STATE_…',…]`, `status.int`) and each branch reports on its own, so one
wrong field reads as several. Here the branches are folded back into their field, and the
field's problems are said once: `status: must be one of TASK_STATE_SUBMITTED, … or a state
number (got "BOGUS")`. Pure: no I/O, no pydantic import beyond the error dicts it is handed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MAX_SHOWN_INPUT = 60  # characters of the offending value quoted back to the client

# A union branch or a validator wrapper in a location: `literal[...]`, `int`, `function-after[...]`.
_BRANCH = re.compile(r"^(?:[a-z-]+\[.*\]|int|str|bool|float|dict|list|none|bytes|json-or-python|lax-or-strict|"
                     r"union|tagged-union|model|default|nullable|chain|function-[a-z]+)$", re.S)

_TYPES = {
    "string_type": "a string", "int_type": "an integer", "int_parsing": "an integer", "bool_type": "true or false",
    "bool_parsing": "true or false", "float_type": "a number", "float_parsing": "a number",
    "dict_type": "a JSON object", "model_type": "a JSON object", "model_attributes_type": "a JSON object",
    "list_type": "a JSON array", "none_required": "null", "int_from_float": "a whole number",
}


def field_path(loc: Iterable[int | str], params: Any = None) -> str:
    """`message.parts[0].text`, without union branches or a tagged union's tag (the value of the
    object's own `kind`, found by walking `params` along the location); `params` for the root."""
    text, node, tag_skipped = "", params, False
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and -len(node) <= part < len(node) else None
            tag_skipped = False
            continue
        if isinstance(node, dict) and not tag_skipped and part in (node.get("kind"), node.get("type")):
            tag_skipped = True
            continue  # a discriminator's value: the branch the object chose, not a field
        if _BRANCH.match(part) and not (isinstance(node, dict) and part in node):
            continue
        text += f".{part}" if text else part
        node, tag_skipped = (node.get(part) if isinstance(node, dict) else None), False
    return text or "params"


def _expectation(error: Mapping[str, Any]) -> str | None:
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind in _TYPES:
        return _TYPES[kind]
    if kind in ("literal_error", "enum"):
        names = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"one of {', '.join(names)}" if names else None
    bounds = {"greater_than_equal": "at least {ge}", "greater_than": "more than {gt}",
              "less_than_equal": "at most {le}", "less_than": "less than {lt}",
              "string_too_short": "at least {min_length} character(s) long",
              "string_too_long": "at most {max_length} characters long",
              "too_short": "at least {min_length} item(s)", "too_long": "at most {max_length} items"}
    if kind in bounds:
        try:
            return bounds[kind].format(**ctx)
        except (KeyError, IndexError):
            return None
    return None


def _statement(error: Mapping[str, Any]) -> str:
    """A problem that is not a type or bound: a missing field, an unknown one, a rule's words."""
    kind, message = error.get("type", ""), str(error.get("msg", "invalid"))
    ctx = error.get("ctx") or {}
    tag = str(ctx.get("discriminator", "kind"))
    tag = "kind" if "(" in tag else tag.strip("'")  # a callable discriminator reads its `kind`
    if kind == "union_tag_invalid":
        tags = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected_tags", ""))))
        return f"{tag} must be one of {tags} (got {_shown(ctx.get('tag'))})"
    if kind == "union_tag_not_found":
        return f"needs a {tag} member"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field here"
    if kind in ("value_error", "assertion_error"):
        return re.sub(r"^(Value|Assertion) error, ", "", message)
    return message[:1].lower() + message[1:]


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_SHOWN_INPUT else text[:MAX_SHOWN_INPUT - 1] + "…"


def describe(errors: Iterable[Mapping[str, Any]], params: Any = None, limit: int = 10) -> list[dict[str, str]]:
    """One `{"field", "problem"}` per wrong field, in the order the fields first failed;
    `params`, the object validated, tells a tagged union's tag from a field."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for error in errors:
        grouped.setdefault(field_path(error.get("loc", ()), params), []).append(error)
    problems = []
    for path, field_errors in list(grouped.items())[:limit]:
        expected = list(dict.fromkeys(e for e in map(_expectation, field_errors) if e is not None))
        rules = [_statement(e) for e in field_errors if _expectation(e) is None]
        if rules:
            problem = rules[0]
        else:
            problem = "must be " + " or ".join(expected)
        if "input" in field_errors[0] and field_errors[0].get("type") != "missing" and not rules:
            problem += f" (got {_shown(field_errors[0]['input'])})"
        problems.append({"field": path, "problem": problem})
    return problems


def summary(problems: list[dict[str, str]], shown: int = 3) -> str:
    """`status: must be …; pageSize: must be at most 100` (the first few; data carries all)."""
    return "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:shown])
