"""The `murmurd` command line. Each subcommand parses its arguments and calls one library function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from murmurd import __version__


def _eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _cmd_build(args: argparse.Namespace) -> int:
    from murmurd.authoring.build import BuildError, build_artifact
    from murmurd.manifest.artifact import ArtifactManifestError

    status = 0
    for directory in args.artifact_dirs:
        try:
            result = build_artifact(Path(directory), progress=_eprint)
        except (BuildError, ArtifactManifestError) as exc:
            _eprint(f"murmurd build: {exc}")
            status = 1
            continue
        print(result.output)
    return status


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _cmd_call(args: argparse.Namespace) -> int:
    from murmurd.contract import Role
    from murmurd.host import CallGrant, ComponentHost, HostError, Limits, ToolInput, ToolStatus

    try:
        env = _parse_env(args.env)
    except ValueError as exc:
        _eprint(f"murmurd call: {exc}")
        return 2
    data = args.data
    if args.data_file is not None:
        data = Path(args.data_file).read_text(encoding="utf-8")
    grant_dir = Path(args.grant_dir).resolve() if args.grant_dir else None
    if grant_dir is not None and not grant_dir.is_dir():
        _eprint(f"murmurd call: --grant-dir {args.grant_dir}: not a directory")
        return 2
    limits = Limits(memory_bytes=args.memory_mib * 1024 * 1024, deadline_seconds=args.deadline)
    grant = CallGrant(env=env, preopen=grant_dir, log_path=Path(args.log) if args.log else None, limits=limits)

    streamed: list[str] = []

    def stream(chunk: str) -> None:
        streamed.append(chunk)
        print(chunk, end="", file=sys.stderr, flush=True)

    host = ComponentHost()
    try:
        loaded = host.load(Path(args.component))
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
        _eprint(f"murmurd call: {exc}")
        return 2
    finally:
        host.close()
        if streamed and not streamed[-1].endswith("\n"):
            _eprint("")
    print(json.dumps(result.to_json(), indent=2))
    return 0 if result.status is ToolStatus.PASSED else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="murmurd", description="Run murmur capsules and serve them over A2A.")
    parser.add_argument("--version", action="version", version=f"murmurd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="compile a Python artifact (murmur.yaml + app.py) into a component")
    build.add_argument("artifact_dirs", nargs="+", metavar="artifact-dir")
    build.set_defaults(handler=_cmd_build)

    call = commands.add_parser("call", help="run one tool, driver or capsule call and print the result")
    call.add_argument("component", help="path to a .wasm component")
    call.add_argument("--data", help="tool-input data (verbatim; usually JSON)")
    call.add_argument("--data-file", help="read tool-input data from this file")
    call.add_argument("--grant-dir", help="directory preopened as the guest's '.'")
    call.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="guest environment variable")
    call.add_argument("--log", help="file receiving the guest's stdout and stderr")
    call.add_argument("--deadline", type=float, default=600.0, help="wall-clock limit in seconds (default 600)")
    call.add_argument("--memory-mib", type=int, default=512, help="linear memory limit in MiB (default 512)")
    call.set_defaults(handler=_cmd_call)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
