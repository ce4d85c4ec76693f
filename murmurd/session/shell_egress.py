"""`capabilities.network.allow` for shell children: the grant their egress relay carries
(`murmurd/containment/egress_relay.py`) and how its refusals become `egress_denied` trace lines.

A `network.allow` entry lists origins (`murmurd.host.egress`); a shell child's connection is plain
TCP, so the relay grants each origin's `(host, port)` whatever its scheme (no TLS is terminated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from murmurd.containment.egress_relay import EgressGrant, Refusal
from murmurd.host.egress import EgressPolicy
from murmurd.host.http_egress import EgressDenial

SHELL_EGRESS_INTERFACE = "shell/egress"


def shell_egress_grant(network_allow: Iterable[str]) -> EgressGrant:
    """The `(host, port)` pairs a capsule's `network.allow` grants its shell children."""
    return EgressGrant(frozenset((origin.host, origin.port) for origin in EgressPolicy.from_allow(network_allow).origins))


def denial_of(binary: str, refusal: Refusal) -> EgressDenial:
    """A refusal as the `egress_denied` line the session writes: `artifact` names the shell binary,
    `interface` is `shell/egress#tcp` or `shell/egress#dns`."""
    origin = f"tcp://{refusal.target}" if refusal.kind == "tcp" else None
    return EgressDenial(artifact=binary, interface=f"{SHELL_EGRESS_INTERFACE}#{refusal.kind}", reason=refusal.reason,
                        origin=origin, scheme=refusal.kind, authority=refusal.target)


def refusal_reporter(report: Callable[[EgressDenial], None] | None) -> Callable[[str, Refusal], None] | None:
    """What the shell runner calls (from the relay's thread) with each refusal, or None."""
    if report is None:
        return None
    return lambda binary, refusal: report(denial_of(binary, refusal))
