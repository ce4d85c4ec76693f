"""What every session of a staged capsule lays down alike, rendered once: the session template.

A context session's workdir holds the same directories and, but for one line of `MURMUR.md`,
the same bytes as every other session of the capsule: `tools/<name>/murmur.yaml` of each
artifact, each skill's payload, the shell binaries' manifests (a stage hook's descriptions
included), the grants' directories, and the inventory. Rendering them (PyYAML, the inventory's
sanitizing) for every new context is what made a context expensive (issue 29), so they are
rendered once per capsule into a `SessionTemplate` and laid down as bytes, the directories in one
pass (`workdir_fs.lay_down`). The template is kept on the `StagedCapsule` and rebuilt only when what
it was rendered from changed (an artifact pulled at run time, the capsule URL `serve` learns once
its port is bound).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from murmurd import workdir_fs
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.inventory import InventoryItem, SessionFacts, render_inventory
from murmurd.staging.session_hold import SessionHold
from murmurd.workdir import INVENTORY, MAX_SKILL_BYTES, STAGED_DIRS, TRACE, component, tool_file

if TYPE_CHECKING:
    from murmurd.manifest.capsule import CapsuleManifest
    from murmurd.staging.artifacts import ResolvedArtifact
    from murmurd.staging.grants import GrantSet


class InstalledView(Protocol):
    """An installed artifact as the template reads it (staging's `InstalledArtifact`)."""

    resolved: ResolvedArtifact

    @property
    def kind(self) -> str: ...


class StagedView(Protocol):
    """A staged capsule as the template reads it (staging's `StagedCapsule`, which keeps the
    template: this module never imports staging's procedure)."""

    manifest: CapsuleManifest
    artifacts: Mapping[str, InstalledView]
    grants: GrantSet
    capsule_url: str | None
    shell_descriptions: dict[str, str]
    session_template: Any

SHELL_TOOL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "description": "the command line (arguments, or a -c script)"}},
    "required": ["command"],
}
_SESSION_MARK = "\x00"  # where the session id goes in MURMUR.md (sanitized publisher text holds no NUL)


def artifact_manifest(artifact: Any) -> str:
    """`tools/<name>/murmur.yaml` of a resolved artifact: its own manifest."""
    return dump_yaml(artifact.manifest.model_dump(mode="json", exclude_none=True))


def shell_manifest(binary: str, description: str | None, version: str | None) -> str:
    """`tools/<binary>/murmur.yaml`: the synthetic manifest, or what a stage hook described."""
    return dump_yaml({
        "name": binary,
        "version": version or "native",
        "runtime": "shell",
        "description": description
        or f"Run the allowlisted binary `{binary}` (command: arguments, or a -c script for a shell).",
        "input_schema": SHELL_TOOL_SCHEMA,
    })


def inventory_text(staged: StagedView, session_id: str) -> str:
    """`MURMUR.md` of `staged` for the session `session_id` (pure)."""
    manifest = staged.manifest
    inference = manifest.inference
    hooks = [a for a in staged.artifacts.values() if a.kind == "hook"]
    max_tokens = manifest.context.max_tokens if manifest.context else None
    facts = SessionFacts(
        manifest.name, manifest.version, session_id, staged.capsule_url,
        model=inference.model if inference else None, context_max_tokens=max_tokens,
        compaction_configured=max_tokens is not None and any(
            a.resolved.manifest.binding in (None, "on-compaction") for a in hooks),
        system_prompt_artifact=inference.system_prompt_artifact if inference else None,
    )
    items = [
        InventoryItem(a.resolved.name, a.resolved.version, a.kind, a.resolved.manifest.description,
                      "native" if a.resolved.native else "wasm" if a.kind == "tool" else "")
        for a in staged.artifacts.values()
    ]
    shell = manifest.capabilities.shell
    return render_inventory(manifest.name, manifest.version, session_id, items,
                            list(shell.allow) if shell else [], facts)


def _read_payload(path: Path) -> bytes:
    """A skill's payload from its source or store (trusted, outside any workdir); staging already
    refused one over `MAX_SKILL_BYTES`."""
    with open(path, "rb") as source:
        data = source.read(MAX_SKILL_BYTES + 1)
    if len(data) > MAX_SKILL_BYTES:
        raise OSError(f"{path}: over {MAX_SKILL_BYTES} bytes")
    return data


