"""The checks that depend on this host, run on the built model: the containment floor against what
the kernel enforces, the `W-SEC` warnings, and what a process-transport CLI is granted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from murmurd.containment import cli_profile
from murmurd.containment.host import probe_host
from murmurd.containment.plan import SETTING_VARIABLE, floor_refusal, plan_containment, setting_from, shell_warnings
from murmurd.containment.seccomp_filter import EXTRA_VARIABLE, extras_from
from murmurd.manifest.capsule import CapsuleManifest
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.staging.preflight import dialect_of


def check_containment(model: CapsuleManifest, env: Mapping[str, str]) -> list[Diagnostic]:
    """The floor against what this host achieves (`E-CAP-005`, `E-RUN-012`, `E-CAP-003`), and the
    `W-SEC` warnings that say what is not enforced on shell children: the same at `validate` and
    at every launch."""
    try:
        setting = setting_from(env)
    except ValueError as exc:
        return [diagnostic("E-CAP-012", SETTING_VARIABLE, f"{exc}; unset it or say auto", env.get(SETTING_VARIABLE))]
    try:
        extras = extras_from(dict(env))
    except ValueError as exc:
        return [diagnostic("E-CAP-012", EXTRA_VARIABLE, f"{exc}; name syscalls only", env.get(EXTRA_VARIABLE))]
    caps = model.capabilities
    support = probe_host()
    shell_allow = list(caps.shell.allow) if caps.shell else []
    runtime = tuple((d.path, d.list_dir) for g in (caps.shell.interpreter_runtime if caps.shell else []) for d in g.dirs)
    plan = plan_containment(support, setting, caps.filesystem.workdir_exec, declared=caps.containment or "advisory",
                            unix_sockets=caps.network.unix_sockets, runtime=runtime, seccomp_extra=extras)
    found: list[Diagnostic] = []
    floor = caps.containment
    refusal = floor_refusal(floor, plan, support, subprocesses=bool(shell_allow)) if floor is not None else None
    if refusal is not None:
        code, reason = refusal
        found.append(diagnostic(code, "capabilities.containment", f"{reason}; refused rather than run with less", floor))
    warnings = shell_warnings(plan, support, shell_allow=shell_allow, network_allow=list(caps.network.allow),
                              declares_workdir_exec=caps.filesystem.workdir_exec)
    for code, path, message in warnings:
        found.append(diagnostic(code, path, message))
    if model.inference is not None and model.inference.transport == "process":
        found.append(diagnostic("W-INF-001", "inference.transport", _process_grant(model, plan, env)))
    return found


def _process_grant(model: CapsuleManifest, plan: Any, env: Mapping[str, str]) -> str:
    """What a process-transport CLI runs with (its profile: murmurd/containment/cli_profile.py), in one line."""
    inference = model.inference
    assert inference is not None
    command = inference.command or "claude"
    prompt_skill = inference.system_prompt_artifact
    tools = [a.name for a in model.artifacts if a.kind == "tool" or (a.kind == "skill" and a.name != prompt_skill)]
    tools += list(model.capabilities.shell.allow) if model.capabilities.shell else []
    if plan.landlock:
        confined = ("Landlock: read and execute only of the CLI's real path, its #! interpreter, their shared-library "
                    "closure and its npm package; read of its own /proc/self, the resolver's files and the TLS trust "
                    f"store; writes beneath the workdir and HOME {env.get('HOME') or '<unset>'!s}")
        confined += ", neither executable" if plan.mountns else ""
        confined += "; the seccomp allowlist" if plan.seccomp else "; no seccomp filter"
    else:
        confined = f"no Landlock: it reads, writes and executes anything murmurd's uid can; HOME {env.get('HOME') or '<unset>'!s}"
    cgroup = "a pids cgroup" if plan.pids_root is not None else "no pids cgroup"
    providers = cli_profile.provider_origins(dialect_of(command), env)
    granted = cli_profile.granted_origins(providers, model.capabilities.network.allow)
    missing = [o for o in providers if o not in granted]
    if plan.netns:
        network = (f"its network is a namespace whose only way out is the egress relay: its provider origin(s) "
                   f"{', '.join(granted) or '<none>'} (capabilities.network.allow) and murmurd's loopback MCP bridge")
        if missing:
            network += f"; its configured provider {', '.join(missing)} is not in network.allow, so it is unreachable"
    else:
        network = "its network is not confined (no network namespace here): it reaches any host murmurd can"
    return (f"spawns {command!r} in the session workdir under the process transport's containment profile "
            f"({confined}; {cgroup}; rlimits but memory_bytes); {network}; its environment keeps only what a CLI "
            f"agent reads; over MCP it reaches: {', '.join(tools) or '<no tools>'}")

