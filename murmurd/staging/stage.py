"""Stage a capsule: validate, resolve, verify, compile, then lay out the session workdir.

Everything that can refuse a launch (manifest errors, hook contracts, lock pins, a component
that does not compile or fit its role) runs before the first byte is written to the workdir
or to `murmur.lock`.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from murmurd import workdir_fs
from murmurd.contract import Role
from murmurd.hooks.faults import HookLog
from murmurd.hooks.loading import HookArtifact, load_hooks
from murmurd.hooks.stage import run_on_stage
from murmurd.host import CallGrant, ComponentHost, HostError, Limits, LoadedComponent
from murmurd.manifest.capsule import ArtifactRef, CapsuleManifest
from murmurd.manifest.diagnostics import Report
from murmurd.manifest.hooks import check_hook_contract
from murmurd.manifest.validate import load_capsule
from murmurd.manifest.preflight import DEFAULT_COMMAND, find_on_path, preflight_error
from murmurd.staging.artifacts import ResolveError, ResolvedArtifact
from murmurd.staging.hook_contracts import bare_hook_warning, native_block_warnings
from murmurd.manifest.checks.containment import resolved_native_findings
from murmurd.staging.identity import identity_env
from murmurd.staging.grants import Grant, GrantSet, compute_grants, hook_env
from murmurd.staging.template import (
    SHELL_TOOL_SCHEMA,
    artifact_manifest,
    build_template,
    inventory_text,
    shell_manifest,
)
from murmurd.staging.lock import LockError, LockFile, load_lock, save_lock
from murmurd.staging.registry import Registry
from murmurd.staging.resolve import resolve_artifact
from murmurd.workdir import (
    INVENTORY,
    MAX_SKILL_BYTES,
    Workdir,
    default_workdir,
    log_file,
    new_session_id,
    operator_workdir,
    tool_file,
)

Progress = Callable[[str], None]
CAPSULE_COMPONENT = "capsule.wasm"
KIND_ROLES = {"tool": Role.TOOL, "driver": Role.DRIVER, "hook": Role.HOOK}
_T = TypeVar("_T")


class StagingError(RuntimeError):
    """The capsule cannot launch. `problems` lists every reason found."""

    def __init__(self, problems: list[str], report: Report | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.report = report


@dataclass
class InstalledArtifact:
    ref: ArtifactRef
    resolved: ResolvedArtifact  # installed in `tools/<name>/` of each session
    component: LoadedComponent | None  # None for skills

    @property
    def kind(self) -> str:
        return self.resolved.kind


@dataclass
class StagedCapsule:
    manifest: CapsuleManifest
    manifest_dir: Path
    session_id: str
    workdir: Workdir
    artifacts: dict[str, InstalledArtifact]
    grants: GrantSet
    capsule_component: LoadedComponent | None
    registry: Registry
    report: Report
    host_env: Mapping[str, str] = field(default_factory=dict)
    # Descriptions an on-stage hook wrote for shell binaries (`write-manifests`), by binary.
    shell_descriptions: dict[str, str] = field(default_factory=dict)
    # Where threaded contexts' durable histories live when it is not this workdir: a context
    # session's are kept by the daemon's own session, so they outlive the context session.
    history_home: Workdir | None = None
    # `localhost:<port>` once `serve` has bound its port (MURMUR_CAPSULE_URL); None under `run`.
    capsule_url: str | None = None
    # What every new session lays down, rendered once (murmurd.staging.template).
    session_template: Any = field(default=None, repr=False, compare=False)
    # A workdir just laid down for this copy: its hold and open trace, which the `Session` over it
    # takes (murmurd.staging.template.FreshWorkdir); None for a workdir staged the slow way.
    fresh: Any = field(default=None, repr=False, compare=False)
    # What every session of this capsule computes alike (`once`); a session's copy shares it.
    shared: dict[str, tuple[tuple[Any, ...], Any]] = field(default_factory=dict, repr=False, compare=False)

    def once(self, name: str, compute: Callable[[], _T]) -> _T:
        """`compute()`, computed once for this capsule and every session's copy of it while its
        manifest, grants and host environment are the same objects (issue 29: each context's
        session computed them again). The value is shared: read it, never change it."""
        sources = (self.manifest, self.grants, self.host_env)  # held: compared by identity, never reused
        held = self.shared.get(name)
        if held is not None and all(a is b for a, b in zip(held[0], sources)):
            return held[1]  # type: ignore[no-any-return]
        value = compute()
        self.shared[name] = (sources, value)
        return value

    @property
    def identity(self) -> dict[str, str]:
        """The runtime-owned MURMUR_* variables every driver, tool and child process sees."""
        return identity_env(self.manifest, self.session_id, self.capsule_url)

    @property
    def history_workdir(self) -> Workdir:
        """The workdir holding `contexts/<id>/history.json`."""
        return self.history_home or self.workdir

    def write_inventory(self) -> None:
        """(Re)write `MURMUR.md` for this session: after staging, and under serve once the port
        (the capsule URL) is known."""
        text = inventory_text(self, self.session_id)
        workdir_fs.write_text(self.workdir.root, self.workdir.book(INVENTORY), text)

    def read_installed(self, name: str) -> str:
        """The payload text of installed artifact `name` (a skill); a symlink on its way is refused."""
        artifact = self.artifacts[name]
        return workdir_fs.read_text(self.workdir.root, self.workdir.book(tool_file(name, artifact.resolved.installed_name)),
                                    max_bytes=MAX_SKILL_BYTES)

    def hook_artifacts(self) -> list[HookArtifact]:
        """The installed hooks, in manifest order, as the hook loader takes them (`load_hooks`)."""
        return [
            HookArtifact(name, installed.component, installed.resolved.manifest.binding,
                         installed.resolved.manifest.execution_mode, installed.resolved.manifest.commit_policy,
                         installed.ref.on_overflow)
            for name, installed in self.artifacts.items()
            if installed.kind == "hook" and installed.component is not None
        ]

    def grant_for(self, name: str | None) -> Grant:
        """The effective grant of a component (`None`: the capsule itself); undeclared → ceiling."""
        if name is None:
            return self.grants.capsule
        return self.grants.components.get(name, self.grants.capsule)

    def call_grant(self, name: str | None, *, extra_env: Mapping[str, str] | None = None, log_name: str | None = None) -> CallGrant:
        """The host-level grant for one call of component `name` (`None`: the capsule component)."""
        grant = self.grant_for(name)
        env = {key: self.host_env[key] for key in grant.env if key in self.host_env}
        kind = self.artifacts[name].kind if name is not None and name in self.artifacts else None
        if kind == "hook":
            env.update(hook_env(self.manifest.observability, self.host_env))
        env.update(extra_env or {})
        if kind != "hook":  # tools, drivers and the capsule component: the runtime's names win
            env.update(self.identity)
        limits = grant.limits
        return CallGrant(
            env=env,
            preopen=self.workdir.path(grant.filesystem) if grant.filesystem is not None else None,
            log_path=self.workdir.path(self.workdir.book(log_file(log_name))) if log_name else None,
            network=grant.network,  # wasi:http reaches exactly these origins
            limits=Limits(limits.memory_bytes, limits.table_elements, limits.instances, float(limits.deadline_seconds)),
            root=self.workdir.root,
        )


def _compile(host: ComponentHost, artifact: ResolvedArtifact, progress: Progress) -> LoadedComponent:
    return host.load(artifact.payload, name=artifact.name, expected=KIND_ROLES[artifact.kind], progress=progress)


def _oversized_skill(artifact: ResolvedArtifact) -> list[str]:
    """A skill the runtime could not read back (it reads at most `MAX_SKILL_BYTES`) is refused now,
    not at its first call."""
    size = artifact.payload.stat().st_size
    if size <= MAX_SKILL_BYTES:
        return []
    return [f"artifact {artifact.name}: {artifact.payload.name} is {size} bytes; a skill holds at most "
            f"{MAX_SKILL_BYTES} bytes"]


def install_artifact(workdir: Workdir, resolved: ResolvedArtifact) -> None:
    """Write an artifact's manifest under `tools/<name>/`, and its payload when it is a skill (text
    the session reads from there). A component's `.wasm` is not copied: it runs from the compile
    cache, shared by every session (as `staging.sessions` does for context sessions), and a copy
    per session (~18 MB for a componentize-py component) is what filled workdirs."""
    workdir_fs.write_text(workdir.root, workdir.book(tool_file(resolved.name, "murmur.yaml")), artifact_manifest(resolved))
    if resolved.kind == "skill":
        workdir_fs.copy_into(resolved.payload, workdir.root,
                             workdir.book(tool_file(resolved.name, resolved.installed_name)))


def _write_shell_manifests(workdir: Workdir, binaries: list[str]) -> None:
    for binary in binaries:
        _write_shell_manifest(workdir, binary, None, None)


def _write_shell_manifest(workdir: Workdir, binary: str, description: str | None, version: str | None) -> None:
    """`tools/<binary>/murmur.yaml`: the synthetic manifest, or what a stage hook described."""
    workdir_fs.write_text(workdir.root, workdir.book(tool_file(binary, "murmur.yaml")),
                          shell_manifest(binary, description, version))


def _run_stage_hooks(staged: StagedCapsule, host: ComponentHost, shell_allow: list[str]) -> None:
    """`on-stage` (before any session): the manifests a hook commits replace the synthetic ones."""
    specs = load_hooks(staged)
    if not specs:
        return
    for manifest in run_on_stage(host, specs, shell_allow, HookLog(staged.workdir)):
        _write_shell_manifest(staged.workdir, manifest.binary, manifest.description, manifest.version)
        if manifest.description:
            staged.shell_descriptions[manifest.binary] = manifest.description


def _lay_out(
    layout: Workdir, manifest: CapsuleManifest, resolved: list[ResolvedArtifact],
    components: dict[str, LoadedComponent], shell_allow: list[str], env: Mapping[str, str],
) -> tuple[dict[str, InstalledArtifact], GrantSet]:
    """Create the workdir and install everything into it (every path through workdir_fs)."""
    layout.create()
    installed: dict[str, InstalledArtifact] = {}
    for ref, artifact in zip(manifest.artifacts, resolved):
        install_artifact(layout, artifact)
        installed[ref.name] = InstalledArtifact(ref, artifact, components.get(ref.name))
    _write_shell_manifests(layout, shell_allow)

    grants = compute_grants(manifest, env)
    for grant in [grants.capsule, *grants.components.values()]:
        if grant.filesystem is not None and layout.path(grant.filesystem) != layout.root:
            workdir_fs.make_dirs(layout.root, grant.filesystem)
    return installed, grants


def _log_warnings(layout: Workdir, report: Report) -> None:
    """The manifest's warnings in `logs/bootstrap.log`, beside what the operator saw on stderr."""
    if not report.warnings:
        return
    text = "".join(f"{w.to_text()}\n" for w in report.warnings)  # to_text() starts "warning W-..."
    try:
        workdir_fs.append_text(layout.root, layout.book(log_file("bootstrap.log")), text)
    except OSError:
        pass  # the warnings were already printed; a refused log costs only this copy


