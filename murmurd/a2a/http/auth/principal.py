"""Who is calling, and the origin and trust a task of theirs may carry (pure rules).

A principal is what a credential proves: its name, its origin (`operator` or `peer`) and the
trust classes it may assert. The `x-murmur-task-origin` / `x-murmur-task-trust` headers may only
narrow within that: an operator may send a task as a peer of any trust class; a peer may assert
only the classes its credential lists (and `untrusted`, the bottom, always); nobody may claim a
wider origin or class than the credential gives. With no credential configured, every caller is
the anonymous operator, which keeps the headers' meaning from before authentication existed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Origin = Literal["operator", "peer"]

OPERATOR: Origin = "operator"
PEER: Origin = "peer"
OPERATOR_TRUST = "operator"  # the trust class of an operator task
UNTRUSTED = "untrusted"  # the bottom class: anyone may narrow to it
TRUST_CLASS = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Principal:
    """What a credential proves. `trust` is the classes a peer may assert (its first is the
    class of a peer task that names none); an operator may assert any class."""

    name: str | None  # None: the anonymous operator of a daemon with no credential configured
    origin: Origin
    trust: tuple[str, ...] = ()

    @property
    def default_trust(self) -> str:
        return self.trust[0] if self.origin == PEER and self.trust else UNTRUSTED

    def may_assert(self, trust: str) -> bool:
        return self.origin == OPERATOR or trust == UNTRUSTED or trust in self.trust


ANONYMOUS_OPERATOR = Principal(None, OPERATOR)


@dataclass(frozen=True)
class TaskIdentity:
    """The origin and trust class a task is recorded with."""

    origin: Origin
    trust: str


class Widening(Exception):
    """A request asks for more origin or trust than its credential gives (HTTP 403)."""


def narrow(principal: Principal, origin_header: str | None, trust_header: str | None) -> TaskIdentity:
    """The task identity a request gets: the credential's, narrowed by the headers.

    `x-murmur-task-origin: peer` makes an operator's task a peer task; `operator` from a peer
    credential is refused; any other value is ignored. A peer task's class is the trust header
    when it is a well-formed class (else `untrusted`, as before authentication), or the
    credential's default when the header is absent. Raises Widening."""
    claimed = (origin_header or "").strip().lower()
    if claimed == OPERATOR and principal.origin != OPERATOR:
        raise Widening(f"credential {principal.name!r} is a peer credential; it cannot send operator tasks")
    origin: Origin = PEER if claimed == PEER or principal.origin == PEER else OPERATOR
    if origin == OPERATOR:
        return TaskIdentity(OPERATOR, OPERATOR_TRUST)
    if trust_header is None:
        return TaskIdentity(PEER, principal.default_trust)
    trust = trust_header.strip().lower()
    if not TRUST_CLASS.match(trust):
        return TaskIdentity(PEER, UNTRUSTED)
    if not principal.may_assert(trust):
        allowed = ", ".join(dict.fromkeys((*principal.trust, UNTRUSTED)))
        raise Widening(f"credential {principal.name!r} may assert trust {allowed}; not {trust!r}")
    return TaskIdentity(PEER, trust)


def at_least_as_trusted(replier: Principal, creator: Principal | None) -> bool:
    """May `replier` answer a task `creator` created (its `input-required` reply)?

    An operator always may. A peer may when the creator was a peer whose every trust class it
    may assert as well. A creator no longer known (its credential removed, or the task created
    before credentials were configured) counts as an operator."""
    if replier.origin == OPERATOR:
        return True
    if creator is None or creator.origin == OPERATOR:
        return False
    return set(creator.trust) <= set(replier.trust) | {UNTRUSTED}
