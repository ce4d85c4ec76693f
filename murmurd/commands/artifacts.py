"""The artifact commands: `build` (a Python artifact into a component and its .mur.zip), `call` (one
component call), `list` (the bundled artifacts)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from murmurd.commands.common import eprint


def add_build(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    build = commands.add_parser("build", help="compile a Python artifact (murmur.yaml + app.py) into a component")
    build.add_argument("artifact_dirs", nargs="+", metavar="artifact-dir", help="a directory holding murmur.yaml and app.py")
    build.set_defaults(handler=cmd_build)


def add_call(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    call = commands.add_parser("call", help="run one tool, driver or capsule call and print the result")
    call.add_argument("component", help="path to a .wasm component")
    call.add_argument("--data", help="tool-input data (verbatim; usually JSON)")
    call.add_argument("--data-file", help="read tool-input data from this file")
    call.add_argument("--grant-dir", help="directory preopened as the guest's '.'")
    call.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="guest environment variable")
    call.add_argument("--log", help="file receiving the guest's stdout and stderr")
    call.add_argument("--deadline", type=float, default=600.0, help="wall-clock limit in seconds (default 600)")
    call.add_argument("--memory-mib", type=int, default=512, help="linear memory limit in MiB (default 512)")
    call.set_defaults(handler=cmd_call)


def add_list(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    listing = commands.add_parser("list", help="show the artifacts bundled with murmurd (name, version, runtime)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=cmd_list)


def cmd_build(args: argparse.Namespace) -> int:
    from murmurd.authoring.build import BuildError, build_artifact
    from murmurd.manifest.artifact import ArtifactManifestError
    from murmurd.registry.commands import pack_built
    from murmurd.registry.errors import RegistryError

    status = 0
    for directory in args.artifact_dirs:
        try:
            result = build_artifact(Path(directory), progress=eprint)
        except (BuildError, ArtifactManifestError) as exc:
            eprint(f"murmurd build: {exc}")
            status = 1
            continue
        print(result.output)
        try:  # and the .mur.zip upstream's `mur build` packs (murmur.yaml + requires_files)
            print(pack_built(Path(directory), result.manifest, result.output))
        except RegistryError as exc:
            eprint(f"murmurd build: {exc}")
            status = 1
    return status


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def cmd_call(args: argparse.Namespace) -> int:
    from murmurd.contract import Role
    from murmurd.host import CallGrant, ComponentHost, HostError, Limits, ToolInput, ToolStatus

    try:
        env = _parse_env(args.env)
    except ValueError as exc:
        eprint(f"murmurd call: {exc}")
        return 2
    data = args.data
    if args.data_file is not None:
        data = Path(args.data_file).read_text(encoding="utf-8")
    grant_dir = Path(args.grant_dir).resolve() if args.grant_dir else None
    if grant_dir is not None and not grant_dir.is_dir():
        eprint(f"murmurd call: --grant-dir {args.grant_dir}: not a directory")
        return 2
    limits = Limits(memory_bytes=args.memory_mib * 1024 * 1024, deadline_seconds=args.deadline)
    grant = CallGrant(env=env, preopen=grant_dir, log_path=Path(args.log) if args.log else None, limits=limits)

    streamed: list[str] = []

    def stream(chunk: str) -> None:
        streamed.append(chunk)
        print(chunk, end="", file=sys.stderr, flush=True)

    host = ComponentHost()
    try:
        loaded = host.load(Path(args.component), progress=eprint)
        if loaded.role is Role.CAPSULE:
            host.run_capsule_sync(loaded, grant=grant)
            print(json.dumps({"role": "capsule", "status": "returned"}))
            return 0
        result = host.call_tool_sync(
            loaded,
            ToolInput(data=data, log_path=args.log),
            grant=grant,
            on_chunk=stream,
            on_thinking=stream,
        )
    except HostError as exc:
        eprint(f"murmurd call: {exc}")
        return 2
    finally:
        host.close()
        if streamed and not streamed[-1].endswith("\n"):
            eprint("")
    print(json.dumps(result.to_json(), indent=2))
    return 0 if result.status is ToolStatus.PASSED else 1


def cmd_list(args: argparse.Namespace) -> int:
    from murmurd.staging.artifacts import ResolveError
    from murmurd.staging.bundled import bundled_artifacts

    try:
        bundled = bundled_artifacts()
    except ResolveError as exc:
        eprint(f"murmurd list: {exc}")
        return 1
    rows = [{"name": a.manifest.name, "version": a.manifest.version, "runtime": a.manifest.runtime,
             "description": a.manifest.description} for a in bundled]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len("NAME"), *(len(r["name"]) for r in rows)])
    print(f"{'NAME':<{width}}  {'VERSION':<8}  {'RUNTIME':<7}  DESCRIPTION")  # upstream `mur list`'s columns
    for row in rows:
        first = next(iter((row["description"] or "").splitlines()), "")  # a block description's first line
        print(f"{row['name']:<{width}}  {row['version']:<8}  {row['runtime']:<7}  {first}")
    return 0