class FreshWorkdir:
    """What laying down a session workdir leaves open for the `Session` that runs in it: the shared
    hold on its root (taken at once: `murmurd gc` never sees the new directory unheld) and its
    `trace.jsonl`, created empty and open for appending. So `Session(...)` neither opens the
    directory again for its flock nor walks to its trace. Each is taken once; whatever nobody
    took is released when this is closed or dropped."""

    def __init__(self, root: Path, hold: SessionHold | None, trace_fd: int,
                 written: tuple[dict[str, Any], ...] = ()) -> None:
        self.root = root  # the very `Path` of the `Workdir` laid down (a `Session` checks by identity)
        self._hold: SessionHold | None = hold
        self._trace_fd: int | None = trace_fd
        self.written = written  # the events already in the trace (the file process wrote them)

    def take_hold(self) -> SessionHold | None:
        hold, self._hold = self._hold, None
        return hold

    def take_trace(self) -> int | None:
        """The trace's descriptor (the caller owns it), or None once taken."""
        fd, self._trace_fd = self._trace_fd, None
        return fd

    def close(self) -> None:
        hold, fd = self.take_hold(), self.take_trace()
        if hold is not None:
            hold.release()
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


@dataclass(frozen=True)
class SessionTemplate:
    """The tree of a fresh session workdir (its names checked and split once) with the bytes of
    its files, and `MURMUR.md` split where the session id goes."""

    key: tuple[Any, ...]
    tree: workdir_fs.TreePlan  # its files: `contents`' names, then MURMUR.md; trace.jsonl appended
    contents: tuple[bytes, ...]
    inventory: tuple[bytes, bytes]

    def lay_down(self, root: Path, session_id: str) -> FreshWorkdir:
        """Create `root` (`<parent>/<session_id>`, which must not exist), everything in it and its
        empty `trace.jsonl`; the root comes back held, the trace open."""
        head, tail = self.inventory
        if root.name != component(session_id):
            raise ValueError(f"{root} is not the workdir of {session_id}")
        root_fd, trace_fd = workdir_fs.lay_down(root.parent, root.name, self.tree,
                                                (*self.contents, head + session_id.encode() + tail))
        assert trace_fd is not None  # planned with append
        return FreshWorkdir(root, SessionHold.of_descriptor(root_fd), trace_fd)


def template_key(staged: StagedView) -> tuple[Any, ...]:
    """What the template is rendered from, compared by identity where it is an object."""
    return (staged.capsule_url, tuple((name, id(a.resolved)) for name, a in staged.artifacts.items()),
            tuple(sorted(staged.shell_descriptions.items())), id(staged.manifest), id(staged.grants))


def _with_parents(rel: str, into: dict[str, None]) -> None:
    parts = workdir_fs.split_relative(rel)
    for depth in range(1, len(parts) + 1):
        into.setdefault("/".join(parts[:depth]))


def build_template(staged: StagedView) -> SessionTemplate:
    """Render everything a new session of `staged` shares (blocking: reads skill payloads)."""
    dirs: dict[str, None] = {}
    for sub in STAGED_DIRS:  # the template's root is the bookkeeping's: a served session has no --workdir
        _with_parents(sub, dirs)
    files: list[tuple[str, bytes]] = []
    for name, artifact in staged.artifacts.items():
        files += _artifact_files(name, artifact)
    shell = staged.manifest.capabilities.shell
    for binary in list(shell.allow) if shell else []:
        files.append((tool_file(binary, "murmur.yaml"),
                      shell_manifest(binary, staged.shell_descriptions.get(binary), None).encode()))
    grants = staged.grants  # workdir-relative: the same grants hold in every session
    for grant in [grants.capsule, *grants.components.values()]:
        if grant.filesystem is not None and not all(p in ("", ".") for p in grant.filesystem.split("/")):
            _with_parents(grant.filesystem, dirs)
    for rel, _ in files:
        _with_parents(rel.rsplit("/", 1)[0], dirs)
    head, mark, tail = inventory_text(staged, _SESSION_MARK).partition(_SESSION_MARK)
    assert mark and _SESSION_MARK not in tail, "MURMUR.md names the session exactly once"
    tree = workdir_fs.plan_tree(dirs, [*(rel for rel, _ in files), INVENTORY], append=TRACE)
    return SessionTemplate(template_key(staged), tree, tuple(data for _, data in files), (head.encode(), tail.encode()))


def _artifact_files(name: str, artifact: InstalledView) -> list[tuple[str, bytes]]:
    files = [(tool_file(name, "murmur.yaml"), artifact_manifest(artifact.resolved).encode())]
    if artifact.kind == "skill":  # its text, which the session reads from there
        files.append((tool_file(name, artifact.resolved.installed_name), _read_payload(artifact.resolved.payload)))
    return files


def template_for(staged: StagedView) -> SessionTemplate:
    """`staged`'s template: the one it holds while still true, else rendered now and kept."""
    template = staged.session_template
    if template is None or template.key != template_key(staged):
        template = build_template(staged)
        staged.session_template = template
    return template
