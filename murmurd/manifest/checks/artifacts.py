"""`artifacts[]`: runtimes, names, what each runtime may declare, local sources, narrowed capabilities."""

from __future__ import annotations

import re
from typing import Any

from murmurd.manifest.checks.capabilities import check_capabilities
from murmurd.manifest.checks.context import Context
from murmurd.manifest.diagnostics import Diagnostic, diagnostic

ARTIFACT_RUNTIMES = ("tool", "wasm", "native", "driver", "hook", "skill")  # native: python-native guide
# An artifact name becomes a directory (`tools/<name>/`), a log name and a model-visible tool
# name, so it is what every provider accepts as a tool name: no `/`, `.`, spaces or NUL.
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def rule_artifacts(ctx: Context) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    seen: dict[str, int] = {}
    for i, art in ctx.artifacts():
        path = f"artifacts[{i}]"
        runtime = art.get("runtime", "tool")
        found += _artifact_runtime(path, runtime)
        name = art.get("name")
        if isinstance(name, str) and name and not ARTIFACT_NAME.fullmatch(name):
            rule = ("must be a plain name: a letter or digit, then letters, digits, '_' or '-', "
                    "at most 64 characters (it names tools/<name>/ and the model's tool)")
            found.append(diagnostic("E-ART-006", f"{path}.name", rule, name))
        if isinstance(name, str):
            if name in seen:
                rule = f"duplicate artifact name; artifacts[{seen[name]}] already declares it"
                found.append(diagnostic("E-ART-002", f"{path}.name", rule, name))
            seen.setdefault(name, i)
        if runtime == "skill" and art.get("capabilities") is not None:
            rule = "a skill runs no code, so it cannot declare capabilities"
            found.append(diagnostic("E-ART-003", f"{path}.capabilities", rule, art["capabilities"]))
        if "on_overflow" in art and runtime != "hook":
            rule = f"on_overflow applies to hooks only; this artifact is runtime {runtime!r}"
            found.append(diagnostic("E-ART-004", f"{path}.on_overflow", rule, art["on_overflow"]))
        if art.get("local_source") is True and not isinstance(art.get("source"), str):
            rule = "local_source: true needs a `source` path to read the artifact from"
            found.append(diagnostic("E-ART-005", f"{path}.source", rule, art.get("source")))
        if isinstance(art.get("source"), str) and _effective_local(art, runtime) and art.get("version") is not None:
            rule = ("is not checked for a local source: the artifact is read from disk every run and never "
                    "pinned in murmur.lock (upstream shows its version as 'local')")
            found.append(diagnostic("W-ART-001", f"{path}.version", rule, art["version"]))
        if isinstance(art.get("source"), str) and not _effective_local(art, runtime):
            rule = (f"artifact {name!r} declares 'source:' but does not declare 'local_source: true' "
                    f"(runtime: {runtime}); only a skill reads its source locally by default")
            found.append(diagnostic("E-ART-007", f"{path}.local_source", rule, art.get("local_source", False)))
        caps = art.get("capabilities")
        if isinstance(caps, dict):
            found += check_capabilities(caps, f"{path}.capabilities", narrowing=True)
    return found


def _effective_local(art: dict, runtime: Any) -> bool:
    """Upstream's default: `local_source` is true for a skill and false otherwise; explicit wins."""
    explicit = art.get("local_source")
    return explicit if isinstance(explicit, bool) else runtime == "skill"


def _artifact_runtime(path: str, runtime: Any) -> list[Diagnostic]:
    if not isinstance(runtime, str) or runtime in ARTIFACT_RUNTIMES:
        return []  # a non-string is a type error, reported by the model pass
    allowed = ", ".join(repr(r) for r in ARTIFACT_RUNTIMES)
    rule = f"unknown runtime; expected one of {allowed}"
    return [diagnostic("E-ART-001", f"{path}.runtime", rule, runtime)]

