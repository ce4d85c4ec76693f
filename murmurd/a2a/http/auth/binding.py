"""Which addresses murmurd may serve without a credential (pure)."""

from __future__ import annotations

import ipaddress

from murmurd.a2a.http.auth.config import AuthConfig
from murmurd.a2a.http.auth.tls import TlsFiles


class UnsafeServe(ValueError):
    """`murmurd serve` would expose the capsule unsafely, or its TLS/credential options disagree;
    the message says what to do (the CLI exits 2)."""


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1); any other name or address,
    including the wildcards, may be reachable from elsewhere."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_serve(host: str, auth: AuthConfig, tls: TlsFiles | None, *, insecure: bool) -> None:
    """Refuse a public bind with no credential (unless `insecure`), and options that cannot work."""
    if not auth.enabled and not insecure and not is_loopback(host):
        raise UnsafeServe(
            f"refusing to serve on {host}, which is not a loopback address, with no credential configured: "
            "anyone who reaches the port would be the operator. Give --credentials FILE or --token-file FILE "
            "(docs/security.md), bind 127.0.0.1, or pass --insecure to serve without authentication anyway")
    if auth.uses_tls_subjects and (tls is None or tls.client_ca is None):
        raise UnsafeServe("a credential names a tls_subject, but client certificates are only verified with "
                          "--tls-cert, --tls-key and --tls-client-ca")
