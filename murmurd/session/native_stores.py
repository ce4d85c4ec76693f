"""Read access to murmurd's artifact stores for a bundled native tool that declares it.

Upstream's murmur-tool-registry-search declares `filesystem.allow: [~/.murmur/artifacts]` and
reads the store's `*.meta.json` files directly. Under murmurd a native tool runs contained
(synthetic `HOME`, and under `scoped` no reads outside the workdir and its closure), so the
declaration is honoured here instead: a tool **bundled with murmurd** (its own, trusted code,
never a registry or local artifact, which could otherwise grant itself the stores) that declares
it gets the stores staging resolves through (the project store, then the global one) as
read-and-list runtime grants, and their paths in `MURMUR_ARTIFACT_STORES` (`os.pathsep`-joined).
Only stores that exist are named.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from murmurd.registry.errors import RegistryError
from murmurd.registry.stores import ARTIFACTS, global_root
from murmurd.session.shell import ShellInvocation, ShellPolicy

STORES_ENV = "MURMUR_ARTIFACT_STORES"
STORE_DECLARATION = "~/.murmur/artifacts"


def declares_stores(artifact: Any) -> bool:
    """A bundled artifact whose own manifest declares `filesystem.allow: [~/.murmur/artifacts]`."""
    resolved = artifact.resolved
    if not str(resolved.origin).startswith("bundled:"):
        return False
    capabilities = (resolved.manifest.model_extra or {}).get("capabilities") or {}
    filesystem = capabilities.get("filesystem") if isinstance(capabilities, dict) else None
    allow = filesystem.get("allow") if isinstance(filesystem, dict) else None
    return isinstance(allow, list) and STORE_DECLARATION in allow


def store_roots(staged: Any) -> list[Path]:
    """The stores staging searches, in its order: the registry's own list when it has one."""
    stores = getattr(staged.registry, "stores", None)
    if stores:
        roots = [Path(s.root) for s in stores]
    else:
        roots = [Path(staged.manifest_dir) / ARTIFACTS]
        try:
            roots.append(global_root())
        except RegistryError:
            pass
    return [r for r in roots if r.is_dir() and not r.is_symlink()]


def with_stores(staged: Any, name: str, policy: ShellPolicy,
                invocation: ShellInvocation) -> tuple[ShellPolicy, ShellInvocation]:
    """The call with the stores granted, when the tool declares them; unchanged otherwise."""
    if not declares_stores(staged.artifacts[name]):
        return policy, invocation
    roots = [os.path.realpath(r) for r in store_roots(staged)]
    invocation = dataclasses.replace(invocation, env={**invocation.env, STORES_ENV: os.pathsep.join(roots)})
    plan = policy.containment
    if plan is None or not roots:
        return policy, invocation
    grants = tuple((root, True) for root in roots if (root, True) not in plan.runtime)
    return dataclasses.replace(policy, containment=dataclasses.replace(plan, runtime=(*plan.runtime, *grants))), invocation
