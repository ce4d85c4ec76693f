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

from murmurd.staging.stage import StagedCapsule
from murmurd.staging.template import FreshWorkdir, template_for
from murmurd.workdir import Workdir, new_session_id


def session_workdir(staged: StagedCapsule, session_id: str) -> Workdir:
    """Beside the staged workdir: `<parent>/ses_<id>` (where `serve` keeps its own; `serve` has
    no `--workdir`, so its bookkeeping is the root)."""
    return Workdir(staged.workdir.root.parent / session_id)


def open_session_staging(staged: StagedCapsule) -> StagedCapsule:
    """A copy of `staged` with a new session id and a fresh workdir laid out for it from the
    capsule's session template (rendered once, `murmurd.staging.template`; blocking I/O: call it
    off the event loop). The copy's `fresh` holds the new workdir's hold and open trace for the
    `Session` made over it. Raises OSError when the workdir cannot be created."""
    template = template_for(staged)
    session_id = new_session_id()
    layout = session_workdir(staged, session_id)
    return session_staging(staged, session_id, template.lay_down(layout.root, session_id))


def session_staging(staged: StagedCapsule, session_id: str, fresh: FreshWorkdir) -> StagedCapsule:
    """The copy of `staged` for the session `session_id` whose workdir `fresh` was just laid down
    (here, or by the file process, `session/file_process.py`)."""
    # a copy of its own: an artifact pulled at run time is this session's alone
    return replace(staged, session_id=session_id, workdir=Workdir(fresh.root), artifacts=dict(staged.artifacts),
                   history_home=staged.history_workdir, fresh=fresh)
