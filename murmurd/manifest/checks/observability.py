"""`observability`: the OTLP endpoint, and an `eval` block that would score nothing or less than meant."""

from __future__ import annotations

from urllib.parse import urlsplit

from murmurd.manifest.capsule import SCORER_TYPES
from murmurd.manifest.checks.context import Context, hide_userinfo
from murmurd.manifest.diagnostics import Diagnostic, diagnostic, render_value


def rule_observability(ctx: Context) -> list[Diagnostic]:
    endpoint = (ctx.section("observability") or {}).get("otel_endpoint")
    if not isinstance(endpoint, str):
        return []
    parts = urlsplit(endpoint)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return []
    rule = "must be an OTLP/HTTP base URL starting with http:// or https://"
    return [diagnostic("E-MAN-008", "observability.otel_endpoint", rule, hide_userinfo(endpoint))]


EVAL_HOOK = "murmur-hook-eval"


def rule_eval(ctx: Context) -> list[Diagnostic]:
    """`observability.eval`: types and ranges are the models'; here what would make it score
    nothing or less than the author expects (warnings: upstream's hook notes them and goes on)."""
    block = ctx.section("observability", "eval")
    if block is None:
        return []
    scorers = block.get("scorers")
    found: list[Diagnostic] = []
    if scorers is None or scorers == []:
        found.append(diagnostic("W-EVAL-003", "observability.eval.scorers", "no scorers: the eval hook writes nothing",
                                rendered=render_value(scorers)))
    names: dict[str, int] = {}
    for i, scorer in enumerate(scorers if isinstance(scorers, list) else []):
        if not isinstance(scorer, dict):
            continue
        kind, path = scorer.get("type"), f"observability.eval.scorers[{i}]"
        if isinstance(kind, str) and kind and kind not in SCORER_TYPES:
            rule = f"unknown scorer type, skipped; one of {', '.join(SCORER_TYPES)}"
            found.append(diagnostic("W-EVAL-001", f"{path}.type", rule, kind))
        elif kind == "llm_judge":
            found.append(diagnostic("W-EVAL-002", f"{path}.type", "llm_judge is parsed but scores nothing (upstream's too)",
                                    kind))
        label = scorer.get("name") if isinstance(scorer.get("name"), str) else kind
        if isinstance(label, str) and label in names:
            rule = f"the same name as scorers[{names[label]}]; dataset_run keeps one score per name"
            found.append(diagnostic("W-EVAL-005", f"{path}.name", rule, label))
        elif isinstance(label, str):
            names[label] = i
    hooks = [a.get("name") for _i, a in ctx.artifacts() if a.get("runtime") == "hook"]
    if EVAL_HOOK not in hooks:
        rule = f"no {EVAL_HOOK} hook among the artifacts: nothing scores the session or writes eval.jsonl"
        found.append(diagnostic("W-EVAL-004", "observability.eval", rule, rendered="{...}"))
    return found

