"""Stream tickets (murmurd/a2a/http/tickets.py): path-bound, short-lived, signed with a per-daemon key."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from murmurd.a2a.http.tickets import MAX_TICKET_CHARS, BadTicket, TicketSigner

PATH = "/tasks/tsk_0123/stream"
NOW = 1_800_000_000.0


@pytest.fixture
def signer() -> TicketSigner:
    return TicketSigner.generate(ttl_seconds=60)


def test_a_ticket_opens_its_path_for_its_principal_until_it_expires(signer: TicketSigner) -> None:
    ticket = signer.mint(PATH, "operator:alice", NOW)
    opened = signer.verify(ticket, PATH, NOW + 59.9)
    assert (opened.path, opened.principal, opened.expires_at) == (PATH, "operator:alice", NOW + 60)
    with pytest.raises(BadTicket, match="expired"):
        signer.verify(ticket, PATH, NOW + 60)


def test_a_ticket_is_bound_to_one_path(signer: TicketSigner) -> None:
    ticket = signer.mint(PATH, "alice", NOW)
    for other in ("/stream", "/tasks/tsk_0124/stream", PATH + "/", PATH.upper()):
        with pytest.raises(BadTicket, match="another stream"):
            signer.verify(ticket, other, NOW)


def test_another_daemon_runs_tickets_are_refused(signer: TicketSigner) -> None:
    ticket = TicketSigner.generate().mint(PATH, "alice", NOW)
    with pytest.raises(BadTicket, match="signature"):
        signer.verify(ticket, PATH, NOW)


def test_a_payload_edited_to_live_longer_or_open_elsewhere_is_refused(signer: TicketSigner) -> None:
    encoded, signature = signer.mint(PATH, "alice", NOW).split(".")
    body = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    for change in ({"e": NOW + 10**6}, {"p": "/stream"}, {"s": "admin"}):
        forged = base64.urlsafe_b64encode(json.dumps({**body, **change}).encode()).rstrip(b"=").decode()
        with pytest.raises(BadTicket, match="signature"):
            signer.verify(forged + "." + signature, PATH, NOW)


def test_two_tickets_for_the_same_stream_differ(signer: TicketSigner) -> None:
    assert signer.mint(PATH, "alice", NOW) != signer.mint(PATH, "alice", NOW)


@pytest.mark.parametrize("ticket", ["", ".", "a.b.c", "not-base64!.x", "é.x", "x" * (MAX_TICKET_CHARS + 1),
                                    "eyJ9.AAAA"])
def test_malformed_tickets_are_refused(signer: TicketSigner, ticket: str) -> None:
    with pytest.raises(BadTicket):
        signer.verify(ticket, PATH, NOW)


@given(st.text(max_size=300))
def test_no_text_is_a_ticket_or_a_crash(text: str) -> None:
    signer = TicketSigner(b"k" * 32)
    with pytest.raises(BadTicket):
        signer.verify(text, PATH, NOW)


def test_a_short_key_or_no_lifetime_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TicketSigner(b"short")
    with pytest.raises(ValueError, match="positive"):
        TicketSigner(b"k" * 32, ttl_seconds=0)
