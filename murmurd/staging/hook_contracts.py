"""What `validate` and staging say about each hook's own contract (issue 21, items 14-15).

A hook's `binding` / `execution_mode` / `commit_policy` live in the hook's *own* manifest, not
the capsule's, so `validate` reads it for every local hook (an artifact directory's
`murmur.yaml`, or the one beside a `.wasm` that `murmurd build` leaves) and reports what staging
would refuse (`E-HOOK-*`, `manifest.hooks.check_hook_contract`) without building anything. A
hook given as a bare `.wasm` with no manifest of its own is staged as "every event, blocking,
commit nothing": legal, but never what an author who wrote a policy meant, so both `validate` and
every launch say so (`W-HOOK-002`).
"""

from __future__ import annotations

from pathlib import Path

from murmurd.manifest.artifact import ArtifactManifestError, load_artifact_manifest
from murmurd.manifest.capsule import ArtifactRef, CapsuleManifest
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.manifest.hooks import check_hook_contract
from murmurd.staging.resolve import manifest_beside

BARE_HOOK = "W-HOOK-002"


def bare_hook_warning(index: int, ref: ArtifactRef) -> Diagnostic:
    stem = Path(ref.source or "").stem or ref.name
    rule = (f"hook {ref.name!r} is a bare .wasm with no murmur.yaml of its own beside it, so it is staged with "
            "no binding (every event), execution_mode 'blocking' and commit_policy 'none': it commits nothing "
            f"and denies nothing. Put its manifest (name: {stem}, runtime: hook, binding, commit_policy) in a "
            "murmur.yaml beside the .wasm, or give its artifact directory as the source")
    return diagnostic(BARE_HOOK, f"artifacts[{index}].source", rule, ref.source)


INERT_ON_NATIVE = "W-SEC-008"


def native_block_warnings(index: int, ref: ArtifactRef) -> list[Diagnostic]:
    """Blocks of a native tool's `artifacts[]` entry that do nothing (upstream's W-SEC-008): it runs
    under the capsule's shell containment and environment rules, not a WASM grant. Only
    `limits.deadline_seconds` (the call's deadline) applies."""
    caps = ref.capabilities
    if caps is None:
        return []
    inert = [block for block in ("network", "filesystem", "shell", "env") if getattr(caps, block) is not None]
    if caps.limits is not None:
        inert += [f"limits.{key}" for key in ("memory_bytes", "table_elements", "instances")
                  if getattr(caps.limits, key) is not None]
    return [diagnostic(INERT_ON_NATIVE, f"artifacts[{index}].capabilities.{block}",
                       f"{ref.name!r} is a native tool: it runs under the capsule's shell containment "
                       "(capabilities.shell, capabilities.resources), so this block is inert")
            for block in inert]


def local_hook_findings(manifest: CapsuleManifest, capsule_dir: Path) -> list[Diagnostic]:
    """Every local hook's contract findings and bare-`.wasm` warnings, as staging would find them.
    A source that is missing or whose manifest does not load is left to staging, which names it."""
    found: list[Diagnostic] = []
    for index, ref in enumerate(manifest.artifacts):
        if ref.kind != "hook" or not ref.is_local or ref.source is None:
            continue
        path = (capsule_dir / ref.source).resolve()
        if path.is_file() and path.suffix == ".wasm":
            own = manifest_beside(path, "hook")
            if own is None:
                found.append(bare_hook_warning(index, ref))
                continue
        elif path.is_dir() and (path / "murmur.yaml").is_file():
            try:
                own = load_artifact_manifest(path / "murmur.yaml")
            except ArtifactManifestError:
                continue
        else:
            continue
        found += check_hook_contract(own, path_prefix=f"artifacts[{index}]")
    return found
