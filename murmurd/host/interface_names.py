"""Component interface names, `ns:pkg/iface@ver` (`murmur:tool/run@0.1.0`, `wasi:cli/stdout@0.2.9`).

Pure parsing, shared by the contract check (`roles.py`), the hook@0.5.0 layout check
(`hook_legacy.py`) and a loaded component's wasi:http versions (`loaded.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^(?P<ns>[a-z][a-z0-9-]*):(?P<pkg>[a-z][a-z0-9-]*)/(?P<iface>[a-z][a-z0-9-]*)(?:@(?P<ver>[^\s]+))?$")


@dataclass(frozen=True)
class InterfaceName:
    namespace: str
    package: str
    interface: str
    version: str | None

    @property
    def unversioned(self) -> str:
        return f"{self.namespace}:{self.package}/{self.interface}"

    def __str__(self) -> str:
        return f"{self.unversioned}@{self.version}" if self.version else self.unversioned


def parse_interface(name: str) -> InterfaceName | None:
    """Parse `ns:pkg/iface@ver`; plain names (a bare function export) give None."""
    match = _NAME.match(name)
    if not match:
        return None
    return InterfaceName(match["ns"], match["pkg"], match["iface"], match["ver"])
