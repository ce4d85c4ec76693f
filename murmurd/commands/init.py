"""`murmurd init DIR [--driver anthropic|openai|scripted]`: a new capsule that validates and runs.

It writes `murmur.yaml` (a bundled driver, its endpoint in `network.allow`, a model, the key
from the environment or `.env`), a README saying what to do next and a `.gitignore` for what
runs leave behind. It never overwrites: a directory already holding a `murmur.yaml` is refused.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from murmurd.manifest.writing import dump_yaml

MANIFEST_FILE = "murmur.yaml"
GITIGNORE = "workdir/\n.murmurd/\n.env\n"


@dataclass(frozen=True)
class DriverChoice:
    artifact: str
    endpoint: str
    model: str
    key_variable: str | None


DRIVERS = {
    "anthropic": DriverChoice("murmur-driver-anthropic", "https://api.anthropic.com", "claude-sonnet-4-5",
                              "ANTHROPIC_API_KEY"),
    "openai": DriverChoice("murmur-driver-openai", "https://api.openai.com", "gpt-4.1-mini", "OPENAI_API_KEY"),
    "scripted": DriverChoice("murmur-driver-scripted", "http://127.0.0.1:9", "scripted", None),
}


def capsule_name(directory: Path) -> str:
    """The directory's name as a capsule name: lowercase letters, digits and '-'."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-")
    return name[:64] or "my-capsule"


def manifest_for(name: str, driver: DriverChoice) -> dict:
    inference: dict = {"endpoint": driver.endpoint, "model": driver.model, "max_turns": 8,
                       "system_prompt": f"You are {name}, a helpful agent. Answer briefly.",
                       "driver": {"artifact": driver.artifact}}
    manifest: dict = {"name": name, "version": "0.1.0",
                      "artifacts": [{"name": driver.artifact, "runtime": "driver"}]}
    if driver.key_variable is not None:
        manifest["capabilities"] = {"network": {"allow": [driver.endpoint]}}
        inference["api_key"] = "${" + driver.key_variable + "}"
    else:
        answer = {"stop_reason": "end_turn", "content": [{"type": "text", "text": (
            f"Hello from {name}! This answer is scripted (inference.driver.config in murmur.yaml); "
            "`murmurd init --driver anthropic` writes a capsule that asks a real model.")}]}
        # the rule's `when` is in the system prompt, so it answers every message
        inference["driver"]["config"] = {"rules": [{"when": f"You are {name}", "response": answer}], "responses": []}
    manifest["inference"] = inference
    manifest["lifecycle"] = {"task_acceptance": "queue", "after_task": "sleep"}
    return manifest


def readme_for(name: str, directory: str, driver: DriverChoice) -> str:
    key = ""
    if driver.key_variable:
        key = (f"\nThe driver reads `${driver.key_variable}` from the environment, or from a `.env` here:\n\n"
               f"```sh\necho '{driver.key_variable}=...' > {directory}/.env\n```\n")
    return (f"# {name}\n\nA murmur capsule written by `murmurd init` ({driver.artifact}, model `{driver.model}`).\n"
            f"{key}\n```sh\nmurmurd validate {directory}\nmurmurd run {directory} --task \"Say hello\"\n"
            f"murmurd serve {directory}          # then: murmurd chat http://127.0.0.1:PORT/\n```\n\n"
            "Add tools under `artifacts:` (`murmurd list` shows the bundled ones) and grant what they may touch "
            "under `capabilities:`; docs/cli.md describes every command.\n")


def cmd_init(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if (directory / MANIFEST_FILE).exists():
        print(f"murmurd init: {directory / MANIFEST_FILE} already exists; nothing was written", file=sys.stderr)
        return 1
    if directory.exists() and not directory.is_dir():
        print(f"murmurd init: {directory} is a file, not a directory", file=sys.stderr)
        return 1
    driver = DRIVERS[args.driver]
    name = args.name or capsule_name(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MANIFEST_FILE).write_text(dump_yaml(manifest_for(name, driver)), encoding="utf-8")
    if not (directory / "README.md").exists():
        (directory / "README.md").write_text(readme_for(name, args.directory, driver), encoding="utf-8")
    if not (directory / ".gitignore").exists():
        (directory / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    print(f"wrote {directory / MANIFEST_FILE} ({name}, {driver.artifact})")
    if driver.key_variable:
        print(f"next: put {driver.key_variable}=... in {directory / '.env'} (or the environment), then")
    print(f"      murmurd run {args.directory} --task \"Say hello\"")
    return 0


def add_init(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    init = commands.add_parser("init", help="write a new capsule (murmur.yaml, README) that validates and runs")
    init.add_argument("directory", help="where to write it (created when missing; never overwritten)")
    init.add_argument("--driver", choices=sorted(DRIVERS), default="anthropic",
                      help="the bundled driver: anthropic, openai, or scripted (offline, no key) (default anthropic)")
    init.add_argument("--name", help="the capsule's name (default: the directory's name)")
    init.set_defaults(handler=cmd_init)
