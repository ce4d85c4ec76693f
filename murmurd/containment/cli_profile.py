"""The process transport's own containment profile: what a CLI agent may read, execute, write and
reach, derived from the CLI the way a shell child's grants are derived from `shell.allow`.

- **Read + execute** (Landlock `read_exec`, closed over as `closure.py` closes a shell binary):
  the CLI's real path; for a `#!` script its interpreter, and for `#!/usr/bin/env <name>` the
  `<name>` it runs (node, for codex's npm wrapper) found on the CLI's own `PATH`.
- **Its package** (read + execute + list): the npm package directory holding the CLI's real path
  (the nearest ancestor with a `package.json`) and the installed packages it depends on, found as
  node's `require` finds them (`node_modules` of the package and of each ancestor): codex's
  wrapper runs the native binary of `@openai/codex-linux-x64`, a sibling package.
- **Read only**: the CLI's own `/proc/self` (a JIT runtime reads its maps, cgroup and limits;
  Claude Code's Bun aborts at start without `/proc/self/cgroup`; the rule is the helper's own
  `/proc/<pid>`, which the CLI becomes at exec, so no other process's entries are readable),
  the resolver's files (names of provider origins resolve through the egress relay's DNS stub),
  the TLS trust store and OpenSSL's configuration (`/etc/ssl/certs`, `/etc/ssl/openssl.cnf`:
  Debian's node exits at start without it; `SSL_CERT_FILE`/`SSL_CERT_DIR`/
  `NODE_EXTRA_CA_CERTS` when the CLI is given them): an https provider is reachable.
- **Writable**: the workdir (no execution) and the CLI's HOME, as issue 27's decisions say
  (`spawn.cli_policy`).
- **Syscalls**: the shell children's allowlist plus `seccomp_profile.PROCESS_TRANSPORT`, each
  with the reason a CLI runtime needs it.
- **Network** (`cli_grant`): a network namespace whose only way out is the egress relay, granting
  the CLI's provider origins that `capabilities.network.allow` lists, and the session's loopback
  MCP bridge (`127.0.0.1:<its port>` inside the namespace is spliced to the host's bridge).
  The provider origins are the CLI's own configuration (`provider_origins`).

Pure but for reading the CLI's files and configuration (no process is spawned here).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from murmurd.containment.closure import script_interpreters

from murmurd.containment.egress_relay import EgressGrant
from murmurd.containment.plan import ContainmentPlan
from murmurd.containment.seccomp_profile import PROCESS_TRANSPORT
from murmurd.host.egress import EgressPolicy, url_origin

PROC_SELF = "/proc/self"
RESOLVER_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf")
TRUST_STORE = ("/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/usr/lib/ssl/openssl.cnf", "/usr/share/ca-certificates",
               "/etc/pki/tls/certs")
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")
ANTHROPIC_DEFAULT = "https://api.anthropic.com"
OPENAI_DEFAULT = "https://api.openai.com/v1"
CHATGPT_BACKEND = "https://chatgpt.com/backend-api/codex"  # codex signed in with a ChatGPT account
LOOPBACK = "127.0.0.1"
_MAX_PACKAGES = 32
_MAX_CONFIG_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class CliProfile:
    """The filesystem and syscall grants of one CLI (see the module docstring)."""

    executables: tuple[str, ...]  # closed over by the helper's spec (closure.py)
    packages: tuple[str, ...]  # directories: read, execute, list
    read_only: tuple[str, ...]  # read (and list)
    syscalls: tuple[str, ...]  # beyond the shell children's allowlist


def cli_profile(executable: str, env: Mapping[str, str]) -> CliProfile:
    """The profile of the CLI at `executable` run with environment `env` (its PATH, its TLS variables)."""
    real = os.path.realpath(executable)
    executables = [real]
    interpreter = script_interpreter(real, env.get("PATH") or os.defpath)
    if interpreter is not None:
        executables.append(interpreter)
    trust = [*TRUST_STORE, *(env[name] for name in TRUST_VARIABLES if os.path.isabs(env.get(name) or ""))]
    return CliProfile(tuple(executables), package_dirs(real), (PROC_SELF, *RESOLVER_FILES, *trust),
                      tuple(PROCESS_TRANSPORT))


def script_interpreter(path: str, search_path: str) -> str | None:
    """What a `#!` script runs: `#!/usr/bin/env node` -> node on `search_path` (its real path);
    `#!/usr/bin/node` -> that. None for a binary (or an unreadable file)."""
    interpreters = script_interpreters(path, search_path)
    if not interpreters:
        return None
    if os.path.basename(interpreters[0]) == "env":  # the program env runs, or None when it is not found
        return interpreters[1] if len(interpreters) > 1 else None
    return interpreters[0]


def package_dirs(real: str) -> tuple[str, ...]:
    """The npm package holding `real` and the installed packages it depends on (transitively, as
    node resolves them); () when `real` is in no package."""
    root = _package_root(Path(real).parent)
    if root is None:
        return ()
    found: list[Path] = []
    pending = [root]
    while pending and len(found) < _MAX_PACKAGES:
        package = pending.pop(0)
        if package in found:
            continue
        found.append(package)
        for name in _dependencies(package):
            located = _resolve_package(package, name)
            if located is not None and located not in found:
                pending.append(located)
    return tuple(str(p) for p in found)


def _package_root(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if (candidate / "package.json").is_file():
            return candidate
        if candidate.name == "node_modules":
            return None
    return None


def _dependencies(package: Path) -> list[str]:
    try:
        data = json.loads((package / "package.json").read_text(encoding="utf-8")[:_MAX_CONFIG_BYTES])
    except (OSError, ValueError):
        return []
    names: list[str] = []
    for key in ("dependencies", "optionalDependencies"):
        block = data.get(key) if isinstance(data, dict) else None
        if isinstance(block, dict):
            names += [n for n in block if isinstance(n, str) and ".." not in n and not n.startswith("/")]
    return names


def _resolve_package(package: Path, name: str) -> Path | None:
    """Where node's `require('<name>/package.json')` finds `name` from `package` (None: not installed)."""
    for directory in (package, *package.parents):
        if directory.name == "node_modules":
            continue
        candidate = directory / "node_modules" / name
        if (candidate / "package.json").is_file():
            return Path(os.path.realpath(candidate))
    return None


