"""TLS terminated by murmurd itself: the server context and the client certificate's subject.

With `--tls-client-ca`, a client may present a certificate signed by that CA (a certificate that
does not verify fails the handshake); one that presents none may still use a bearer token. The
verified certificate's subject names a principal through `tls_subject` in the credentials file.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Subject = frozenset[tuple[str, str]]

# ssl.getpeercert() long attribute names -> the RFC 4514 short names a config writes
_SHORT_NAMES = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID",
    "streetAddress": "STREET", "serialNumber": "SERIALNUMBER", "emailAddress": "EMAILADDRESS",
}


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None

    def server_context(self) -> ssl.SSLContext:
        """The listening socket's context; OSError/ssl.SSLError name an unreadable file."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        if self.client_ca is not None:
            context.load_verify_locations(cafile=self.client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


def parse_subject(text: str) -> Subject:
    """`CN=billing,O=Example` as a set of (attribute, value) pairs; order does not matter.
    Values may not contain commas, plus signs or escapes (ValueError)."""
    pairs = set()
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name, value = name.strip().upper(), value.strip()
        if not sep or not name or not value or "\\" in value or "+" in value:
            raise ValueError(f"tls_subject {text!r}: write it as ATTR=value pairs separated by commas, e.g. CN=billing,O=Example")
        pairs.add((name, value))
    return frozenset(pairs)


def peer_subject(transport: Any) -> Subject | None:
    """The verified client certificate's subject on a TLS connection, None without one."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()  # {} or None unless the chain verified
    if not certificate:
        return None
    return frozenset((_SHORT_NAMES.get(name, name).upper(), value)
                     for rdn in certificate.get("subject", ()) for name, value in rdn)


def subject_text(subject: Subject) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(subject))