def process_preflight(manifest: CapsuleManifest, env: Mapping[str, str]) -> str | None:
    """`transport: process`: E-RUN-006 when `inference.command` is not on PATH (None: found, or http)."""
    inference = manifest.inference
    if inference is None or inference.transport != "process":
        return None
    command = inference.command or DEFAULT_COMMAND
    return None if find_on_path(command, env.get("PATH")) else preflight_error(command)


def stage_capsule(
    capsule_dir: Path,
    *,
    host: ComponentHost,
    workdir: Path | None = None,
    env: Mapping[str, str] = os.environ,
    registry: Registry | None = None,
    progress: Progress | None = None,
) -> StagedCapsule:
    """Validate, resolve, verify and compile everything, then create and fill the workdir."""
    capsule_dir = Path(capsule_dir).resolve()
    report_progress = progress or (lambda _m: None)
    manifest, report = load_capsule(capsule_dir, env)
    if manifest is None:
        raise StagingError([d.to_text() for d in report.errors], report)
    for warning in report.warnings:  # never silently dropped: every launch repeats them
        report_progress(warning.to_text())  # "warning W-...": one prefix
    preflight = process_preflight(manifest, env)
    if preflight is not None:  # upstream's pre-flight: before the lock, staging or any workdir
        raise StagingError([preflight], report)
    if registry is None:  # the stores, the directory registry, installs from the sources (murmurd.registry)
        from murmurd.registry.resolve import default_registry

        registry = default_registry(capsule_dir, env, report_progress)

    try:
        lock = load_lock(capsule_dir)
    except LockError as exc:
        raise StagingError([str(exc)], report) from exc
    resolved: list[ResolvedArtifact] = []
    problems: list[str] = []
    for ref in manifest.artifacts:
        try:
            resolved.append(resolve_artifact(ref, capsule_dir, registry, lock, report_progress))
        except (ResolveError, LockError) as exc:
            problems.append(str(exc))
    if problems:
        raise StagingError(problems, report)

    for index, artifact in enumerate(resolved):  # hook contracts: before anything is compiled
        if artifact.native:
            for warning in native_block_warnings(index, manifest.artifacts[index]):
                report.add(warning)
                report_progress(f"warning: {warning.to_text()}")
        if artifact.kind == "hook":
            problems += [f"{d.code}: {d.message}" for d in check_hook_contract(
                artifact.manifest, path_prefix=f"artifacts[{index}]") if d.severity == "error"]
            if artifact.bare:  # every launch says it: the hook commits nothing (issue 21, item 15)
                report.add(bare_hook_warning(index, manifest.artifacts[index]))
                report_progress(f"warning: {report.diagnostics[-1].to_text()}")
    native = [index for index, artifact in enumerate(resolved) if artifact.native]
    for finding in resolved_native_findings(manifest, env, native):  # native tools are subprocesses too
        if finding.severity == "error":
            problems.append(f"{finding.code}: {finding.message}")
        else:
            report.add(finding)
            report_progress(finding.to_text())
    if problems:
        raise StagingError(problems, report)

    components: dict[str, LoadedComponent] = {}
    for artifact in resolved:
        if artifact.kind == "skill":
            problems += _oversized_skill(artifact)
            continue
        if artifact.native:  # a host executable: nothing to compile (murmurd/session/native.py runs it)
            continue
        try:
            components[artifact.name] = _compile(host, artifact, report_progress)
        except HostError as exc:
            problems.append(str(exc))
    shell_allow = list(manifest.capabilities.shell.allow) if manifest.capabilities.shell else []
    problems += [
        f"capabilities.shell.allow: binary {binary!r} has the same name as artifact {binary!r}; "
        "tools/<name>/ can hold only one of them"
        for binary in shell_allow
        if manifest.artifact(binary) is not None
    ]
    capsule_component = None
    capsule_wasm = capsule_dir / CAPSULE_COMPONENT
    if capsule_wasm.is_file():
        try:
            capsule_component = host.load(capsule_wasm, name=manifest.name, expected=Role.CAPSULE,
                                          progress=report_progress)
        except HostError as exc:
            problems.append(str(exc))
    elif manifest.inference is None:
        problems.append(f"{capsule_dir}: no inference block and no {CAPSULE_COMPONENT}; nothing would run a task")
    if problems:
        raise StagingError(problems, report)

    # -- nothing above wrote anything; from here on the launch is accepted --------------------
    if lock is None and any(not a.local for a in resolved):
        lock = LockFile()
        for artifact in resolved:
            if not artifact.local:
                lock.upsert(artifact)
        save_lock(capsule_dir, lock)

    session_id = new_session_id()
    layout = operator_workdir(workdir, session_id) if workdir is not None else default_workdir(capsule_dir, session_id)
    try:
        installed, grants = _lay_out(layout, manifest, resolved, components, shell_allow, env)
    except OSError as exc:  # an existing --workdir holding a symlink (refused by workdir_fs), a full disk
        raise StagingError([f"cannot lay out the workdir {layout.root}: {exc}"], report) from None
    _log_warnings(layout, report)
    staged = StagedCapsule(
        manifest, capsule_dir, session_id, layout, installed, grants, capsule_component, registry, report, dict(env)
    )
    try:
        staged.write_inventory()
        _run_stage_hooks(staged, host, shell_allow)
        staged.session_template = build_template(staged)  # what every later session lays down
    except OSError as exc:
        raise StagingError([f"cannot write MURMUR.md or a stage hook's manifest: {exc}"], report) from None
    return staged
