"""murmurd's bundled artifacts: Python artifact directories shipped as package data.

`murmurd/bundled/<name>/` holds `murmur.yaml`, `app.py` and a README (a native tool: its
modules and `__main__.py`, laid down by `bundled_native.py`). A name a capsule declares
with no source and that the registry does not hold resolves here. The component is built at
first use through the content-addressed build cache (one build per machine, a progress line
while it runs) into the cache, never into the package directory, which may be read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from murmurd import __version__
from murmurd.authoring.build import BuildError, Progress, build_artifact, build_key, python_path_for, world_for
from murmurd.manifest.artifact import ArtifactManifest, ArtifactManifestError, load_artifact_manifest
from murmurd.paths import cache_dir
from murmurd.staging.artifacts import ResolveError, ResolvedArtifact, find_skill_file, native_executable, sha256_file
from murmurd.staging.bundled_native import lay_down

BUNDLED_ROOT = Path(__file__).resolve().parent.parent / "bundled"


@dataclass(frozen=True)
class BundledArtifact:
    manifest: ArtifactManifest
    directory: Path

    @property
    def kind(self) -> str:
        return self.manifest.role


def _load(directory: Path) -> BundledArtifact:
    """One bundled directory. A broken manifest, or one naming another artifact, is a packaging bug."""
    try:
        manifest = load_artifact_manifest(directory / "murmur.yaml")
    except ArtifactManifestError as exc:
        raise ResolveError(f"bundled artifact {directory.name}: {exc}") from exc
    if manifest.name != directory.name:
        raise ResolveError(f"bundled artifact {directory.name}: its manifest names it {manifest.name!r}")
    return BundledArtifact(manifest, directory)


def _directories(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "murmur.yaml").is_file())


def bundled_artifacts(root: Path = BUNDLED_ROOT) -> list[BundledArtifact]:
    """Every bundled artifact, by name."""
    return [_load(directory) for directory in _directories(root)]


def find_bundled(name: str, root: Path = BUNDLED_ROOT) -> BundledArtifact | None:
    """The bundled artifact called `name`. The name is matched against the directory listing,
    never joined onto a path, so a declared name cannot reach outside `root`."""
    directory = next((d for d in _directories(root) if d.name == name), None)
    return _load(directory) if directory is not None else None


def bundled_output(artifact: BundledArtifact) -> Path:
    """Where the built component is kept: the cache, by name, version and build key. Keyed, the
    file never changes once written, so a daemon staging it cannot see another murmurd (other
    sources or componentize-py under the same version) replace it between hashing and copying."""
    manifest = artifact.manifest
    key = build_key(artifact.directory, *world_for(manifest, artifact.directory),
                    python_path_for(manifest, artifact.directory))
    return cache_dir() / "bundled" / manifest.name / manifest.version / f"{key[:32]}.wasm"


def _payload(artifact: BundledArtifact, progress: Progress | None) -> Path:
    """What runs: a native tool's `bin/<name>` and a skill's `skill.md` as shipped (nothing to
    build; both outside every workdir); a native tool shipped as a Python package (`__main__.py`)
    packed into one executable in the cache (bundled_native.py); else the component built into
    the cache."""
    manifest = artifact.manifest
    if manifest.is_native:
        if (artifact.directory / "__main__.py").is_file():
            return lay_down(manifest.name, manifest.version, artifact.directory)
        return native_executable(artifact.directory, manifest)
    if manifest.runtime == "skill":
        skill = find_skill_file(artifact.directory)
        if skill is None:
            raise ResolveError(f"bundled artifact {manifest.name}: no skill.md")
        return skill
    return build_artifact(artifact.directory, progress=progress, output=bundled_output(artifact)).output


def resolve_bundled(artifact: BundledArtifact, version: str | None,
                    progress: Progress | None = None) -> ResolvedArtifact:
    """Build (usually a cache hit) and describe `artifact`; a version other than the bundled one is refused."""
    manifest = artifact.manifest
    if version is not None and version != manifest.version:
        raise ResolveError(
            f"artifact {manifest.name}: version {version} asked for, but murmurd {__version__} bundles "
            f"{manifest.name} {manifest.version} (declare {manifest.version}, leave the version out, "
            f"or publish {version} to the registry)"
        )
    try:
        payload = _payload(artifact, progress)
    except (BuildError, OSError, ValueError) as exc:
        raise ResolveError(f"bundled artifact {manifest.name}: {exc}") from exc
    return ResolvedArtifact(manifest.name, manifest.version, artifact.kind, manifest, payload, sha256_file(payload),
                            False, f"bundled:murmurd {__version__}")
