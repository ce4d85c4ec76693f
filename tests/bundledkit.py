"""Helpers for tests of murmurd's bundled artifacts: `artifacts[]` entries that name them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from murmurd.manifest.writing import dump_yaml


def bundled(name: str, runtime: str = "tool", **extra: Any) -> dict[str, Any]:
    """An `artifacts[]` entry naming a bundled artifact: no source, resolved by name."""
    return {"name": name, "runtime": runtime, **extra}


def with_rules(capsule: Path, rules: list[dict[str, Any]]) -> Path:
    """Add scripted-driver rules (responses picked by the last message's text) to a capsule."""
    path = capsule / "murmur.yaml"
    manifest = yaml.safe_load(path.read_text())
    manifest["inference"]["driver"]["config"]["rules"] = rules
    path.write_text(dump_yaml(manifest))
    return capsule
