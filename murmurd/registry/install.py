"""`murmurd install`: fetch an artifact (the registry first, then the source chain), verify it,
store it, pin it in `murmur.lock` — upstream `mur install`'s order, forms and codes."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from murmurd.registry.archive import Archive, open_archive, registry_runtime, role_of
from murmurd.registry.config import load_config, nexus_key, registry_mode
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.lock import LockFile, check_conflict, read_lock, save_lock, upsert
from murmurd.registry.sources.github import GitHubSource, resolve_token
from murmurd.registry.sources.nexus import NexusClient
from murmurd.registry.stores import Store, check_component, global_root, host_platform, meta_for
from murmurd.registry.versions import best, is_exact, is_reserved, satisfies

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Ref:
    kind: str  # file | github | name
    name: str = ""
    version: str | None = None
    path: Path | None = None
    repo: str = ""
    tag: str = ""


def parse_ref(text: str) -> Ref:
    """Upstream's reference forms: a local `.mur.zip`, `github:<owner>/<repo>@<tag>`, `name`, `name@version`."""
    if text.startswith(("./", "../", "/")) or ("/" in text and text.endswith(".mur.zip")) or text.endswith(".mur.zip"):
        return Ref("file", path=Path(text))
    prefix, colon, rest = text.partition(":")
    if colon and "@" not in prefix:
        if prefix != "github":
            raise RegistryError("E-IO-003", f"unsupported artifact source prefix '{prefix}'")
        repo, at, tag = rest.partition("@")
        if not at or not tag or repo.count("/") != 1 or not all(repo.split("/")):
            raise RegistryError("E-IO-003", f"invalid github artifact reference '{text}' (expected github:<owner>/<repo>@<tag>)")
        return Ref("github", repo=repo, tag=tag)
    if "@" not in text:
        return Ref("name", name=check_component("name", text))
    name, _, version = text.partition("@")
    if not name or not version or "@" in version:
        raise RegistryError("E-IO-003", "artifact reference must be in the format <name@version>")
    return Ref("name", name=check_component("name", name), version=version)


@dataclass(frozen=True)
class Fetched:
    archive: Archive
    origin: str
    from_registry: bool
    meta: dict

    @property
    def name(self) -> str:
        return self.archive.manifest.name

    @property
    def version(self) -> str:
        return self.archive.manifest.version


def own_meta(archive: Archive) -> dict:
    """The meta kept beside an installed archive, its description and tags included (what
    murmur-tool-registry-search matches a local query against)."""
    manifest = archive.manifest
    return meta_for(registry_runtime(manifest), role_of(manifest), manifest.name, manifest.version,
                    description=manifest.description or None, tags=list(manifest.tags))


def _checked(data: bytes, name: str, wanted: str | None, origin: str, env: Mapping[str, str]) -> Archive:
    try:
        archive = open_archive(data, env)
    except RegistryError as exc:
        raise RegistryError("E-IO-003", f"resolved bytes from {origin} are not a valid .mur.zip artifact: "
                                        f"{exc.message}") from None
    own = archive.manifest
    if own.name != name:
        raise RegistryError("E-IO-003", f"artifact {name}: downloaded zip from {origin} names itself '{own.name}'")
    if is_exact(wanted) and own.version != wanted:
        raise RegistryError("E-IO-003", f"artifact {name}@{wanted}: downloaded zip reports internal version "
                                        f"'{own.version}' (from {origin})")
    if not satisfies(wanted, own.version):
        raise RegistryError("E-IO-003", f"artifact {name}: {origin} resolved version {own.version}, "
                                        f"which does not meet '{wanted}'")
    return archive


class Fetcher:
    """Where bytes come from: the registry (global store, or Nexus in remote mode), then the
    configured source chain."""

    def __init__(self, cwd: Path, env: Mapping[str, str] = os.environ, registry_flag: str | None = None,
                 progress: Progress | None = None, *, skip_local_registry: bool = False,
                 default_source: bool = False) -> None:
        self.cwd = cwd
        self.env = env
        self.mode = registry_mode(registry_flag, cwd)
        self.config = load_config(cwd)
        self.progress = progress or (lambda _m: None)
        self.skip_local_registry = skip_local_registry  # staging has looked in the global store already
        # Upstream uses its built-in `official` source (no config file) for a bare name and
        # `github:` refs only; `install` with no ref and `name@version` need a config file.
        self.default_source = default_source
        self.platform = host_platform()

    # -- the registry ---------------------------------------------------------------------------

    def _from_registry(self, name: str, wanted: str | None) -> Fetched:
        if self.mode.local:
            store = Store(global_root(), "global")
            version = wanted if is_exact(wanted) else best(wanted, store.versions(name))
            if version is None:
                raise NotFound(f"artifact {name}@{wanted or 'latest'} not found in registry",
                               "configure a registry.sources entry in ~/.murmur/config.yaml")
            stored = store.lookup(name, version)
            data = stored.read_verified()
            return Fetched(_checked(data, name, version, f"global store {store.root}", self.env),
                           f"global store {store.root}", True, store.meta(name, version))
        client = NexusClient(self.mode.remote_url or "", nexus_key(self.env))
        version = wanted
        if not is_exact(wanted):
            version = best(wanted, [r["version"] for r in client.list() if r.get("name") == name])
            if version is None:
                raise NotFound(f"artifact {name}@{wanted or 'latest'} not found in registry")
        assert version is not None
        check_component("version", version)
        self.progress(f"fetching {name}@{version} from {client.display}")
        data, _sha = client.download(name, version)
        placeholder = meta_for("wasm", "", name, version)  # the download returns no metadata (upstream)
        return Fetched(_checked(data, name, version, client.display, self.env), client.display, True, placeholder)

    # -- the source chain -------------------------------------------------------------------------

    def _from_sources(self, name: str, wanted: str | None) -> Fetched:
        if not self.config.from_file and (wanted is not None or not self.default_source):
            raise NotFound(f"artifact {name}@{wanted or 'latest'} not found in registry",
                           "configure a registry.sources entry in ~/.murmur/config.yaml")
        failures: list[str] = []
        for source in self.config.chain():
            github = GitHubSource(source.repo, resolve_token(source.token, self.env), self.env)
            ask = wanted if is_exact(wanted) else None
            try:
                self.progress(f"fetching {name}@{ask or 'latest'} from {github.display}")
                download = github.fetch(name, ask, self.platform)
                archive = _checked(download.data, name, wanted, download.origin, self.env)
                return Fetched(archive, download.origin, False, own_meta(archive))
            except RegistryError as exc:
                failures.append(f"  {github.display} — {exc.message}")
            except Exception as exc:  # httpx transport errors: the next source is tried
                failures.append(f"  {github.display} — {exc}")
        target = f"{name}@{wanted}" if wanted else name
        raise NotFound("\n".join([f"could not resolve '{target}'", *failures]),
                       "run `murmurd doctor` to check your source configuration")

    def fetch(self, name: str, wanted: str | None) -> Fetched:
        check_component("name", name)
        if is_exact(wanted):  # it goes into store paths and request URLs
            check_component("version", wanted)  # type: ignore[arg-type]
        if not (self.skip_local_registry and self.mode.local):
            try:
                return self._from_registry(name, wanted)
            except NotFound:
                pass
        return self._from_sources(name, wanted)


