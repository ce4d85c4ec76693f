"""The DNS stub shell children's queries reach (UDP :53 inside their network namespace).

Upstream's rules: a name the allowlist grants is resolved by murmurd (IPv4, answered with a
60 s TTL, and each address bound to the name for 300 s so the relay admits connections to it);
any other name is answered `REFUSED`. Only `A` queries get addresses; any other type for a
granted name is an empty `NOERROR` (IPv4 only). A packet that does not parse gets no answer.
Wire format through `dnslib`; the rules are `answer`, pure but for the resolver it is given.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

ANSWER_TTL_SECONDS = 60
BINDING_SECONDS = 300.0
MAX_BINDINGS = 4096

Resolve = Callable[[str], Awaitable[list[str]]]  # a granted name -> its IPv4 addresses


def query_name(record: DNSRecord) -> str:
    return str(record.q.qname).lower().rstrip(".")


@dataclass
class NameBindings:
    """Which granted name each address was answered for, until the binding expires."""

    _bound: dict[str, dict[str, float]] = field(default_factory=dict)  # address -> {name: expiry}

    def bind(self, address: str, name: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if address not in self._bound and len(self._bound) >= MAX_BINDINGS:
            self._expire(now)
            if len(self._bound) >= MAX_BINDINGS:
                return  # a flood of names: the oldest bindings stay, the new address is not admitted
        self._bound.setdefault(address, {})[name] = now + BINDING_SECONDS

    def names_of(self, address: str, now: float | None = None) -> set[str]:
        now = time.monotonic() if now is None else now
        return {name for name, until in self._bound.get(address, {}).items() if until > now}

    def _expire(self, now: float) -> None:
        for address in list(self._bound):
            live = {name: until for name, until in self._bound[address].items() if until > now}
            if live:
                self._bound[address] = live
            else:
                del self._bound[address]


def parse(packet: bytes) -> DNSRecord | None:
    """A query with one question, or None (not DNS, a response, no question)."""
    try:
        record = DNSRecord.parse(packet)
    except Exception:  # noqa: BLE001 - hostile bytes: whatever dnslib raises on them, no answer
        return None
    if record.header.qr or not record.questions:
        return None
    return record


async def answer(record: DNSRecord, granted: frozenset[str], resolve: Resolve,
                 bindings: NameBindings) -> tuple[bytes, str | None]:
    """The reply to a parsed query, and the refused name when it was refused."""
    name = query_name(record)
    reply = record.reply()
    if name not in granted:
        reply.header.rcode = RCODE.REFUSED
        return reply.pack(), name
    if record.q.qtype != QTYPE.A:
        return reply.pack(), None
    try:
        addresses = await resolve(name)
    except OSError:
        addresses = []
    if not addresses:
        reply.header.rcode = RCODE.SERVFAIL
        return reply.pack(), None
    for address in addresses:
        bindings.bind(address, name)
        reply.add_answer(RR(record.q.qname, QTYPE.A, rdata=A(address), ttl=ANSWER_TTL_SECONDS))
    return reply.pack(), None
