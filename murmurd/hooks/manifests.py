"""`write-manifests` (committed at `on-stage`): which `tool-manifest`s may be written, checked first.

A stage hook describes the capsule's shell binaries to the model: each `tool-manifest` it returns
replaces the synthetic `tools/<binary>/murmur.yaml` staging wrote for an allowlisted binary. It
only describes; it never grants. So a manifest is refused (and the synthetic one kept) unless:

- `binary-name` is one of `capabilities.shell.allow` (never another artifact's directory);
- `content` is at most 64 KiB of YAML holding a mapping;
- `name`, when given, is the binary's name, and `runtime`, when given, is `shell`, or `tool` with
  `implementation: native` (upstream's spelling of a host binary, what murmur-hook-shell-desc writes);
- `description`, when given, is a string (control characters are stripped, length capped).

The input schema stays the runtime's (`{"command": ...}`): the shell runner reads nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from murmurd.manifest.reading import YamlRefused, load_yaml

MAX_MANIFEST_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 2000
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class ShellManifest:
    """A checked manifest for one allowlisted binary."""

    binary: str
    description: str | None
    version: str | None


class ManifestRefused(ValueError):
    pass


def _describes_a_binary(raw: dict) -> bool:
    runtime = raw.get("runtime", "shell")
    return runtime == "shell" or (runtime == "tool" and raw.get("implementation") == "native")


def check_tool_manifest(binary_name: str, content: str, shell_allow: list[str]) -> ShellManifest:
    """The manifest to write, or `ManifestRefused` naming the rule it breaks."""
    if binary_name not in shell_allow:
        raise ManifestRefused(f"binary {binary_name!r} is not in capabilities.shell.allow ({sorted(shell_allow)})")
    if len(content.encode()) > MAX_MANIFEST_BYTES:
        raise ManifestRefused(f"the manifest for {binary_name!r} is over {MAX_MANIFEST_BYTES} bytes")
    try:
        raw = load_yaml(content)
    except (yaml.YAMLError, YamlRefused) as exc:
        raise ManifestRefused(f"the manifest for {binary_name!r} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ManifestRefused(f"the manifest for {binary_name!r} is not a mapping")
    if raw.get("name", binary_name) != binary_name:
        raise ManifestRefused(f"the manifest for {binary_name!r} names {raw.get('name')!r}")
    if not _describes_a_binary(raw):
        raise ManifestRefused(f"the manifest for {binary_name!r} says runtime {raw.get('runtime')!r} "
                              f"(implementation {raw.get('implementation')!r}), not 'shell' "
                              "or 'tool' with implementation 'native'")
    description, version = raw.get("description"), raw.get("version")
    if description is not None and not isinstance(description, str):
        raise ManifestRefused(f"the manifest for {binary_name!r}: description must be a string")
    if version is not None and not isinstance(version, str):
        raise ManifestRefused(f"the manifest for {binary_name!r}: version must be a string")
    if description is not None:
        description = _CONTROL.sub("", description)[:MAX_DESCRIPTION_CHARS]
    return ShellManifest(binary_name, description, version)