def store_fetched(store: Store, fetched: Fetched) -> None:
    archive = fetched.archive
    store.put(fetched.name, fetched.version, archive.data, archive.sha256, fetched.meta, overwrite=True)


def install_one(fetcher: Fetcher, store: Store, lock: LockFile | None, name: str, wanted: str | None,
                *, pin_from_sources: bool = True) -> Fetched:
    """Fetch, verify against the pin (`E-REG-005`: nothing written), store, upsert the pin (when `lock`)."""
    if wanted is not None and not is_exact(wanted) and lock is not None and lock.pin(name) is not None:
        pinned = lock.pin(name).resolved_version  # type: ignore[union-attr]
        if satisfies(wanted, pinned):
            wanted = pinned  # an alias or requirement installs what the lock pinned
    fetched = fetcher.fetch(name, wanted)
    if fetched.from_registry or pin_from_sources:
        check_conflict(lock, name, fetched.version, fetched.archive.sha256)
    store_fetched(store, fetched)
    if lock is not None:
        upsert(lock, name, fetched.version, fetched.archive.sha256)
    return fetched


def read_archive_file(path: Path) -> bytes:
    """An operator's `.mur.zip` (`install FILE`, `publish FILE`): a regular file, read whole."""
    try:
        if not path.is_file():
            raise FileNotFoundError(path)
        return path.read_bytes()
    except FileNotFoundError:
        raise RegistryError("E-IO-001", f"{path} not found") from None
    except OSError as exc:
        raise RegistryError("E-IO-003", f"cannot read {path}: {exc.strerror}") from None


def install_file(path: Path, store: Store, env: Mapping[str, str] = os.environ) -> Fetched:
    """A local `.mur.zip`: read its manifest only, store it unchanged (no lock, as upstream)."""
    data = read_archive_file(path)
    try:
        archive = open_archive(data, env)
    except RegistryError as exc:
        raise RegistryError("E-IO-003", f"{path} is not a valid .mur.zip: {exc.message}") from None
    for kind, value in (("name", archive.manifest.name), ("version", archive.manifest.version)):
        check_component(kind, value)
    if is_reserved(archive.manifest.version):
        raise RegistryError("E-REG-004", f"version '{archive.manifest.version}' is reserved and cannot be installed")
    fetched = Fetched(archive, str(path), False, own_meta(archive))
    store_fetched(store, fetched)
    return fetched


def install_github(ref: Ref, store: Store, lock: LockFile | None, cwd: Path,
                   env: Mapping[str, str] = os.environ) -> list[Fetched]:
    """`github:<owner>/<repo>@<tag>`: every `.mur.zip` of that release (a failure is `E-IO-003`)."""
    config = load_config(cwd)
    token = next((s.token for s in config.sources if s.repo == ref.repo), None)
    source = GitHubSource(ref.repo, resolve_token(token, env), env)
    try:
        downloads = source.fetch_tag(ref.tag)
    except RegistryError as exc:
        raise RegistryError("E-IO-003", exc.message) from None
    installed = []
    for download in downloads:
        stem = download.name[: -len(".mur.zip")]
        archive = open_archive(download.data, env)
        name = archive.manifest.name
        if not stem.startswith(f"{name}-"):
            raise RegistryError("E-IO-003", f"asset {download.name} holds artifact '{name}'")
        fetched = Fetched(_checked(download.data, name, archive.manifest.version, download.origin, env),
                          download.origin, False, own_meta(archive))
        check_conflict(lock, name, fetched.version, fetched.archive.sha256)
        installed.append(fetched)
    for fetched in installed:
        store_fetched(store, fetched)
        if lock is not None:
            upsert(lock, fetched.name, fetched.version, fetched.archive.sha256)
    return installed


def project_lock(project: Path | None) -> LockFile | None:
    if project is None:
        return None
    return read_lock(project) or LockFile()


def save_project_lock(project: Path | None, lock: LockFile | None) -> None:
    if project is not None and lock is not None:
        save_lock(project, lock)
