"""What a capsule declares, reported without running it: `validate` (every error and warning) and
`explain` (the grants every component would run under)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from murmurd.commands.argtypes import capsule_dir
from murmurd.commands.common import run_env
from murmurd.commands.scope import containment_summary


def add_validate(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    validate = commands.add_parser("validate", help="report every error and warning in a capsule's murmur.yaml")
    validate.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    validate.add_argument("--json", action="store_true", help="machine-readable output")
    validate.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    validate.set_defaults(handler=cmd_validate)


def add_explain(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    explain = commands.add_parser("explain", help="print the grants every component would run under")
    explain.add_argument("capsule_dir", metavar="capsule-dir", type=capsule_dir, help="the capsule's directory, or its murmur.yaml")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.add_argument("--no-env-file", action="store_true", help="do not load the project's .env")
    explain.set_defaults(handler=cmd_explain)


def cmd_validate(args: argparse.Namespace) -> int:
    from murmurd.manifest.validate import load_capsule

    env = run_env(args, "validate")  # the environment `run` would launch with
    if env is None:
        return 1
    manifest, report = load_capsule(Path(args.capsule_dir), env)
    if manifest is not None:  # each local hook's own contract, as staging would judge it
        from murmurd.staging.hook_contracts import local_hook_findings

        report.extend(local_hook_findings(manifest, Path(args.capsule_dir).resolve()))
    if manifest is not None:  # what staging would certainly refuse (an unknown name, a refused endpoint)
        from murmurd.staging.launch_checks import launch_checks

        report.extend(launch_checks(manifest, Path(args.capsule_dir), env=env))
    print(report.to_json() if args.json else report.to_text())
    return 0 if report.ok else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from murmurd.manifest.validate import load_capsule, load_capsule_for_report
    from murmurd.staging.grants import compute_grants, effective_grants

    env = run_env(args, "explain")  # the environment `run` would launch with, `.env` included
    if env is None:
        return 1
    manifest, report = load_capsule(Path(args.capsule_dir), env)
    if manifest is None:  # an unmet containment floor alone is reported, `floor met: no`
        manifest = load_capsule_for_report(Path(args.capsule_dir), env)
    if manifest is None:
        print(report.to_text(), file=sys.stderr)
        return 1
    grants = compute_grants(manifest, env)
    containment = containment_summary(effective_grants(manifest, grants, env=env))
    if args.json:
        print(json.dumps({**grants.to_json(), "containment": containment}, indent=2, sort_keys=True))
        return 0
    print(f"{manifest.name} {manifest.version}")
    print(f"  containment: {containment['achieved']} (declared {containment['declared']}, "
          f"mechanism {containment['mechanism']}, floor met: {'yes' if containment['floor_met'] else 'no'})")
    for code in report.warnings:
        if code.code.startswith(("W-SEC-", "W-INF-001")):
            print(f"  {code.code}: {code.message}")
    for name, grant in [("(capsule)", grants.capsule), *sorted(grants.components.items())]:
        print(f"  {name}:")
        for key, value in grant.to_json().items():
            print(f"    {key}: {value}")
    for warning in grants.warnings:
        print(f"warning: {warning}")
    return 0
