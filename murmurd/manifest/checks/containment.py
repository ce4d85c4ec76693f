"""The checks that depend on this host, run on the built model: the containment floor against what
the kernel enforces, the `W-SEC` warnings, and what a process-transport CLI is granted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from murmurd.containment import cli_profile
from murmurd.containment.host import probe_host
from murmurd.containment.plan import SETTING_VARIABLE, floor_refusal, plan_containment, setting_from, shell_warnings
from murmurd.containment.seccomp_filter import EXTRA_VARIABLE, extras_from
from murmurd.manifest.capsule import CapsuleManifest
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.manifest.preflight import dialect_of


def native_tools_path(model: CapsuleManifest, native: Sequence[int] | None = None) -> str | None:
    """The manifest path naming the capsule's native tools (`native`: their `artifacts[]` indices,
    as staging resolved them; by default the entries the manifest itself says are native), or
    None when it has none."""
    indices = [i for i, a in enumerate(model.artifacts) if a.runtime == "native"] if native is None else list(native)
    if not indices:
        return None
    names = ", ".join(model.artifacts[i].name for i in indices)
    return f"artifacts[{indices[0]}] (native tools: {names})"


def check_containment(model: CapsuleManifest, env: Mapping[str, str],
                      native: Sequence[int] | None = None) -> list[Diagnostic]:
    """The floor against what this host achieves (`E-CAP-005`, `E-RUN-012`, `E-CAP-003`), and the
    `W-SEC` warnings that say what is not enforced on shell children and native tools (which run
    under the same containment): the same at `validate` and at every launch. `native`: the
    `artifacts[]` indices staging resolved to native tools (by default, what the manifest says)."""
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
    natives = native_tools_path(model, native)
    subprocesses = bool(shell_allow) or natives is not None
    refusal = floor_refusal(floor, plan, support, subprocesses=subprocesses) if floor is not None else None
    if refusal is not None:
        code, reason = refusal
        found.append(diagnostic(code, "capabilities.containment", f"{reason}; refused rather than run with less", floor))
    warnings = shell_warnings(plan, support, shell_allow=shell_allow, network_allow=list(caps.network.allow),
                              declares_workdir_exec=caps.filesystem.workdir_exec, native_tools=natives)
    for code, path, message in warnings:
        found.append(diagnostic(code, path, message))
    if model.inference is not None and model.inference.transport == "process":
        found.append(diagnostic("W-INF-001", "inference.transport", _process_grant(model, plan, env)))
    return found


def resolved_native_findings(model: CapsuleManifest, env: Mapping[str, str], native: Sequence[int]) -> list[Diagnostic]:
    """What staging adds once it knows which artifacts resolved to native tools (a bundled or
    registry tool whose own manifest says `implementation: native`, named as a plain tool): the
    containment findings those subprocesses bring that the manifest alone did not."""
    declared = [i for i, a in enumerate(model.artifacts) if a.runtime == "native"]
    if sorted(native) == declared:
        return []
    seen = {(d.code, d.message) for d in check_containment(model, env)}
    return [d for d in check_containment(model, env, native) if (d.code, d.message) not in seen]


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

