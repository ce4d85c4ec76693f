"""Containment before a launch: `--explain-scope`'s report, the `--containment` floor refused before
staging, and the containment summary `explain` shows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from murmurd.commands.common import eprint


def containment_summary(grants: dict) -> dict:
    """The containment part of `effective_grants`, as `murmurd explain` shows it."""
    summary = {"declared": grants["declared_containment"], "achieved": grants["achieved_containment"],
               "mechanism": grants["enforcement_tier"], "floor_met": grants["floor_met"],
               "workdir_exec": grants["workdir_exec"]}
    if "shortfall_reason" in grants:
        summary["shortfall_reason"] = grants["shortfall_reason"]
    return summary


def render_scope(grants: dict) -> str:
    """`--explain-scope`'s human layout (upstream's): containment, then every effective grant."""
    def shown(value: object) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) or "<none>"
        return "<none>" if value is None else str(value)

    lines = ["Containment", f"  declared:  {grants['declared_containment']}",
             f"  achieved:  {grants['achieved_containment']}", f"  floor met: {shown(grants['floor_met'])}"]
    if "shortfall_reason" in grants:
        lines.append(f"  reason:    {grants['shortfall_reason']}")
    lines += [f"  mechanism: {grants['enforcement_tier']}", "Effective grants"]
    for label, key in (("filesystem scope", "filesystem_scope"), ("workdir exec", "workdir_exec"),
                       ("network allow", "network_allow"), ("unix sockets", "unix_sockets"),
                       ("shell allow", "shell_allow"), ("spawn allow", "spawn_allow"), ("env allow", "env_allow"),
                       ("interpreter runtime", "interpreter_runtime_grants"),
                       ("staged runtime", "staged_runtime_grants")):
        lines.append(f"  {label + ':':<21}{shown(grants[key])}")
    if not grants["floor_met"]:
        lines.append("This is a report only — `murmurd run` without --explain-scope would refuse to launch here.")
    return "\n".join(lines)


def containment_check(args: argparse.Namespace, env: dict[str, str], command: str) -> int | None:
    """`--explain-scope` (report, exit 0) and the `--containment` floor (refuse before staging when
    murmurd cannot meet it). None: go on and launch."""
    from murmurd.manifest.validate import load_capsule, load_capsule_for_report
    from murmurd.containment.host import probe_host
    from murmurd.containment.plan import floor_refusal
    from murmurd.staging.grants import compute_grants, containment_floor, containment_plan, effective_grants

    explain = getattr(args, "explain_scope", False)
    if not explain and args.containment is None:
        return None
    if explain:
        manifest = load_capsule_for_report(Path(args.capsule_dir), env)
    else:
        manifest, _ = load_capsule(Path(args.capsule_dir), env)
    if manifest is None:
        return None  # staging reports every error
    floor = containment_floor(manifest, args.containment)
    if explain:
        grants = effective_grants(manifest, compute_grants(manifest, env), floor, env)
        print(json.dumps(grants) if args.json else render_scope(grants), flush=True)
        return 0
    shell = manifest.capabilities.shell
    refusal = floor_refusal(floor, containment_plan(manifest, env), probe_host(), subprocesses=bool(shell and shell.allow))
    if refusal is None:
        return None
    eprint(f"murmurd {command}: {refusal[0]}: containment floor not met: {refusal[1]}")
    return 1
