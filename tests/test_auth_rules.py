"""The pure rules of authentication: token digests, the principal a credential proves, narrowing,
who may answer a task, the credentials file, and which binds need a credential."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from murmurd.a2a.http.auth import tokens
from murmurd.a2a.http.auth.binding import UnsafeServe, check_serve, is_loopback
from murmurd.a2a.http.auth.config import AuthConfig, CredentialsError, client_token, load_auth, parse_credentials
from murmurd.a2a.peers.outbound import peer_key
from murmurd.a2a.http.auth.principal import (ANONYMOUS_OPERATOR, Principal, TaskIdentity, Widening,
                                        at_least_as_trusted, narrow)
from murmurd.a2a.http.auth.tls import TlsFiles, parse_subject
from murmurd.a2a.http.auth.verify import Unauthenticated, authenticate

NOW = datetime(2026, 6, 1, tzinfo=UTC)
OPS_TOKEN = "ops-" + "o" * 40
PARTNER_TOKEN = "partner-" + "p" * 40


def _config(extra: str = "", env: dict[str, str] | None = None, base: Path = Path("/nonexistent")) -> AuthConfig:
    text = f"""
credentials:
  - name: ops
    origin: operator
    token_sha256: {hashlib.sha256(OPS_TOKEN.encode()).hexdigest()}
  - name: partner
    origin: peer
    trust: [partner, internal]
    token_env: PARTNER_TOKEN
{extra}
"""
    return parse_credentials(text, base=base, env={"PARTNER_TOKEN": PARTNER_TOKEN, **(env or {})})


_CONFIG = _config()


# -- constant-time comparison ---------------------------------------------------------------------

def test_verification_compares_fixed_length_digests_with_compare_digest_against_every_credential(monkeypatch) -> None:
    config = _config(f"""
  - name: third
    origin: peer
    trust: [x]
    token_sha256: {"ab" * 32}
""")
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    for presented in ("x" * 16, OPS_TOKEN, OPS_TOKEN[:-1], "y" * 4000):
        calls.clear()
        try:
            authenticate(config, f"Bearer {presented}", None, NOW)
        except Unauthenticated:
            pass
        # every configured digest is compared (no early exit on a match), always 32 bytes to 32 bytes
        assert len(calls) == 3
        assert all(isinstance(a, bytes) and len(a) == 32 and len(b) == 32 for a, b in calls)
        assert calls[0][0] == hashlib.sha256(presented.encode()).digest()
    assert authenticate(config, f"Bearer {OPS_TOKEN}", None, NOW).name == "ops"


def test_digests_of_another_length_are_refused_rather_than_compared() -> None:
    with pytest.raises(ValueError):
        tokens.digests_equal(b"short", hashlib.sha256(b"x").digest())
    assert tokens.digests_equal(hashlib.sha256(b"x").digest(), hashlib.sha256(b"x").digest())


# -- which principal a request proves --------------------------------------------------------------

def test_no_credential_configured_makes_every_caller_the_anonymous_operator() -> None:
    assert authenticate(AuthConfig(), None, None, NOW) is ANONYMOUS_OPERATOR
    assert authenticate(AuthConfig(), "garbage", None, NOW) is ANONYMOUS_OPERATOR


@pytest.mark.parametrize("header, reason", [
    (None, "a credential is required"),
    ("", "malformed"),
    ("Bearer", "malformed"),
    ("Bearer   ", "malformed"),
    ("Basic b3BzOnNlY3JldA==", "malformed"),
    ("Bearer two words", "malformed"),
    ("Bearer " + "a" * 5000, "malformed"),
    ("Bearer caf\u00e9-token-1234567890", "malformed"),
    ("Bearer " + "z" * 40, "unknown bearer token"),
])
def test_missing_malformed_and_unknown_credentials_are_refused(header: str | None, reason: str) -> None:
    with pytest.raises(Unauthenticated, match=reason):
        authenticate(_config(), header, None, NOW)


def test_expired_and_revoked_credentials_are_refused() -> None:
    config = _config(f"""
  - name: old
    origin: peer
    trust: [partner]
    token_sha256: {hashlib.sha256(b"old-token-0123456789").hexdigest()}
    expires: 2026-05-01T00:00:00Z
  - name: gone
    origin: operator
    token_sha256: {hashlib.sha256(b"gone-token-0123456789").hexdigest()}
    revoked: true
""")
    with pytest.raises(Unauthenticated, match="'old' expired at 2026-05-01"):
        authenticate(config, "Bearer old-token-0123456789", None, NOW)
    assert authenticate(config, "Bearer old-token-0123456789", None, NOW - timedelta(days=40)).name == "old"
    with pytest.raises(Unauthenticated, match="'gone' is revoked"):
        authenticate(config, "Bearer gone-token-0123456789", None, NOW)


def test_a_client_certificate_names_a_principal_unless_a_bearer_header_is_sent() -> None:
    config = _config("""
  - name: billing
    origin: peer
    trust: [internal]
    tls_subject: CN=billing, O=Example
