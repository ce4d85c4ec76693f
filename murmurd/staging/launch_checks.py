"""What `murmurd validate` adds to the manifest's own rules: the checks that need to know what
staging will resolve, each a launch that would certainly fail.

- `E-REG-001`: a named artifact (no `source`) that neither the file registry nor murmurd's
  bundled set holds (nor the `.mur.zip` stores, nor, for a declared version, a configured
  `registry.sources` entry); the closest bundled or registry names are suggested.
- `E-INF-013`: a bundled HTTP driver whose `inference.endpoint` origin is not in
  `capabilities.network.allow` (the driver's first request would be refused).
- `E-INF-014`: no `inference` block and no `capsule.wasm`: nothing would run a task.
- `E-INF-015`: a bundled HTTP driver with no `inference.model` (it has no default model).
- the `W-SEC` warnings (and floor refusals) a bundled native tool brings: it runs as a subprocess
  under the shell containment, so a capsule with no `shell.allow` still hears what is not enforced.

A driver of the capsule's own (a `source`, or a registry artifact) may not call the endpoint at
all (the scripted driver never does), so the last two hold only for the bundled HTTP drivers.
Reads local files only: the registry directory and the bundled listing, never the network.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from murmurd.manifest.capsule import ArtifactRef, CapsuleManifest
from murmurd.manifest.checks.containment import resolved_native_findings
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.registry.config import load_config
from murmurd.registry.errors import RegistryError
from murmurd.registry.stores import ARTIFACTS, Store, global_root
from murmurd.staging.artifacts import ResolveError
from murmurd.staging.bundled import bundled_artifacts
from murmurd.staging.grants import network_allows
from murmurd.staging.registry import FileRegistry, default_registry_root

CAPSULE_COMPONENT = "capsule.wasm"
HTTP_DRIVERS = ("murmur-driver-anthropic", "murmur-driver-openai", "murmur-driver-deepseek")


def closest_names(name: str, known: list[str], limit: int = 3) -> list[str]:
    """The known names `name` most resembles (a misspelling, a missing prefix), best first."""
    return difflib.get_close_matches(name, known, n=limit, cutoff=0.6)


def did_you_mean(name: str, known: list[str]) -> str:
    """`; did you mean 'a' or 'b'?`, or nothing when no known name is close."""
    close = closest_names(name, known)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def launch_checks(manifest: CapsuleManifest, manifest_dir: Path, registry: FileRegistry | None = None,
                  env: Mapping[str, str] | None = None) -> list[Diagnostic]:
    """Every launch-time certainty of a manifest that passed its own validation; with `env`, the
    containment findings of the bundled native tools it names (they run as subprocesses)."""
    registry = registry or FileRegistry(default_registry_root())
    listed = bundled_artifacts()
    bundled = {a.manifest.name: a.manifest.runtime for a in listed}
    found = _named_artifacts(manifest, Path(manifest_dir), registry, bundled)
    found += _inference(manifest, Path(manifest_dir))
    if env is not None:
        natives = {a.manifest.name for a in listed if a.manifest.is_native}
        named = [i for i, ref in enumerate(manifest.artifacts)
                 if ref.runtime == "native" or (ref.source is None and ref.name in natives)]
        found += resolved_native_findings(manifest, env, named)
    return found


def _named_artifacts(manifest: CapsuleManifest, manifest_dir: Path, registry: FileRegistry,
                     bundled: dict[str, str]) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    stores = _stores(manifest_dir)
    sources = _has_sources(manifest_dir)
    for i, ref in enumerate(manifest.artifacts):
        if ref.source is not None or ref.name in bundled or _in_registry(registry, ref.name):
            continue
        if any(_held(store, ref.name) for store in stores):
            continue
        if sources and ref.version:  # staging installs a declared version from the sources: never fetched here
            continue
        rule = (f"artifact {ref.name!r} has no source, is not in the registry ({registry.root}) and "
                f"murmurd bundles no artifact of that name (see `murmurd list`){did_you_mean(ref.name, sorted(bundled))}")
        found.append(diagnostic("E-REG-001", f"artifacts[{i}].name", rule, ref.name))
    return found


def _stores(manifest_dir: Path) -> list[Store]:
    """The project and global `.mur.zip` stores staging searches first (murmurd.registry)."""
    stores = [Store(manifest_dir / ARTIFACTS, "project")]
    try:
        stores.append(Store(global_root(), "global"))
    except RegistryError:
        pass  # no home directory: the project store only
    return stores


def _held(store: Store, name: str) -> bool:
    try:
        return bool(store.versions(name))
    except (OSError, RegistryError):
        return True  # an unreadable store is staging's to report


def _has_sources(manifest_dir: Path) -> bool:
    """Whether a configuration file's `registry.sources` names a source staging may install from
    (with no file, upstream's default source is used by `install` only, never by a launch)."""
    try:
        config = load_config(manifest_dir)
        return config.from_file and bool(config.sources)
    except (OSError, RegistryError):
        return True


def _in_registry(registry: FileRegistry, name: str) -> bool:
    """Whether the registry holds any version of `name`; an unreadable index is staging's to
    report (its own error names the file), so it counts as holding it here."""
    try:
        return bool(registry.versions(name))
    except (OSError, ResolveError):
        return True


def _bundled_http_driver(manifest: CapsuleManifest) -> ArtifactRef | None:
    inference = manifest.inference
    if inference is None or inference.driver is None:
        return None
    ref = manifest.artifact(inference.driver.artifact)
    if ref is None or ref.source is not None or ref.name not in HTTP_DRIVERS:
        return None
    return ref


def _inference(manifest: CapsuleManifest, manifest_dir: Path) -> list[Diagnostic]:
    inference = manifest.inference
    if inference is None:
        if (manifest_dir / CAPSULE_COMPONENT).is_file():
            return []  # a script capsule: capsule.wasm runs itself
        rule = (f"no inference block and no {CAPSULE_COMPONENT} beside the manifest: nothing would run a task; "
                "add an inference block naming a driver (`murmurd init` writes one)")
        return [diagnostic("E-INF-014", "inference", rule, rendered="absent")]
    driver = _bundled_http_driver(manifest)
    if driver is None:
        return []
    found: list[Diagnostic] = []
    endpoint = inference.endpoint
    allow = list(manifest.capabilities.network.allow)
    if endpoint and not network_allows(endpoint, allow):
        rule = (f"the origin of inference.endpoint is not in capabilities.network.allow {allow}: "
                f"{driver.name}'s first request would be refused; add it to network.allow")
        found.append(diagnostic("E-INF-013", "inference.endpoint", rule, endpoint))
    if not inference.model:
        rule = f"{driver.name} has no default model; set inference.model (e.g. the provider's model id)"
        found.append(diagnostic("E-INF-015", "inference.model", rule, rendered="absent"))
    return found
