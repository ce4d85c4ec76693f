"""What every rule reads the raw manifest through, and the small helpers they share."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from murmurd.manifest.diagnostics import Diagnostic


@dataclass(frozen=True)
class Context:
    raw: dict
    manifest_dir: Path
    env: Mapping[str, str]

    def section(self, *keys: str) -> dict | None:
        return section(self.raw, *keys)

    def artifacts(self) -> list[tuple[int, dict]]:
        entries = self.raw.get("artifacts")
        if not isinstance(entries, list):
            return []
        return [(i, a) for i, a in enumerate(entries) if isinstance(a, dict)]


def section(mapping: Any, *keys: str) -> dict | None:
    """`mapping[k1][k2]...` when every step is a mapping, else None."""
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping if isinstance(mapping, dict) else None


def join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def covered(path: str, found: Iterable[Diagnostic]) -> bool:
    """A rule already reported this field (or a field containing it)."""
    return any(path == d.path or path.startswith((d.path + ".", d.path + "[")) for d in found)


def hide_userinfo(url: str) -> str:
    """Never echo credentials embedded in a URL."""
    return re.sub(r"(?<=://)[^/@]*@", "***@", url, count=1)
