"""`registry:` configuration as upstream reads it: `~/.murmur/config.yaml`, then
`<cwd>/.murmur/config.yaml`, and the registry mode from `--registry` or the cwd's `murmur.yaml`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from murmurd.manifest.reading import UnreadableFile, YamlRefused, load_yaml, read_text_file
from murmurd.registry.errors import RegistryError
from murmurd.registry.stores import home_dir

CONFIG = Path(".murmur") / "config.yaml"
DEFAULT_REMOTE = "http://localhost:7800"
OFFICIAL = {"name": "official", "type": "github", "repo": "murmur-nexus/default-artifacts"}


@dataclass(frozen=True)
class SourceConfig:
    name: str
    type: str
    repo: str
    token: str | None = None
    url: str | None = None


@dataclass
class RegistryConfig:
    default: str | None = None
    sources: list[SourceConfig] = field(default_factory=list)
    from_file: bool = False  # False: upstream's built-in default (no config file exists)

    def chain(self) -> list[SourceConfig]:
        """`sources` in order, the one named by `default` moved to the front."""
        first = [s for s in self.sources if s.name == self.default]
        return first + [s for s in self.sources if s.name != self.default]


def _read(path: Path) -> dict:
    try:
        raw = load_yaml(read_text_file(path))
    except FileNotFoundError:
        return {}
    except (UnreadableFile, OSError, yaml.YAMLError, YamlRefused) as exc:
        raise RegistryError("E-IO-003", f"cannot read {path}: {exc}") from None
    registry = raw.get("registry") if isinstance(raw, dict) else None
    return registry if isinstance(registry, dict) else {}


def _sources(raw: dict, where: str) -> list[SourceConfig]:
    found = []
    for entry in raw.get("sources") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise RegistryError("E-IO-003", f"registry.sources entry without a name in {where}")
        kind = entry.get("type", "github")
        if kind != "github":
            raise RegistryError("E-IO-003", f"unsupported source type '{kind}' in {where} (expected github)")
        if not isinstance(entry.get("repo"), str) or "/" not in entry["repo"]:
            raise RegistryError("E-IO-003", f"missing `repo` for github source in {where}")
        token = entry.get("token")
        found.append(SourceConfig(entry["name"], kind, entry["repo"], token if isinstance(token, str) else None,
                                  entry.get("url") if isinstance(entry.get("url"), str) else None))
    return found


def load_config(cwd: Path) -> RegistryConfig:
    """Global file as the base, the project file merged over it (sources union by name)."""
    global_path = home_dir() / CONFIG
    project_path = cwd / CONFIG
    if not global_path.is_file() and not project_path.is_file():
        return RegistryConfig("official", [SourceConfig(**OFFICIAL)], from_file=False)
    base = _read(global_path)
    config = RegistryConfig(base.get("default") if isinstance(base.get("default"), str) else None,
                            _sources(base, "~/.murmur/config.yaml"), from_file=True)
    project = _read(project_path)
    if isinstance(project.get("default"), str) and project["default"]:
        config.default = project["default"]
    for source in _sources(project, str(project_path)):
        names = [s.name for s in config.sources]
        if source.name in names:
            config.sources[names.index(source.name)] = source
        else:
            config.sources.append(source)
    return config


@dataclass(frozen=True)
class RegistryMode:
    remote_url: str | None  # None: local mode (the global store)

    @property
    def local(self) -> bool:
        return self.remote_url is None


def registry_mode(flag: str | None, cwd: Path) -> RegistryMode:
    """`--registry`, else `registry.remote_url`, else `registry.default` in `<cwd>/murmur.yaml`, else local."""
    if flag:
        return RegistryMode(None if flag.lower() == "local" else flag.rstrip("/"))
    manifest = cwd / "murmur.yaml"
    raw: object = {}
    if manifest.is_file():
        try:
            raw = load_yaml(read_text_file(manifest))
        except (UnreadableFile, OSError, yaml.YAMLError, YamlRefused):
            raw = {}
    registry = raw.get("registry") if isinstance(raw, dict) else None
    if isinstance(registry, dict):
        if isinstance(registry.get("remote_url"), str) and registry["remote_url"]:
            return RegistryMode(registry["remote_url"].rstrip("/"))
        default = registry.get("default")
        if default is not None:
            if default == "local":
                return RegistryMode(None)
            if default == "remote":
                return RegistryMode(DEFAULT_REMOTE)
            raise RegistryError("E-IO-003", f"invalid registry.default '{default}' (expected local|remote)")
    return RegistryMode(None)


def nexus_key(env: Mapping[str, str] = os.environ) -> str:
    key = env.get("NEXUS_API_KEY", "")
    if not key:
        raise RegistryError("E-IO-003", "NEXUS_API_KEY is required for remote registry mode. Set it or use local mode.")
    return key
