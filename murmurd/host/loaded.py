"""A compiled, contract-checked component: what `ComponentHost.load` returns and every call takes.

Kept apart from the host so that what runs a loaded component (the host's calls, a hook's
session-long instance) can name it without importing the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from wasmtime.component import Component

from murmurd.contract import Role
from murmurd.host import hook_legacy
from murmurd.host.http_egress import OUTGOING_HANDLER
from murmurd.host.interface_names import parse_interface


@dataclass(frozen=True)
class LoadedComponent:
    """A compiled, contract-checked component, shareable across calls and threads."""

    name: str
    role: Role
    component: Component
    sha256: str
    imports: tuple[str, ...]
    exports: tuple[str, ...]
    # A hook's exported lifecycle handlers, read from the component type (empty for other roles).
    handlers: frozenset[str] = frozenset()

    @property
    def legacy_hook(self) -> bool:
        """A hook built against the published `hook@0.5.0` layout (adapted in `hook_legacy`)."""
        return self.role is Role.HOOK and hook_legacy.is_legacy(self.exports)

    @property
    def http_versions(self) -> tuple[str, ...]:
        """Every version of `wasi:http/outgoing-handler` the component imports. A component may
        import several (0.2.0 and 0.2.3 are distinct names); each must be filtered, or the
        linker resolves the unfiltered one to wasmtime's native client."""
        found = (parse_interface(name) for name in self.imports)
        return tuple(i.version for i in found if i is not None and i.unversioned == OUTGOING_HANDLER and i.version)

    @property
    def http_version(self) -> str | None:
        """The wasi:http version the component imports first, if it makes HTTP requests."""
        versions = self.http_versions
        return versions[0] if versions else None
