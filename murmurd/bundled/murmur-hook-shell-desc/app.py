"""murmur-hook-shell-desc: at staging, usage notes for the common shell binaries the capsule allows.

Bound to `on-stage` with `commit_policy: write-manifests`, as murmur's published hook (0.2.0). For
each binary of `shell-allow` it has a profile for, it returns a `tool-manifest` in the published
hook's form: `name: <binary>`, `runtime: tool`, `implementation: native`, a `description` of a few
lines of usage notes and `input: {command}`. The runtime writes each one as the binary's
`tools/<binary>/murmur.yaml` and offers the description to the model as the shell tool's. A binary
without a profile gets nothing; the arm is `write-manifests` even when the list is empty. The hook
needs no grant: it reads nothing and reaches nothing.
"""

from __future__ import annotations

import json

from hookkit import Silent
from wit_world.imports import lifecycle


# The notes each profile gives: what the model most often needs to call the binary well.
PROFILES: dict[str, str] = {
    "bash": (
        "GNU bash. Run one command line with -c '<commands>'.\n"
        "Fail fast: bash -c 'set -euo pipefail; ...'.\n"
        "Chain: a && b runs b only after a succeeds; a || b runs b only when a fails.\n"
        "Merge stderr into stdout with 2>&1; run in the background with &.\n"
    ),
    "git": (
        "Git version control. Common subcommands: status, log --oneline [-n N], diff [--staged],\n"
        "add <path>, commit -m '<message>', checkout -b <branch>, push [origin <branch>],\n"
        "pull [--rebase], stash / stash pop.\n"
        "Pass --no-pager (git --no-pager log) so output never waits on a pager.\n"
    ),
    "cargo": (
        "Rust's build tool. build [--release], test [--lib] [-- <filter>], check (a fast type check),\n"
        "clippy [-- -D warnings], fmt [--check], run [--release], add <crate>.\n"
        "cargo writes its progress and errors to stderr: add 2>&1 to see them.\n"
    ),
    "rustc": (
        "The Rust compiler. For a project prefer cargo build.\n"
        "One file: rustc <file.rs> -o <out> [--edition 2021].\n"
        "Handy: --emit=asm, --explain <E-code>.\n"
    ),
    "grep": (
        "Search file contents. -r recursive, -n line numbers, -i ignore case, -l file names only,\n"
        "-E extended regex, -F fixed string, --include='*.py', -A/-B/-C N lines of context.\n"
        "Example: grep -rn 'def main' --include='*.py' .\n"
    ),
    "find": (
        "Find files. find <dir> -name '*.py' -type f -not -path '*/.git/*'.\n"
        "-type d for directories, -mtime -1 modified in the last day, -size +1M,\n"
        "-exec <cmd> {} \\; to run a command on each match.\n"
    ),
    "curl": (
        "HTTP client. -s silent, -S show errors, -f fail on HTTP errors, -L follow redirects,\n"
        "-X <METHOD>, -H '<name>: <value>', -d '<body>', -o <file>.\n"
        "JSON POST: curl -sSf -X POST -H 'Content-Type: application/json' -d '{\"k\":\"v\"}' <url>\n"
    ),
    "jq": (
        "JSON processor: echo '<json>' | jq '<filter>'.\n"
        "Filters: . (all), .field, .[N], .[], select(.x == \"v\"), {k: .v}, keys, length, type.\n"
        "-r raw strings, -c compact output, -e exit 1 when the result is null or false.\n"
    ),
    "python3": (
        "Python 3. One-liners: python3 -c '<code>'. Pretty-print JSON: python3 -m json.tool.\n"
        "Example: python3 -c 'import json,sys; print(json.load(sys.stdin)[\"key\"])'\n"
    ),
    "node": (
        "Node.js. One-liners: node -e '<code>'. A script: node <file.js>.\n"
    ),
}


def manifest_for(binary: str, notes: str) -> str:
    """The published hook's manifest shape, as YAML (JSON strings are valid YAML scalars)."""
    lines = [f"name: {json.dumps(binary)}", "runtime: tool", "implementation: native", "description: |"]
    lines += [f"  {line}" for line in notes.splitlines()]
    lines += ["input:", "  type: object", "  properties:", "    command: {type: string}", "  required: [command]"]
    return "\n".join(lines) + "\n"


class Lifecycle(Silent):
    def on_stage(self, event: lifecycle.StageEvent) -> lifecycle.HookOutput:
        return lifecycle.HookOutput_WriteManifests([
            lifecycle.ToolManifest(binary, manifest_for(binary, PROFILES[binary]))
            for binary in event.shell_allow if binary in PROFILES
        ])
