"""The WIT contract murmurd serves: where the bundled WIT lives and which versions it speaks.

Everything here is static data. The host refuses any `murmur:*` interface that is not listed
in `SERVED`, and the builder compiles guests against the files under `wit_root()`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path


class Role(str, Enum):
    """What an artifact is, as the host sees it."""

    TOOL = "tool"
    DRIVER = "driver"
    CAPSULE = "capsule"
    HOOK = "hook"


# interface (without version) -> the one version this host serves.
SERVED: dict[str, str] = {
    "murmur:tool/run": "0.1.0",
    "murmur:tool-registry/invoke": "0.1.0",
    "murmur:capsule/run": "0.1.0",
    "murmur:text/chunks": "0.1.0",
    "murmur:task/task": "0.1.0",
    "murmur:shell/execute": "0.1.0",
    "murmur:message/send": "0.1.0",
    "murmur:artifact-manager/manage": "0.1.0",
    "murmur:hook/lifecycle": "0.8.0",
    "murmur:runtime/inference": "0.3.0",
    "murmur:runtime/tokens": "0.3.0",
    "murmur:task-io/read": "0.1.0",
    "murmur:conversation/read": "0.1.0",
}

# Interfaces of an older hook layout this host no longer serves -> what replaced them, so a hook
# built against that layout is refused with the fix rather than "no such interface".
RETIRED: dict[str, str] = {
    "murmur:hook/types": "its records moved into murmur:hook/lifecycle@0.8.0",
    "murmur:hook/stage": "on-stage moved into murmur:hook/lifecycle@0.8.0",
    "murmur:hook/task-lifecycle": "on-task-start and on-task-end moved into murmur:hook/lifecycle@0.8.0",
}

# The export that marks each role.
ROLE_EXPORTS: dict[Role, str] = {
    Role.TOOL: "murmur:tool/run",
    Role.CAPSULE: "murmur:capsule/run",
    Role.HOOK: "murmur:hook/lifecycle",
}

# The murmur interfaces each role may import. A tool that imports an interface only for its
# types still lists it, so `murmur:tool/run` appears wherever its records are used.
ROLE_IMPORTS: dict[Role, frozenset[str]] = {
    Role.TOOL: frozenset({"murmur:task/task", "murmur:text/chunks", "murmur:tool/run"}),
    Role.DRIVER: frozenset({"murmur:task/task", "murmur:text/chunks", "murmur:tool/run"}),
    Role.CAPSULE: frozenset(
        {
            "murmur:tool/run",
            "murmur:tool-registry/invoke",
            "murmur:shell/execute",
            "murmur:message/send",
            "murmur:artifact-manager/manage",
        }
    ),
    # A hook lists `murmur:hook/lifecycle` among its imports too: `inference` and
    # `conversation/read` use its `message`, and bindings generators import the whole interface.
    Role.HOOK: frozenset(
        {
            "murmur:hook/lifecycle",
            "murmur:runtime/inference",
            "murmur:runtime/tokens",
            "murmur:task-io/read",
            "murmur:conversation/read",
        }
    ),
}


def versioned(interface: str) -> str:
    """`murmur:tool/run` -> `murmur:tool/run@0.1.0`."""
    return f"{interface}@{SERVED[interface]}"


# Which WIT directory and world each authoring runtime compiles against.
WORLDS: dict[str, tuple[str, str]] = {
    "tool": ("guest", "tool"),
    "wasm": ("guest", "tool"),
    "driver": ("guest", "driver"),
    "capsule": ("guest", "capsule"),
    "capsule-host": ("host", "capsule-host"),
    # `driver` / `tool` plus `wasi:http` (and the monotonic clock, for retry back-off).
    "driver-http": ("http", "driver-http"),
    "tool-http": ("http", "tool-http"),
    "hook": ("hook", "hook"),
}


def wit_root() -> Path:
    """The bundled WIT tree: inside the installed wheel, or the repository's `wit/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_wit", here.parent / "wit"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("murmurd's WIT contract is missing: neither murmurd/_wit nor wit/ exists")
