"""Helpers for tests of murmurd's bundled artifacts: capsules that name them without a source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hookkit import hooked_capsule


def bundled(name: str, runtime: str = "tool", **extra: Any) -> dict[str, Any]:
    """An `artifacts[]` entry naming a bundled artifact: no source, resolved by name."""
    return {"name": name, "runtime": runtime, **extra}


def bundled_capsule(root: Path, entries: list[dict[str, Any]], responses: list[dict[str, Any]], **extra: Any) -> Path:
    """A scripted capsule (echo tool included) declaring these bundled artifacts by name."""
    return hooked_capsule(root, entries, responses, **extra)
