"""An artifact's own `murmur.yaml`: identity, runtime, and (for hooks) its contract."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from murmurd.manifest.reading import UnreadableFile, YamlRefused, load_yaml, read_text_file

# `native` is upstream's older spelling of `runtime: tool` + `implementation: native` (python-native guide).
ArtifactRuntime = Literal["tool", "wasm", "native", "driver", "hook", "skill", "capsule"]


class ArtifactManifestError(ValueError):
    """An artifact manifest that cannot be read or does not validate."""


class ArtifactManifest(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    runtime: ArtifactRuntime = "tool"
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    # The WIT world a Python artifact compiles against, when not the runtime's default
    # (for example `capsule-host` for a capsule using the whole runtime-host surface).
    world: str | None = None
    # A WIT directory of the artifact's own (relative to the artifact, inside it) to compile
    # against instead of the bundled WIT; `world` then names a world defined there.
    wit: str | None = None
    # More directories of Python modules for `murmurd build` (relative to the artifact, may be a
    # sibling): how murmurd's bundled drivers share one driver kit without copying it.
    python_path: list[str] = Field(default_factory=list)
    input_schema: dict | None = None
    output_schema: dict | None = None
    # Hook contract (`runtime: hook` only; see `murmurd.manifest.hooks`). Kept as plain strings so
    # an unknown value loads and is then reported, with every other finding, by
    # `hooks.check_hook_contract` rather than failing the whole manifest here.
    binding: str | None = None  # the one handler this hook binds to; None = every event
    execution_mode: str = "blocking"  # blocking | async
    commit_policy: str = "none"  # the hook-output arm it expects committed

    @property
    def is_native(self) -> bool:
        """A native tool: a host executable reading one JSON request on stdin (upstream's
        `implementation: native`, or the older `runtime: native`)."""
        if self.runtime == "native":
            return True
        return self.runtime in ("tool", "wasm") and (self.model_extra or {}).get("implementation") == "native"

    @property
    def role(self) -> str:
        """tool | driver | hook | skill | capsule: `wasm` and `native` are tools."""
        return "tool" if self.runtime in ("wasm", "native") else self.runtime


def load_artifact_manifest(path: Path) -> ArtifactManifest:
    """Read and validate `path` (a `murmur.yaml`), naming the file in every error."""
    try:
        raw = load_yaml(read_text_file(path))
    except UnreadableFile as exc:
        raise ArtifactManifestError(f"{path}: cannot read: {exc.reason}") from None
    except OSError as exc:
        raise ArtifactManifestError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ArtifactManifestError(f"{path}: not valid YAML: {exc}") from exc
    except YamlRefused as exc:
        raise ArtifactManifestError(f"{path}: refused: {exc}") from None
    if not isinstance(raw, dict):
        raise ArtifactManifestError(f"{path}: expected a mapping at the top level")
    try:
        return ArtifactManifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ArtifactManifestError(f"{path}: {problems}") from exc
