"""The DNS stub's rules (murmurd/containment/dns_stub.py), on real wire-format packets."""

from __future__ import annotations

import pytest
from dnslib import RCODE, DNSRecord

from murmurd.containment.dns_stub import BINDING_SECONDS, NameBindings, answer, parse

pytestmark = pytest.mark.anyio


async def resolve(name: str) -> list[str]:
    return {"api.example.com": ["192.0.2.10", "192.0.2.11"]}.get(name, [])


async def test_a_granted_name_is_answered_and_bound_and_others_are_refused() -> None:
    bindings = NameBindings()
    granted = frozenset({"api.example.com"})
    query = parse(DNSRecord.question("API.Example.com.").pack())
    assert query is not None
    packet, refused = await answer(query, granted, resolve, bindings)
    reply = DNSRecord.parse(packet)
    assert refused is None and reply.header.rcode == RCODE.NOERROR and reply.header.id == query.header.id
    assert sorted(str(rr.rdata) for rr in reply.rr) == ["192.0.2.10", "192.0.2.11"]
    assert {rr.ttl for rr in reply.rr} == {60}
    assert bindings.names_of("192.0.2.10") == {"api.example.com"}

    packet, refused = await answer(parse(DNSRecord.question("evil.example").pack()), granted, resolve, bindings)
    assert refused == "evil.example" and DNSRecord.parse(packet).header.rcode == RCODE.REFUSED

    packet, refused = await answer(parse(DNSRecord.question("api.example.com", "AAAA").pack()), granted, resolve,
                                   bindings)
    reply = DNSRecord.parse(packet)
    assert refused is None and reply.header.rcode == RCODE.NOERROR and not reply.rr  # IPv4 only


async def test_a_granted_name_that_does_not_resolve_is_servfail() -> None:
    query = parse(DNSRecord.question("gone.example").pack())
    packet, refused = await answer(query, frozenset({"gone.example"}), resolve, NameBindings())
    assert refused is None and DNSRecord.parse(packet).header.rcode == RCODE.SERVFAIL


def test_what_is_not_a_query_gets_no_answer() -> None:
    assert parse(b"") is None and parse(b"\x00" * 5) is None
    response = DNSRecord.question("a.example").reply().pack()
    assert parse(response) is None  # a response is never answered (no reflection loops)


def test_bindings_expire() -> None:
    bindings = NameBindings()
    bindings.bind("192.0.2.1", "a.example", now=100.0)
    assert bindings.names_of("192.0.2.1", now=100.0 + BINDING_SECONDS - 1) == {"a.example"}
    assert bindings.names_of("192.0.2.1", now=100.0 + BINDING_SECONDS + 1) == set()


def test_random_bytes_never_raise() -> None:
    import random

    rng = random.Random(22)
    base = DNSRecord.question("api.example.com").pack()
    for _ in range(2000):
        packet = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            packet[rng.randrange(len(packet))] = rng.randrange(256)
        parse(bytes(packet[: rng.randint(0, len(packet))]))  # None or a query; never an exception


def test_a_connection_is_admitted_by_its_destination_and_a_granted_port_only() -> None:
    from murmurd.containment.egress_relay import EgressGrant, EgressRelay

    relay = EgressRelay(EgressGrant(frozenset({("api.example.com", 443), ("10.0.0.5", 8080)})))
    try:
        relay._launch_pairs = {("10.0.0.5", 8080)}  # what the relay's start resolves
        assert relay.admits("10.0.0.5", 8080) and not relay.admits("10.0.0.5", 443)
        assert not relay.admits("192.0.2.10", 443)  # an address no answer named
        relay._bindings.bind("192.0.2.10", "api.example.com")  # the stub answered it for the name
        assert relay.admits("192.0.2.10", 443) and not relay.admits("192.0.2.10", 8080)
    finally:
        relay.stop()


def test_two_threads_stopping_a_relay_at_once_both_return_and_its_thread_ends() -> None:
    """A CLI's end is reached twice at once (a tool that ended the task kills it, and so does the
    reader that saw it die): each stop takes what is left, and neither finds the thread gone."""
    import threading

    from murmurd.containment.egress_relay import EgressGrant, EgressRelay

    for _ in range(20):
        relay = EgressRelay(EgressGrant(frozenset({("10.0.0.5", 8080)})))
        relay._thread = running = threading.Thread(target=relay._run, daemon=True)  # as `start` does, no listeners
        running.start()
        relay._ready.wait(30)
        failures: list[BaseException] = []

        def stop() -> None:
            try:
                relay.stop()
            except BaseException as exc:  # noqa: BLE001 - what the test looks for
                failures.append(exc)

        stoppers = [threading.Thread(target=stop) for _ in range(4)]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(60)
        assert failures == [] and not running.is_alive()