""")
    assert authenticate(config, None, frozenset({("O", "Example"), ("CN", "billing")}), NOW).name == "billing"
    with pytest.raises(Unauthenticated, match="names no credential"):
        authenticate(config, None, frozenset({("CN", "stranger")}), NOW)
    with pytest.raises(Unauthenticated, match="unknown bearer token"):  # the header decides, not the cert
        authenticate(config, "Bearer " + "q" * 20, frozenset({("O", "Example"), ("CN", "billing")}), NOW)


@settings(max_examples=300, deadline=None)
@given(header=st.one_of(st.none(), st.text(max_size=300), st.text(max_size=50).map(lambda t: "Bearer " + t),
                        st.binary(max_size=100).map(lambda b: b.decode("latin-1"))),
       origin=st.one_of(st.none(), st.text(max_size=20)), trust=st.one_of(st.none(), st.text(max_size=40)))
def test_any_header_is_either_a_principal_a_401_or_a_403_never_anything_else(header, origin, trust) -> None:
    config = _CONFIG
    try:
        principal = authenticate(config, header, None, NOW)
    except Unauthenticated as exc:
        assert OPS_TOKEN not in str(exc) and PARTNER_TOKEN not in str(exc)
        return
    try:
        identity = narrow(principal, origin, trust)
    except Widening:
        return
    assert identity.origin in ("operator", "peer")


# -- narrowing ------------------------------------------------------------------------------------

OPS = Principal("ops", "operator")
PARTNER = Principal("partner", "peer", ("partner", "internal"))
LOW = Principal("low", "peer", ("partner",))


@pytest.mark.parametrize("principal, origin, trust, expected", [
    # the anonymous operator: exactly the header rules from before authentication
    (ANONYMOUS_OPERATOR, None, None, TaskIdentity("operator", "operator")),
    (ANONYMOUS_OPERATOR, None, "sandboxed", TaskIdentity("operator", "operator")),
    (ANONYMOUS_OPERATOR, "peer", "sandboxed", TaskIdentity("peer", "sandboxed")),
    (ANONYMOUS_OPERATOR, "peer", "ROOT; drop", TaskIdentity("peer", "untrusted")),
    (ANONYMOUS_OPERATOR, "peer", None, TaskIdentity("peer", "untrusted")),
    (ANONYMOUS_OPERATOR, "nonsense", None, TaskIdentity("operator", "operator")),
    # an operator credential may narrow to any peer class
    (OPS, "operator", None, TaskIdentity("operator", "operator")),
    (OPS, "peer", "anything", TaskIdentity("peer", "anything")),
    # a peer credential: its own origin, its default class, the classes it lists, untrusted
    (PARTNER, None, None, TaskIdentity("peer", "partner")),
    (PARTNER, "peer", None, TaskIdentity("peer", "partner")),
    (PARTNER, None, "internal", TaskIdentity("peer", "internal")),
    (PARTNER, "PEER", " Internal ", TaskIdentity("peer", "internal")),
    (PARTNER, "peer", "untrusted", TaskIdentity("peer", "untrusted")),
    (PARTNER, "peer", "not a class!", TaskIdentity("peer", "untrusted")),
])
def test_headers_narrow_within_the_credential(principal, origin, trust, expected) -> None:
    assert narrow(principal, origin, trust) == expected


@pytest.mark.parametrize("principal, origin, trust, message", [
    (PARTNER, "operator", None, "cannot send operator tasks"),
    (PARTNER, "peer", "operator", "may assert trust partner, internal, untrusted; not 'operator'"),
    (LOW, None, "internal", "not 'internal'"),
])
def test_headers_never_widen(principal, origin, trust, message) -> None:
    with pytest.raises(Widening, match=message):
        narrow(principal, origin, trust)


@pytest.mark.parametrize("replier, creator, allowed", [
    (OPS, PARTNER, True), (OPS, None, True), (ANONYMOUS_OPERATOR, OPS, True),
    (PARTNER, PARTNER, True), (PARTNER, LOW, True),
    (LOW, PARTNER, False), (PARTNER, OPS, False), (PARTNER, None, False),
])
def test_who_may_answer_a_task(replier, creator, allowed) -> None:
    assert at_least_as_trusted(replier, creator) is allowed


# -- the credentials file -----------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    ("  - {name: ops, origin: operator, token_sha256: " + "a" * 64 + "}", "'ops' is used twice"),
    ("  - {name: p2, origin: peer, token_sha256: " + "a" * 64 + "}", "lists the trust classes"),
    ("  - {name: o2, origin: operator, trust: [x], token_sha256: " + "a" * 64 + "}", "leave trust out"),
    ("  - {name: t, origin: operator, token_sha256: " + "a" * 64 + ", token_env: X}", "at most one of"),
    ("  - {name: t, origin: operator}", "or a tls_subject"),
    ("  - {name: t, origin: operator, token_sha256: abc}", "64 hex digits"),
    ("  - {name: t, origin: operator, tls_subject: billing}", "ATTR=value"),
    ("  - {name: t, origin: root, token_sha256: " + "a" * 64 + "}", "origin"),
    ("  - {name: t, origin: operator, token_sha56: " + "a" * 64 + "}", "token_sha56"),
    ("  - {name: t, origin: peer, trust: [BAD], token_sha256: " + "a" * 64 + "}", "must match"),
    ("  - {name: t, origin: operator, token_env: UNSET_VAR_FOR_TEST}", "UNSET_VAR_FOR_TEST is not set"),
    ("  - {name: t, origin: operator, token_env: SHORT}", "at least 16 characters"),
    ("  - {name: t, origin: operator, token_file: missing-token}", "cannot read token file"),
    ("  - {name: t, origin: peer, trust: [x], token_sha256: " + "a" * 64 + ", expires: 2027-01-01T00:00:00}",
     "timezone"),
])
def test_a_bad_credentials_file_is_refused_naming_the_problem(extra: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=message):
        _config(extra, env={"SHORT": "abc"}, base=tmp_path)


def test_tokens_load_from_files_and_the_environment_and_are_kept_only_hashed(tmp_path: Path) -> None:
    (tmp_path / "ops.token").write_text(OPS_TOKEN + "\n")
    config = parse_credentials("""
