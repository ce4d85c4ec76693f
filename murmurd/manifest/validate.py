"""Validate a capsule's `murmur.yaml`: collect every problem, then build the typed model.

Validation never stops at the first problem. It runs in four passes over the raw YAML mapping:

1. rules: the semantic checks of runtime-notes §4, each emitting diagnostics with a stable code;
2. resolution: `inference.api_key: ${VAR}` is read from `env`, and `system_prompt_file` /
   `compaction.system_prompt_file` are read (relative to the manifest directory) into the prompt;
3. types: the resolved mapping goes through the pydantic models; each pydantic error becomes a
   diagnostic too, unless a rule already reported that very field;
4. unknown keys: every key the models do not know is a warning, with its path.

The model is returned only when there is no error. Nothing here touches the network or WASM; the
only I/O is reading `murmur.yaml` and the prompt files.

The rules live in `murmurd.manifest.checks`, one module per manifest section; this module reads the
file, runs them in order and composes the report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from murmurd.manifest.capsule import CapsuleManifest
from murmurd.manifest.checks.artifacts import rule_artifacts
from murmurd.manifest.checks.capabilities import rule_capabilities
from murmurd.manifest.checks.containment import check_containment
from murmurd.manifest.checks.context import Context, covered
from murmurd.manifest.checks.identity import rule_identity
from murmurd.manifest.checks.inference import rule_inference
from murmurd.manifest.checks.lifecycle import rule_lifecycle
from murmurd.manifest.checks.model_pass import build
from murmurd.manifest.checks.network import rule_network
from murmurd.manifest.checks.observability import rule_eval, rule_observability
from murmurd.manifest.checks.resolution import resolve
from murmurd.manifest.checks.unknown import unknown_keys
from murmurd.manifest.diagnostics import ROOT, Diagnostic, Report, diagnostic
from murmurd.manifest.reading import UnreadableFile, YamlRefused, load_yaml, read_text_file

MANIFEST_FILE = "murmur.yaml"

# The rules of pass 1, in the order their diagnostics are reported.
_RULES = (rule_identity, rule_artifacts, rule_capabilities, rule_network, rule_inference, rule_lifecycle,
          rule_observability, rule_eval)

# --------------------------------------------------------------------------- entry points


def load_capsule(
    manifest_dir: Path, env: Mapping[str, str] = os.environ
) -> tuple[CapsuleManifest | None, Report]:
    """Read `<manifest_dir>/murmur.yaml` and validate it.

    A missing file or a YAML error is a diagnostic, never an exception. `manifest_dir` may also be
    the path of the manifest file itself.
    """
    manifest_dir = Path(manifest_dir)
    file = manifest_dir if manifest_dir.is_file() else manifest_dir / MANIFEST_FILE
    raw, problem = _read_yaml(file)
    if problem is not None:
        return None, Report([problem], source=str(file))
    model, report = validate_manifest(raw, file.parent, env)
    report.source = str(file)
    return model, report


FLOOR_CODES = frozenset({"E-CAP-005", "E-RUN-012", "E-CAP-003"})


def load_capsule_for_report(manifest_dir: Path, env: Mapping[str, str] = os.environ) -> CapsuleManifest | None:
    """The manifest as `--explain-scope` reports it: also when its only errors are an unmet
    containment floor (upstream reports then too). None when anything else is wrong."""
    model, report = load_capsule(manifest_dir, env)
    if model is not None or not report.errors or {d.code for d in report.errors} - FLOOR_CODES:
        return model
    manifest_dir = Path(manifest_dir)
    raw, _ = _read_yaml(manifest_dir if manifest_dir.is_file() else manifest_dir / MANIFEST_FILE)
    floor = raw["capabilities"].pop("containment")
    model, _ = validate_manifest(raw, manifest_dir if manifest_dir.is_dir() else manifest_dir.parent, env)
    if model is None:
        return None
    return model.model_copy(update={"capabilities": model.capabilities.model_copy(update={"containment": floor})})


def validate_manifest(
    raw: dict, manifest_dir: Path, env: Mapping[str, str]
) -> tuple[CapsuleManifest | None, Report]:
    """Validate a parsed `murmur.yaml` mapping; return the model (None on any error) and the report."""
    report = Report()
    if not isinstance(raw, dict):
        shown = "null" if raw is None else f"a {type(raw).__name__}"
        report.add(diagnostic("E-MAN-003", ROOT, "the manifest must be a mapping of fields", rendered=shown))
        return None, report
    ctx = Context(raw, Path(manifest_dir), env)
    found: list[Diagnostic] = []
    for rule in _RULES:
        found.extend(rule(ctx))
    resolved, resolution = resolve(ctx)
    found.extend(resolution)
    model, type_errors = build(resolved)
    found.extend(d for d in type_errors if not covered(d.path, found))
    if model is not None:
        found.extend(check_containment(model, env))
    report.extend(found)
    report.extend(unknown_keys(CapsuleManifest, raw))
    return (model if report.ok else None), report


# --------------------------------------------------------------------------- reading


def _read_yaml(file: Path) -> tuple[Any, Diagnostic | None]:
    try:
        text = read_text_file(file)
    except FileNotFoundError:
        return None, diagnostic("E-IO-001", ROOT, f"no {MANIFEST_FILE} at {file}")
    except UnreadableFile as exc:
        return None, diagnostic("E-IO-001", ROOT, str(exc))
    try:
        return load_yaml(text), None
    except yaml.YAMLError as exc:
        return None, diagnostic("E-MAN-002", ROOT, f"{file} is not valid YAML: {_yaml_problem(exc)}")
    except YamlRefused as exc:
        return None, diagnostic("E-MAN-010", ROOT, f"{file} is refused: {exc}")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return problem
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"



__all__ = ["FLOOR_CODES", "MANIFEST_FILE", "load_capsule", "load_capsule_for_report", "validate_manifest"]