# --------------------------------------------------------------------------- network


def provider_origins(dialect: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The origins the CLI's own configuration sends its model requests to. Claude Code:
    `ANTHROPIC_BASE_URL` (its environment, else the `env` block of `~/.claude/settings.json`),
    by default api.anthropic.com. codex: the `base_url` of the `model_provider` its
    `config.toml` selects (`$CODEX_HOME`, else `~/.codex`); the built-in `openai` provider is
    `OPENAI_BASE_URL` or api.openai.com, and chatgpt.com for a ChatGPT sign-in."""
    home = env.get("HOME") or ""
    if dialect == "codex":
        codex_home = env.get("CODEX_HOME") or (os.path.join(home, ".codex") if home else "")
        config = _toml(os.path.join(codex_home, "config.toml")) if codex_home else {}
        provider = config.get("model_provider", "openai")
        providers = config.get("model_providers")
        custom = providers.get(provider) if isinstance(providers, dict) and isinstance(provider, str) else None
        if isinstance(custom, dict) and isinstance(custom.get("base_url"), str):
            return (custom["base_url"],)
        if provider == "openai":
            return (env.get("OPENAI_BASE_URL") or OPENAI_DEFAULT, CHATGPT_BACKEND)
        return ()
    found = [env["ANTHROPIC_BASE_URL"]] if env.get("ANTHROPIC_BASE_URL") else []
    settings = _json(os.path.join(home, ".claude", "settings.json")) if home else {}
    block = settings.get("env") if isinstance(settings, dict) else None
    if isinstance(block, dict) and isinstance(block.get("ANTHROPIC_BASE_URL"), str):
        found.append(block["ANTHROPIC_BASE_URL"])
    return tuple(dict.fromkeys(found)) or (ANTHROPIC_DEFAULT,)


def granted_origins(origins: Iterable[str], network_allow: Iterable[str]) -> tuple[str, ...]:
    """The provider origins `capabilities.network.allow` lists (the others are unreachable)."""
    policy = EgressPolicy.from_allow(list(network_allow))
    return tuple(o for o in origins if policy.allows(url_origin(o)))


def cli_grant(origins: Iterable[str], bridge_url: str | None) -> EgressGrant:
    """What the CLI's network namespace lets out: each granted provider origin's (host, port),
    and the loopback MCP bridge's own port."""
    pairs: set[tuple[str, int]] = set()
    for origin in origins:
        parsed = url_origin(origin)
        if parsed is not None:
            pairs.add((parsed.host, parsed.port))
    if bridge_url is not None:
        port = urlsplit(bridge_url).port
        if port is not None:
            pairs.add((LOOPBACK, port))
    return EgressGrant(frozenset(pairs))


def cli_plan(plan: ContainmentPlan, profile: CliProfile) -> ContainmentPlan:
    """The capsule's plan with the CLI's grants in place of the shell children's: its packages
    (not the capsule's `interpreter_runtime`), its read-only files, its syscalls. The CLI never
    gets the composed root of `sealed` (its HOME and packages live on the host's tree): it runs
    at the Full tier's mechanisms."""
    return dataclasses.replace(plan, runtime=tuple((p, True) for p in profile.packages), read_only=profile.read_only,
                               seccomp_extra=tuple(sorted({*plan.seccomp_extra, *profile.syscalls})), sealed=False)


def _toml(path: str) -> dict:
    try:
        with open(path, "rb") as source:
            return tomllib.loads(source.read(_MAX_CONFIG_BYTES).decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            data = json.loads(source.read(_MAX_CONFIG_BYTES))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
