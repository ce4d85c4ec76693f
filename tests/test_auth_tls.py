"""Mutual TLS terminated by `murmurd serve` itself, with a throwaway CA made here: a client
certificate's subject names a principal through the credentials file; a certificate naming no
credential, or none at all without a token, is refused 401; one from another CA fails the
handshake; a bearer token still works over TLS; the a2a-sdk client authenticates by certificate."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_message_text, new_text_message
from a2a.types import a2a_pb2 as pb
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from a2akit import Served, chaos_capsule, serving
from authkit import bearer, token_sha256
from test_auth_serve import OPS, message, recorded


@dataclass
class Issued:
    cert: Path
    key: Path


class ThrowawayCA:
    """A CA that lives for one test run: issues server and client certificates into `root`."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name = root, name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        self.cert = (self._builder(subject, subject, self.key.public_key())
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False,
                                                  key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.pem = root / f"{name}-ca.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, issuer: x509.Name, public_key: Any) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1)))

    def issue(self, file_name: str, attributes: list[tuple[Any, str]], *, server: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])
        builder = (self._builder(subject, self.cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.root / f"{file_name}.pem", self.root / f"{file_name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        return issued


@dataclass
class TlsServed:
    served: Served
    url: str
    ca: ThrowawayCA
    billing: Issued
    stranger: Issued
    rogue: Issued

    def context(self, client: Issued | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.pem))
        if client is not None:
            context.load_cert_chain(client.cert, client.key)
        return context

    def post(self, body: Any, *, client: Issued | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        with httpx.Client(verify=self.context(client), timeout=30) as http:
            return http.post(self.url, json=body, headers=headers or {})


@pytest.fixture(scope="module")
def tls(tmp_path_factory, artifacts) -> Iterator[TlsServed]:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("mtls")
    ca, other = ThrowawayCA(root, "trusted"), ThrowawayCA(root, "rogue")
    server = ca.issue("server", [(NameOID.COMMON_NAME, "127.0.0.1")], server=True)
    billing = ca.issue("billing", [(NameOID.COMMON_NAME, "billing"), (NameOID.ORGANIZATION_NAME, "Example")], server=False)
    stranger = ca.issue("stranger", [(NameOID.COMMON_NAME, "stranger")], server=False)
    rogue = other.issue("rogue", [(NameOID.COMMON_NAME, "billing"), (NameOID.ORGANIZATION_NAME, "Example")], server=False)
    credentials = root / "credentials.yaml"
    credentials.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_sha256: {token_sha256(OPS)}}}
  - {{name: billing, origin: peer, trust: [internal], tls_subject: "O=Example,CN=billing"}}
""")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 20})
    with serving(capsule, root / "state", "--credentials", str(credentials), "--tls-cert", str(server.cert),
                 "--tls-key", str(server.key), "--tls-client-ca", str(ca.pem)) as served:
        yield TlsServed(served, served.url.replace("http://", "https://"), ca, billing, stranger, rogue)


def _send(text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message(text)}}


def _settled(tls: TlsServed, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        task = tls.post({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}},
                        headers=bearer(OPS)).json()["result"]
        if task["status"]["state"] == "completed":
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.05)


def test_the_card_over_tls_offers_a_bearer_token_or_a_client_certificate(tls: TlsServed) -> None:
    with httpx.Client(verify=tls.context(None), timeout=10) as http:
        card = http.get(tls.url + ".well-known/agent-card.json").json()
    assert card["url"] == tls.url
    assert card["securitySchemes"]["mtls"]["type"] == "mutualTLS" and "mtlsSecurityScheme" in card["securitySchemes"]["mtls"]
    assert card["security"] == [{"bearer": []}, {"mtls": []}]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}, {"schemes": {"mtls": {"list": []}}}]


def test_a_client_certificate_is_the_credential_of_the_principal_its_subject_names(tls: TlsServed) -> None:
    task = tls.post(_send("by certificate"), client=tls.billing).json()["result"]
    assert _settled(tls, task["id"])["status"]["response"] == "answer: by certificate"
    events = tls.served.all_events()
    start = next(e for e in events if e["event_type"] == "task_start" and e["task_id"] == task["id"])
    received = next(e for e in events if e["event_type"] == "a2a_task_received" and e["task_id"] == task["id"])
    assert (start["origin"], start["trust"], received["principal"]) == ("peer", "internal", "billing")
    widened = tls.post(_send("more"), client=tls.billing, headers={"x-murmur-task-trust": "operator"})
    assert widened.status_code == 403 and widened.json()["error"]["code"] == -32031


def test_a_bearer_token_still_works_over_tls_without_a_certificate(tls: TlsServed) -> None:
    task = tls.post(_send("by token"), headers=bearer(OPS)).json()["result"]
    assert _settled(tls, task["id"])["status"]["response"] == "answer: by token"


def test_no_certificate_and_no_token_or_an_unknown_subject_is_refused_401(tls: TlsServed) -> None:
    before = recorded(tls.served)
    bare = tls.post(_send("anonymous"))
    assert bare.status_code == 401
    assert "a credential is required: send 'Authorization: Bearer <token>' or a client certificate" in bare.text
    stranger = tls.post(_send("stranger"), client=tls.stranger)
    assert stranger.status_code == 401
    assert stranger.json()["error"]["message"] == "Unauthenticated: client certificate 'CN=stranger' names no credential"
    assert recorded(tls.served) == before


def test_a_certificate_from_another_ca_fails_the_handshake(tls: TlsServed) -> None:
    before = recorded(tls.served)
    with pytest.raises(httpx.HTTPError):
        tls.post(_send("rogue"), client=tls.rogue)
    assert recorded(tls.served) == before
    # and plain HTTP to a TLS port gets nowhere: no answer, the connection closed (an EOF) or, as
    # the server's TLS layer drops it, reset; never a response (raise_for_status would say so)
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        httpx.post(tls.served.url, json=_send("plain"), timeout=5).raise_for_status()


@pytest.mark.anyio
async def test_the_a2a_sdk_client_authenticates_by_certificate(tls: TlsServed) -> None:
    async with httpx.AsyncClient(verify=tls.context(tls.billing)) as http:
        client = await create_client(tls.url, ClientConfig(httpx_client=http, streaming=False))
        request = pb.SendMessageRequest(message=new_text_message("sdk over mtls", role=pb.Role.ROLE_USER))
        responses = [r async for r in client.send_message(request)]
        assert get_message_text(responses[0].task.status.message) == "answer: sdk over mtls"
        await client.close()
