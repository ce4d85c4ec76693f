"""Another session workdir for a capsule already staged: what a context's own session runs in.

Staging validates, resolves and compiles once; a context session reuses all of it (the same
`LoadedComponent`s, grants and stage-hook descriptions) and only lays out a fresh `ses_` workdir:
`tools/<name>/murmur.yaml`, skill payloads, shell manifests, `MURMUR.md`, the grants' directories.
A compiled component's `.wasm` is not copied: nothing reads it from a workdir (the compiled
component is shared in memory), and at ~18 MB per componentize-py component a copy per context
would cost more than the session itself.
"""

from __future__ import annotations

from dataclasses import replace

from murmurd import workdir_fs
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.stage import InstalledArtifact, StagedCapsule, _write_shell_manifest
from murmurd.staging.workdir import Workdir, new_session_id, tool_file


def session_workdir(staged: StagedCapsule, session_id: str) -> Workdir:
    """Beside the staged workdir: `<parent>/ses_<id>` (where `serve` keeps its own; `serve` has
    no `--workdir`, so its bookkeeping is the root)."""
    return Workdir(staged.workdir.root.parent / session_id)


def open_session_staging(staged: StagedCapsule) -> StagedCapsule:
    """A copy of `staged` with a new session id and a fresh workdir laid out for it (blocking I/O:
    call it off the event loop). Raises OSError when the workdir cannot be created."""
    session_id = new_session_id()
    layout = session_workdir(staged, session_id)
    layout.create()
    for name, artifact in staged.artifacts.items():
        _install(layout, name, artifact)
    shell = staged.manifest.capabilities.shell
    for binary in list(shell.allow) if shell else []:
        _write_shell_manifest(layout, binary, staged.shell_descriptions.get(binary), None)
    grants = staged.grants  # workdir-relative: the same grants hold in every session
    for grant in [grants.capsule, *grants.components.values()]:
        if grant.filesystem is not None and layout.path(grant.filesystem) != layout.root:
            workdir_fs.make_dirs(layout.root, grant.filesystem)
    installed = {name: replace(a, directory=layout.tool_dir(name)) for name, a in staged.artifacts.items()}
    opened = replace(staged, session_id=session_id, workdir=layout, artifacts=installed,
                     history_home=staged.history_workdir)
    opened.write_inventory()
    return opened


def _install(layout: Workdir, name: str, artifact: InstalledArtifact) -> None:
    """`tools/<name>/murmur.yaml`, and the payload itself for a skill (text the session reads)."""
    own = artifact.resolved.manifest.model_dump(mode="json", exclude_none=True)
    workdir_fs.write_text(layout.root, layout.book(tool_file(name, "murmur.yaml")), dump_yaml(own))
    if artifact.component is None:
        workdir_fs.copy_into(artifact.resolved.payload, layout.root,
                             layout.book(tool_file(name, artifact.resolved.installed_name)))
