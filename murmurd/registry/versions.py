"""Pure version rules: reserved strings, channel aliases, requirements, ordering."""

from __future__ import annotations

import re

RESERVED = ("latest", "stable", "edge")
_REQUIREMENT = re.compile(r"^\s*(>=|<=|==|>|<|=|\^|~)\s*(\S+)\s*$")


def is_reserved(version: str) -> bool:
    """`latest`, `stable`, `edge` in any case: never publishable (E-REG-004)."""
    return version.strip().lower() in RESERVED


def is_exact(version: str | None) -> bool:
    """A concrete version (not a channel alias and not a requirement)."""
    return bool(version) and not is_reserved(version) and _REQUIREMENT.match(version) is None and "," not in version


def version_key(version: str) -> tuple:
    """Semver-ish ordering: numeric parts numerically; a pre-release sorts before its release."""
    core, _, pre = version.lstrip("vV").partition("-")
    numbers = tuple((0, int(p)) if p.isdigit() else (1, p) for p in core.split("."))
    return (numbers, (1,) if not pre else (0, pre))


def _compare(op: str, have: str, want: str) -> bool:
    a, b = version_key(have), version_key(want)
    if op in ("=", "=="):
        return a == b
    if op == ">=":
        return a >= b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == "<":
        return a < b
    w = [p for _, p in version_key(want)[0]]
    h = [p for _, p in version_key(have)[0]]
    if a < b:
        return False
    if op == "^":  # same leading non-zero component
        lead = next((i for i, p in enumerate(w) if p != 0), len(w) - 1)
        return h[: lead + 1] == w[: lead + 1]
    return h[: min(2, len(w))] == w[: min(2, len(w))] if len(w) > 1 else h[:1] == w[:1]  # ~


def satisfies(requirement: str | None, version: str) -> bool:
    """Whether `version` meets `requirement`: none or an alias accepts any version, an exact
    version only itself, `">=0.1"` (and `, `-joined clauses) by comparison."""
    if not requirement or is_reserved(requirement):
        return True
    if is_exact(requirement):
        return requirement == version
    for clause in requirement.split(","):
        match = _REQUIREMENT.match(clause)
        if match is None or not _compare(match.group(1), version, match.group(2)):
            return False
    return True


def best(requirement: str | None, versions: list[str]) -> str | None:
    """The highest of `versions` meeting `requirement` (pre-releases only when asked exactly)."""
    fitting = [v for v in versions if satisfies(requirement, v)]
    if not fitting:
        return None
    releases = [v for v in fitting if "-" not in v] or fitting
    return max(releases, key=version_key)