credentials:
  - {name: ops, origin: operator, token_file: ops.token}
  - {name: partner, origin: peer, trust: [partner], token_env: PT}
peers:
  - {url: "https://billing.example:8443/a2a", token_env: PT}
""", base=tmp_path, env={"PT": PARTNER_TOKEN})
    assert authenticate(config, f"Bearer {OPS_TOKEN}", None, NOW).name == "ops"
    assert authenticate(config, f"Bearer {PARTNER_TOKEN}", None, NOW).name == "partner"
    assert OPS_TOKEN not in repr(config.credentials) and PARTNER_TOKEN not in repr(config.credentials)
    assert config.peers.for_url("https://Billing.example:8443/") == PARTNER_TOKEN
    assert config.peers.for_url("http://billing.example:8443/") is None  # another scheme
    assert config.peers.for_url("https://billing.example/") is None  # another port


def test_token_file_and_environment_shortcuts(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(OPS_TOKEN)
    assert not load_auth(None, None, {}).enabled
    by_file = load_auth(None, tmp_path / "t", {})
    assert authenticate(by_file, f"Bearer {OPS_TOKEN}", None, NOW).origin == "operator"
    by_env = load_auth(None, None, {"MURMUR_TOKEN": OPS_TOKEN})
    assert authenticate(by_env, f"Bearer {OPS_TOKEN}", None, NOW).name == "operator"
    assert client_token(None, {"MURMUR_TOKEN_FILE": str(tmp_path / "t")}) == OPS_TOKEN
    assert client_token(None, {}) is None
    with pytest.raises(CredentialsError, match="cannot read token file"):
        load_auth(None, tmp_path / "absent", {})


def test_peer_urls_match_by_scheme_host_and_port() -> None:
    assert peer_key("http://127.0.0.1:8080/x") == ("http", "127.0.0.1", 8080)
    assert peer_key("https://h.example") == ("https", "h.example", 443)
    assert peer_key("ftp://h.example") is None and peer_key("http://h:99999/") is None


def test_tls_subjects_parse_order_free() -> None:
    assert parse_subject("CN=a,O=b") == parse_subject(" o=b , cn=a ")
    with pytest.raises(ValueError):
        parse_subject("CN=a+UID=b")


# -- which binds need a credential --------------------------------------------------------------

@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_public_bind_needs_a_credential_or_insecure() -> None:
    with pytest.raises(UnsafeServe, match="--insecure"):
        check_serve("0.0.0.0", AuthConfig(), None, insecure=False)
    check_serve("0.0.0.0", AuthConfig(), None, insecure=True)
    check_serve("127.0.0.1", AuthConfig(), None, insecure=False)
    check_serve("0.0.0.0", _config(), None, insecure=False)
    subjects = _config("  - {name: m, origin: peer, trust: [x], tls_subject: CN=m}")
    with pytest.raises(UnsafeServe, match="--tls-client-ca"):
        check_serve("127.0.0.1", subjects, TlsFiles(Path("c"), Path("k")), insecure=False)


def test_the_exempt_paths_are_the_card_and_the_probes_only() -> None:
    from murmurd.a2a.http.auth.edge import EXEMPT_PATHS
    from murmurd.a2a.http.health import HEALTH_PATH, METRICS_PATH, READY_PATH

    assert EXEMPT_PATHS == {"/.well-known/agent-card.json", "/.well-known/agent.json", HEALTH_PATH, READY_PATH}
    assert METRICS_PATH not in EXEMPT_PATHS
    # the console's static files are open too, by GET/HEAD only (edge._exempt; test_auth_serve)
