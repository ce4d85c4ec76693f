"""The CLI commands of the registry: `install`, `doctor`, `publish`, `registry serve`, with
upstream's names, forms and outputs (run in the project directory), and `murmurd build`'s
`.mur.zip`. The older directory-registry forms (`install DIR`, `publish DIR`) still work."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from murmurd.registry.errors import NotFound, RegistryError


def _eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fail(exc: RegistryError) -> int:
    _eprint(str(exc))
    return 1


def _is_url(value: str | None) -> bool:
    return bool(value) and value.lower().startswith(("http://", "https://"))  # type: ignore[union-attr]


def _is_directory(registry: str | None) -> bool:
    """`--registry` naming a registry directory (murmurd's older form), not a URL or `local`."""
    return bool(registry) and not _is_url(registry) and registry.lower() != "local"  # type: ignore[union-attr]


def _directory_registry(value: str | None):  # type: ignore[no-untyped-def]
    from murmurd.staging.registry import FileRegistry, default_registry_root

    return FileRegistry(Path(value) if value else default_registry_root())


# -- install -------------------------------------------------------------------------------------


def _install_directory_form(args: argparse.Namespace) -> int:
    """`murmurd install DIR [--registry REGISTRY-DIR]`: pin DIR's artifacts (directory registry, bundled)."""
    from murmurd.staging.artifacts import ResolveError
    from murmurd.staging.install import install_pins
    from murmurd.staging.lock import LockError
    from murmurd.staging.stage import StagingError

    try:
        lock = install_pins(Path(args.ref), _directory_registry(args.registry), progress=_eprint)
    except (ResolveError, LockError, StagingError) as exc:
        _eprint(f"murmurd install: {exc}")
        return 1
    for pin in lock.artifacts:
        print(f"{pin.name} {pin.resolved_version}")
    return 0


def _bundled_pin(lock, name: str, version: str | None) -> bool:  # type: ignore[no-untyped-def]
    """murmurd's addition: a declared name no registry or source holds, met by the bundled set."""
    from murmurd.registry.versions import is_exact, satisfies
    from murmurd.staging.bundled import find_bundled, resolve_bundled

    bundled = find_bundled(name)
    if bundled is None or not satisfies(version, bundled.manifest.version):
        return False
    artifact = resolve_bundled(bundled, version if is_exact(version) else None, _eprint)
    lock.upsert(artifact)
    print(f"Installed {name}@{artifact.version} from {artifact.origin}")
    return True


def _install_all(cwd: Path, args: argparse.Namespace) -> int:
    from murmurd.manifest.validate import load_capsule
    from murmurd.registry.install import Fetcher, install_one, project_lock, save_project_lock
    from murmurd.registry.stores import ARTIFACTS, Store, global_root, project_root_or_error
    from murmurd.staging.artifacts import ResolveError

    global_only = args.global_store
    project = project_root_or_error(cwd)
    manifest, report = load_capsule(project, os.environ)
    if manifest is None:
        for problem in report.errors:
            _eprint(problem.to_text())
        return 1
    named = [ref for ref in manifest.artifacts if not ref.is_local]
    if not named:
        print("No artifacts in manifest.")
        return 0
    lock = None if global_only else project_lock(project)
    store = Store(global_root(), "global") if global_only else Store(project / ARTIFACTS, "project")
    fetcher = Fetcher(cwd, os.environ, args.registry, _eprint)
    failures: list[tuple[str, str]] = []
    for ref in named:
        try:
            fetched = install_one(fetcher, store, lock, ref.name, ref.version)
            print(f"Installed {ref.name}@{fetched.version} from {fetched.origin}")
        except NotFound as exc:
            try:
                if lock is not None and _bundled_pin(lock, ref.name, ref.version):
                    continue
            except ResolveError as bundled_exc:
                failures.append((f"{ref.name}@{ref.version or ''}", f"error[E-IO-003]: {bundled_exc}"))
                continue
            failures.append((f"{ref.name}@{ref.version or ''}", str(exc)))
        except RegistryError as exc:
            failures.append((f"{ref.name}@{ref.version or ''}", str(exc)))
    save_project_lock(project, lock)  # every success is pinned, even when others failed
    if not failures:
        return 0
    print()
    print(f"{len(failures)} of {len(named)} artifact{'' if len(named) == 1 else 's'} failed to install:")
    for ref_text, text in failures:
        print()
        print(f"  {ref_text}")
        for line in text.splitlines():
            print(f"    {line}")
    return 1


ALL_PLATFORMS = ("linux-x86_64", "darwin-aarch64")  # upstream's two


def _install_all_platforms(args: argparse.Namespace) -> int:
    """`install NAME@VERSION --all-platforms`: each platform's archive from the source chain into
    the global store (`<name>-<version>-<platform>.mur.zip` + `.sha256`; no meta, no lock)."""
    from murmurd.registry.archive import open_archive
    from murmurd.registry.config import load_config
    from murmurd.registry.install import parse_ref
    from murmurd.registry.sources.github import GitHubSource, resolve_token
    from murmurd.registry.stores import Store, global_root

    try:
        ref = parse_ref(args.ref or "")
        if ref.kind != "name" or ref.version is None:
            raise RegistryError("E-IO-003", "--all-platforms requires an artifact reference (name@version)")
        chain = load_config(Path.cwd()).chain()
        if not chain:
            raise RegistryError("E-REG-001", "--all-platforms requires a configured source chain",
                                "add a registry.sources entry to ~/.murmur/config.yaml")
        store = Store(global_root(), "global")
        for platform in ALL_PLATFORMS:
            reasons = []
            for source in chain:
                github = GitHubSource(source.repo, resolve_token(source.token, os.environ))
                try:
                    download = github.fetch(ref.name, ref.version, platform)
                    archive = open_archive(download.data)
                    if (archive.manifest.name, archive.manifest.version) != (ref.name, ref.version):
                        raise RegistryError("E-IO-003", f"{download.name} holds "
                                                        f"{archive.manifest.name}@{archive.manifest.version}")
                    store.put(ref.name, ref.version, download.data, archive.sha256, None, platform=platform,
                              overwrite=True)
                    print(f"Installed {ref.name}@{ref.version} ({platform}) → ~/.murmur/artifacts/{ref.name}/"
                          f"{ref.version}/{ref.name}-{ref.version}-{platform}.mur.zip")
                    break
                except RegistryError as exc:
                    reasons.append(f"{github.display} — {exc.message}")
                except Exception as exc:  # transport errors: the next source
                    reasons.append(f"{github.display} — {exc}")
            else:
                _eprint(f"warning: could not install {ref.name}@{ref.version} for {platform}: {'; '.join(reasons)}")
    except RegistryError as exc:
        return _fail(exc)
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    from murmurd.registry.install import (Fetcher, install_file, install_github, install_one, parse_ref,
                                          project_lock, save_project_lock)
    from murmurd.registry.stores import ARTIFACTS, Store, global_root, project_root_or_error

    if args.all_platforms:
        return _install_all_platforms(args)
    if (args.ref and Path(args.ref).is_dir()) or _is_directory(args.registry):
        if not args.ref or not Path(args.ref).is_dir():
            _eprint("error[E-IO-003]: --registry takes a URL or `local`; a registry directory goes with "
                    "`murmurd install CAPSULE-DIR --registry REGISTRY-DIR`")
            return 1
        return _install_directory_form(args)
    cwd = Path.cwd()
    try:
        if args.ref is None:
            return _install_all(cwd, args)
        ref = parse_ref(args.ref)
        if args.global_store:
            project, store = None, Store(global_root(), "global")
        else:
            project = project_root_or_error(cwd)
            store = Store(project / ARTIFACTS, "project")
        if ref.kind == "file":
            fetched = install_file(ref.path, store)  # type: ignore[arg-type]
            print(f"Installed {fetched.name}@{fetched.version} from {ref.path}")
            return 0
        lock = project_lock(project)
        if ref.kind == "github":
            for fetched in install_github(ref, store, lock, cwd):
                print(f"Installed {fetched.name}@{fetched.version} from {fetched.origin}")
        else:
            fetcher = Fetcher(cwd, os.environ, args.registry, _eprint, default_source=ref.version is None)
            fetched = install_one(fetcher, store, lock, ref.name, ref.version)
            print(f"Installed {fetched.name}@{fetched.version} from {fetched.origin}")
        save_project_lock(project, lock)
    except RegistryError as exc:
        return _fail(exc)
    return 0


# -- doctor --------------------------------------------------------------------------------------


def _cmd_doctor(args: argparse.Namespace) -> int:
    from murmurd.registry.doctor import run_doctor

    try:
        report = run_doctor(Path.cwd())
    except RegistryError as exc:
        return _fail(exc)
    print(report.text())
    return 0 if report.ok else 1


# -- publish -------------------------------------------------------------------------------------


def _publish_directory_form(args: argparse.Namespace) -> int:
    from murmurd.staging.artifacts import ResolveError

    try:
        artifact = _directory_registry(args.registry).publish(Path(args.artifact))
    except ResolveError as exc:
        _eprint(f"murmurd publish: {exc}")
        return 1
    print(f"published {artifact.name} {artifact.version} sha256:{artifact.sha256}")
    return 0


def publish_archive(path: Path, registry: str | None, cwd: Path, platform: str | None = None) -> str:
    """Publish a `.mur.zip` into the global store (local mode) or a Nexus registry; `name@version`."""
    from murmurd.registry.archive import open_archive, registry_runtime
    from murmurd.registry.config import nexus_key, registry_mode
    from murmurd.registry.install import own_meta
    from murmurd.registry.sources.nexus import NexusClient
    from murmurd.registry.stores import Store, check_component, global_root, host_platform
    from murmurd.registry.versions import is_reserved

    from murmurd.registry.install import read_archive_file

    data = read_archive_file(path)
    try:
        archive = open_archive(data)
    except RegistryError as exc:
        raise RegistryError("E-IO-003", f"{path} is not a valid .mur.zip: {exc.message}") from None
    own = archive.manifest
    if is_reserved(own.version):
        raise RegistryError("E-REG-004", f"version '{own.version}' is reserved and cannot be published",
                            "reserved strings: latest, stable, edge — use an explicit semver version")
    check_component("name", own.name)
    check_component("version", own.version)
    runtime = "native" if platform else registry_runtime(own)
    if runtime == "native" and platform is None:
        platform = host_platform()
        if platform == "unknown":
            raise RegistryError("E-IO-003", "cannot detect this host's platform; pass --platform os-arch")
        print(f"Platform: {platform} (auto-detected)")
    if platform is not None and (platform.count("-") < 1 or not all(platform.split("-", 1))):
        raise RegistryError("E-IO-003", f"invalid platform '{platform}' (expected os-arch)")
    mode = registry_mode(registry, cwd)
    if mode.local:
        meta = own_meta(archive)
        meta["runtime"] = runtime
        meta["platforms"] = [platform.split("-", 1)] if platform else []
        Store(global_root(), "global").put(own.name, own.version, data, archive.sha256, meta, platform=platform,
                                           overwrite=False)
        return f"{own.name}@{own.version}"
    answer = NexusClient(mode.remote_url or "", nexus_key()).publish(own.name, own.version, runtime, data,
                                                                     [platform] if platform else [])
    return str(answer.get("artifact_id", f"{own.name}@{own.version}"))


def _cmd_publish(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    target = args.artifact
    if (target and Path(target).is_dir()) or (target and _is_directory(args.registry)):
        return _publish_directory_form(args)
    try:
        if target is None:
            from murmurd.manifest.artifact import ArtifactManifestError, load_artifact_manifest
            from murmurd.registry.archive import archive_name

            try:
                own = load_artifact_manifest(cwd / "murmur.yaml")
            except ArtifactManifestError as exc:
                raise RegistryError("E-IO-001", str(exc)) from None
            default = cwd / archive_name(own.name, own.version)
            if not default.is_file():
                raise RegistryError("E-IO-001", f"default artifact path {default} not found. Run 'murmurd build' "
                                                "first or pass an explicit artifact path.")
            target = str(default)
        published = publish_archive(Path(target), args.registry, cwd, args.platform)
    except RegistryError as exc:
        return _fail(exc)
    print(f"Published {published}")
    return 0


# -- registry serve ------------------------------------------------------------------------------


def _cmd_registry_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from murmurd.registry.server import DEFAULT_BIND, create_app, parse_bind

    key = os.environ.get("NEXUS_API_KEY", "")
    if not key:
        _eprint("error[E-IO-003]: NEXUS_API_KEY is required to serve a registry")
        return 1
    try:
        host, port = parse_bind(args.bind or os.environ.get("NEXUS_BIND") or DEFAULT_BIND)
    except ValueError as exc:
        _eprint(f"error[E-IO-003]: {exc}")
        return 1
    directory = Path(args.directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = uvicorn.Config(create_app(directory, key), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    _eprint(f"murmurd registry: serving {directory} on http://{host}:{port}/v1")
    server.run()
    return 0


# -- build ---------------------------------------------------------------------------------------


def pack_built(directory: Path, manifest, built: Path) -> Path:  # type: ignore[no-untyped-def]
    """`<dir>/<name>-<version>.mur.zip` beside the component `murmurd build` made."""
    from murmurd.registry.archive import archive_name, pack

    from murmurd.registry.stores import host_platform, write_atomic

    # A native tool's archive names its platform, as upstream's (`<name>-<ver>-<platform>.mur.zip`).
    platform = host_platform() if manifest.is_native else None
    target = directory / archive_name(manifest.name, manifest.version, platform)
    write_atomic(target, pack(directory, manifest, built))
    return target


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    install = commands.add_parser(
        "install", help="install the manifest's artifacts (or one) into the project store and pin them in murmur.lock")
    install.add_argument("ref", nargs="?", metavar="REF",
                         help="NAME[@VERSION], FILE.mur.zip or github:OWNER/REPO@TAG (none: every manifest artifact); "
                              "a capsule directory is the directory-registry form")
    install.add_argument("--registry", help="a Nexus URL or `local` (the global store); with a capsule directory, "
                                            "a registry directory")
    install.add_argument("-g", "--global", dest="global_store", action="store_true",
                         help="install into the global store (~/.murmur/artifacts), no lock")
    install.add_argument("--all-platforms", action="store_true",
                         help="NAME@VERSION for linux-x86_64 and darwin-aarch64 from the sources into the global store")
    install.set_defaults(handler=_cmd_install)

    doctor = commands.add_parser("doctor", help="check every declared artifact is installed and matches murmur.lock")
    doctor.set_defaults(handler=_cmd_doctor)

    publish = commands.add_parser("publish", help="publish a .mur.zip (global store or a Nexus registry)")
    publish.add_argument("artifact", nargs="?", metavar="FILE.mur.zip",
                         help="the archive (default <name>-<version>.mur.zip here); an artifact directory is "
                              "the directory-registry form")
    publish.add_argument("--registry", help="a Nexus URL or `local`; with an artifact directory, a registry directory")
    publish.add_argument("--platform", help="publish as a native artifact for os-arch")
    publish.set_defaults(handler=_cmd_publish)

    registry = commands.add_parser("registry", help="run a registry: `registry serve DIR`")
    sub = registry.add_subparsers(dest="registry_command", required=True)
    serve = sub.add_parser("serve", help="serve DIR over the Nexus API (NEXUS_API_KEY, NEXUS_BIND)")
    serve.add_argument("directory", metavar="DIR", help="the registry directory: archives kept as <name>/<version>/<name>-<version>.mur.zip")
    serve.add_argument("--bind", help="host:port (default $NEXUS_BIND or 127.0.0.1:7800)")
    serve.set_defaults(handler=_cmd_registry_serve)
