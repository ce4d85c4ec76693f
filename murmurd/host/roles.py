"""Role detection and contract validation from a component's import and export names.

Pure logic over names like `murmur:tool/run@0.1.0` and `wasi:cli/stdout@0.2.9` (parsed by
`interface_names.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from murmurd.contract import RETIRED, ROLE_EXPORTS, ROLE_IMPORTS, SERVED, Role, versioned
from murmurd.host import hook_legacy
from murmurd.host.hook_values import HANDLERS, REQUIRED_HANDLERS
from murmurd.host.interface_names import InterfaceName, parse_interface

__all__ = ["ContractViolation", "check_contract", "check_hook_handlers", "detect_role"]
_WASI_VERSION = re.compile(r"^0\.2\.\d+$")


class ContractViolation(ValueError):
    """One reason a component does not fit this host. The message is user-facing."""


def _check_murmur_version(kind: str, iface: InterfaceName) -> None:
    served = SERVED.get(iface.unversioned)
    if served is None and iface.unversioned in RETIRED:
        raise ContractViolation(
            f"{kind} {iface}: this host no longer serves {iface.unversioned} "
            f"({RETIRED[iface.unversioned]}); rebuild the hook against the published hook WIT"
        )
    if served is None:
        raise ContractViolation(f"{kind} {iface}: this host serves no interface {iface.unversioned}")
    if iface.version != served and iface.version != hook_legacy.VERSIONS.get(iface.unversioned):
        raise ContractViolation(
            f"{kind} {iface}: found version {iface.version or '(none)'}, "
            f"this host serves {iface.unversioned}@{served}"
        )


def detect_role(exports: Iterable[str]) -> Role | None:
    """The role a component's exports declare (tool and driver share `murmur:tool/run`)."""
    found = {p.unversioned for p in map(parse_interface, exports) if p is not None}
    for role, marker in ROLE_EXPORTS.items():
        if marker in found:
            return role
    return None


def check_contract(imports: Iterable[str], exports: Iterable[str], expected: Role | None = None) -> Role:
    """Validate every murmur interface and decide the role; raise ContractViolation if unfit.

    `expected` is the role the manifest declares; DRIVER is satisfied by a tool-shaped export.
    """
    imports, exports = list(imports), list(exports)
    for kind, names in (("export", exports), ("import", imports)):
        for name in names:
            iface = parse_interface(name)
            if iface is not None and iface.namespace == "murmur":
                _check_murmur_version(kind, iface)

    detected = detect_role(exports)
    if detected is None:
        markers = ", ".join(f"{versioned}" for versioned in sorted(f"{m}@{SERVED[m]}" for m in ROLE_EXPORTS.values()))
        raise ContractViolation(f"exports none of {markers}; cannot tell what this component is")
    role = detected
    if expected is not None:
        fits = expected == detected or (expected == Role.DRIVER and detected == Role.TOOL)
        if not fits:
            raise ContractViolation(
                f"declared as runtime {expected.value!r} but exports "
                f"{ROLE_EXPORTS[detected]}@{SERVED[ROLE_EXPORTS[detected]]} (a {detected.value})"
            )
        role = expected

    allowed = ROLE_IMPORTS[role]
    if role is Role.HOOK:  # the seed's layout, or the published hook@0.5.0 one, never a mix
        mixed = hook_legacy.check_layout(imports, exports)
        if mixed is not None:
            raise ContractViolation(mixed)
    elif any(hook_legacy.VERSIONS.get(i.unversioned) == i.version
             for i in map(parse_interface, [*imports, *exports]) if i is not None):
        raise ContractViolation("the hook@0.5.0 interfaces are served to hooks only")
    for name in imports:
        iface = parse_interface(name)
        if iface is None:
            raise ContractViolation(f"import {name!r}: not an interface this host provides")
        if iface.namespace == "wasi":
            if iface.version is None or not _WASI_VERSION.match(iface.version):
                raise ContractViolation(
                    f"import {iface}: found version {iface.version or '(none)'}, this host serves wasi 0.2.x"
                )
            continue
        if iface.namespace != "murmur":
            raise ContractViolation(f"import {iface}: unknown interface; this host provides only murmur:* and wasi:*")
        if iface.unversioned not in allowed:
            raise ContractViolation(f"import {iface}: not provided to a {role.value} component")
    return role


def check_hook_handlers(names: Iterable[str]) -> frozenset[str]:
    """The lifecycle handlers among a hook's `murmur:hook/lifecycle` export names.

    `on-task-start`/`on-task-end` may be absent (never dispatched) and so may `on-stage` (the
    runtime logs it); a missing one of the six others raises, naming it."""
    present = frozenset(names) & frozenset(HANDLERS)
    missing = [name for name in HANDLERS if name in REQUIRED_HANDLERS and name not in present]
    if missing:
        raise ContractViolation(
            f"export {versioned(ROLE_EXPORTS[Role.HOOK])} lacks the required handler{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}"
        )
    return present

