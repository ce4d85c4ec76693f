"""The environment a shell command runs with, and its synthetic HOME.

Host variables matching the default baseline (`PATH`, `LANG`, `LC_ALL`, `TERM`, `TZ`, `USER`,
`LOGNAME`) or a `baseline_env` glob (added to the default, as upstream), minus `strip_env` glob
matches and credentials (by name or value: `murmurd/manifest/credentials.py`). A variable
`baseline_env` names literally (no glob) is the operator's explicit choice and passes the
credential heuristic (`DATABASE_URL`), never upstream's built-in credential strips
(`UPSTREAM_CREDENTIAL_STRIPS`) nor `strip_env`. Then the caller's overrides, filtered like a glob
match; then the runtime's MURMUR_* identity; then `HOME` = `<workdir>/.capsule-home`. With Landlock,
`TMPDIR` (and `TMP`, `TEMP`) is `<HOME>/tmp`; both are created before each command.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping

from murmurd import workdir_fs
from murmurd.manifest.credentials import looks_like_credential
from murmurd.session.shell_model import TMP_DIR_NAME, ShellFailed, ShellPolicy, ShellRefused, beneath_workdir

DEFAULT_BASELINE_ENV: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME")
# Upstream's built-in strips: removed even when `baseline_env` names the variable itself.
UPSTREAM_CREDENTIAL_STRIPS: tuple[str, ...] = (
    "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY", "HUGGING_FACE_HUB_TOKEN", "NEXUS_API_KEY", "GITHUB_TOKEN",
    "GH_TOKEN", "KUBECONFIG", "NPM_TOKEN", "PYPI_TOKEN", "CARGO_REGISTRY_TOKEN", "AWS_*", "DOCKER_*", "*_API_KEY",
)
_GLOB_CHARS = frozenset("*?[")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _admissible(policy: ShellPolicy, name: str, value: str) -> bool:
    return name != "HOME" and not looks_like_credential(name, value) and not _matches(name, policy.strip_env)


def _check_env_name(name: object, value: object) -> tuple[str, str]:
    if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
        raise ShellRefused(f"environment variable name {name!r} is not valid")
    if not isinstance(value, str) or "\x00" in value:
        raise ShellRefused(f"environment variable {name!r} must have a string value without NUL bytes")
    return name, value


def _named_outright(policy: ShellPolicy, name: str) -> bool:
    """`baseline_env` names the variable itself (no glob), and upstream strips nothing of it."""
    return (name in (policy.baseline_env or ()) and not _GLOB_CHARS.intersection(name)
            and not _matches(name, UPSTREAM_CREDENTIAL_STRIPS) and not _matches(name, policy.strip_env))


def host_environment(policy: ShellPolicy, host_env: Mapping[str, str]) -> dict[str, str]:
    """The default baseline plus `baseline_env` (upstream adds, never replaces)."""
    patterns = (*DEFAULT_BASELINE_ENV, *(policy.baseline_env or ()))
    return {
        name: value
        for name, value in host_env.items()
        if _matches(name, patterns) and "\x00" not in value and name != "HOME"
        and (_named_outright(policy, name) or _admissible(policy, name, value))
    }


def child_environment(
    policy: ShellPolicy,
    env_overrides: Iterable[tuple[str, str]] = (),
    host_env: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The complete environment a shell command runs with (see the module docstring)."""
    env = host_environment(policy, host_env)
    for pair in env_overrides:
        name, value = _check_env_name(*pair)
        if _admissible(policy, name, value):
            env[name] = value
    env.update(policy.runtime_env)
    env["HOME"] = str(policy.home)
    if policy.containment is not None and policy.containment.landlock:
        # Landlock allows writes beneath the workdir only: temporary files go beneath HOME.
        for name in ("TMPDIR", "TMP", "TEMP"):
            env[name] = str(policy.home / TMP_DIR_NAME)
    return env



def make_home(policy: ShellPolicy) -> None:
    """Create the command's HOME (and, under Landlock, its TMPDIR) beneath the workdir, through
    descriptors (no symlink followed). `ShellFailed` when it cannot."""
    root, home = beneath_workdir(policy, policy.home)
    try:
        workdir_fs.make_dirs(root, home)
        if policy.containment is not None and policy.containment.landlock:
            workdir_fs.make_dirs(root, f"{home}/{TMP_DIR_NAME}")
    except OSError as exc:
        raise ShellFailed(f"shell: cannot create HOME {str(policy.home)!r}: {exc}") from None
