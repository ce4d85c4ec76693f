"""The credentials file (`murmurd serve --credentials FILE`): who may call, and what murmurd
presents to its peers. YAML (or JSON, which is YAML), validated by pydantic; see docs/security.md.

    credentials:
      - name: ops                    # names the principal in the task store and trace
        origin: operator             # operator | peer
        token_sha256: 5e88...        # or token_file: PATH, or token_env: VAR (hashed at load)
      - name: billing
        origin: peer
        trust: [internal, partner]   # the classes it may assert; the first is its default
        token_env: BILLING_TOKEN
        expires: 2027-01-01T00:00:00Z
        revoked: false
      - name: billing-mtls
        origin: peer
        trust: [internal]
        tls_subject: CN=billing,O=Example   # a client certificate (--tls-client-ca) with this subject
    peers:                           # outbound murmur:message/send
      - url: https://billing.example:8443
        token_file: /run/secrets/billing-token

Tokens murmurd verifies are kept only as SHA-256 digests; tokens it presents to peers are read
into memory as they must be sent. A relative `token_file` is relative to the credentials file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from murmurd.a2a.peers.outbound import PeerTokens, peer_key
from murmurd.a2a.http.auth.principal import OPERATOR, TRUST_CLASS, Principal
from murmurd.a2a.http.auth.tls import Subject, parse_subject
from murmurd.a2a.http.auth.tokens import digest_from_hex, token_digest

MAX_FILE_BYTES = 1024 * 1024
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4096
OPERATOR_TOKEN_NAME = "operator"  # the principal `--token-file` configures


class CredentialsError(ValueError):
    """The credentials file, a token file or a token variable is unusable; the message says why."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CredentialEntry(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    origin: Literal["operator", "peer"]
    trust: list[str] = Field(default_factory=list)
    token_sha256: str | None = None
    token_file: str | None = None
    token_env: str | None = None
    tls_subject: str | None = None
    expires: AwareDatetime | None = None
    revoked: bool = False

    @field_validator("trust")
    @classmethod
    def _classes(cls, value: list[str]) -> list[str]:
        for trust in value:
            if not TRUST_CLASS.match(trust):
                raise ValueError(f"trust class {trust!r} must match [a-z][a-z0-9_-]{{0,31}}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CredentialEntry:
        sources = [s for s in (self.token_sha256, self.token_file, self.token_env) if s is not None]
        if len(sources) > 1:
            raise ValueError("give at most one of token_sha256, token_file, token_env")
        if not sources and self.tls_subject is None:
            raise ValueError("give a token (token_sha256, token_file or token_env) or a tls_subject")
        if self.origin == "peer" and not self.trust:
            raise ValueError("a peer credential lists the trust classes it may assert (trust: [...])")
        if self.origin == "operator" and self.trust:
            raise ValueError("an operator credential may assert any trust class; leave trust out")
        if self.token_sha256 is not None:
            digest_from_hex(self.token_sha256)
        if self.tls_subject is not None:
            parse_subject(self.tls_subject)
        return self


class PeerEntry(_Model):
    url: str
    token_file: str | None = None
    token_env: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"peer url {value!r} must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> PeerEntry:
        if (self.token_file is None) == (self.token_env is None):
            raise ValueError("give exactly one of token_file, token_env")
        return self


class CredentialsFile(_Model):
    credentials: list[CredentialEntry] = Field(default_factory=list)
    peers: list[PeerEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> CredentialsFile:
        names = [c.name for c in self.credentials]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"credential name {duplicate!r} is used twice")
        return self


@dataclass(frozen=True)
class Credential:
    """One accepted credential: the principal it proves and how it is presented."""

    principal: Principal
    digest: bytes | None = None  # SHA-256 of the bearer token
    tls_subject: Subject | None = None
    expires: datetime | None = None
    revoked: bool = False

    def refusal(self, now: datetime) -> str | None:
        """Why this credential is not accepted now, or None."""
        if self.revoked:
            return f"credential {self.principal.name!r} is revoked"
        if self.expires is not None and now >= self.expires:
            return f"credential {self.principal.name!r} expired at {self.expires.isoformat()}"
        return None


@dataclass(frozen=True)
class AuthConfig:
    credentials: tuple[Credential, ...] = ()
    peers: PeerTokens = field(default_factory=PeerTokens)

    @property
    def enabled(self) -> bool:
        """Once any credential is configured, every request but the exempt ones needs one."""
        return bool(self.credentials)

    @property
    def uses_tls_subjects(self) -> bool:
        return any(c.tls_subject is not None for c in self.credentials)

    def principal_named(self, name: str | None) -> Principal | None:
        return next((c.principal for c in self.credentials if name is not None and c.principal.name == name), None)

    def credential_named(self, name: str) -> Credential | None:
        return next((c for c in self.credentials if name and c.principal.name == name), None)

    def with_operator_token(self, token: str) -> AuthConfig:
        """Add the operator credential `--token-file` gives."""
        if self.principal_named(OPERATOR_TOKEN_NAME) is not None:
            raise CredentialsError(f"--token-file adds a credential named {OPERATOR_TOKEN_NAME!r}; "
                                   "the credentials file already has one")
        added = Credential(Principal(OPERATOR_TOKEN_NAME, OPERATOR), token_digest(_checked_token(token, "--token-file")))
        return AuthConfig((*self.credentials, added), self.peers)


def read_token_file(path: Path, what: str) -> str:
    """A token from a file (surrounding whitespace dropped); CredentialsError names the file."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_CHARS + 2)
    except OSError as exc:
        raise CredentialsError(f"{what}: cannot read token file {path}: {exc.strerror}") from None
    try:
        return _checked_token(raw.decode("utf-8"), f"{what}: token file {path}")
    except UnicodeDecodeError:
        raise CredentialsError(f"{what}: token file {path} is not UTF-8 text") from None


def _checked_token(token: str, what: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise CredentialsError(f"{what}: a token must be at least {MIN_TOKEN_CHARS} characters")
    if len(token) > MAX_TOKEN_CHARS:
        raise CredentialsError(f"{what}: a token must be at most {MAX_TOKEN_CHARS} characters")
    if any(c.isspace() or not c.isprintable() or not c.isascii() for c in token):
        raise CredentialsError(f"{what}: a token is printable ASCII without spaces")
    return token


def _token(entry: CredentialEntry | PeerEntry, base: Path, env: Mapping[str, str], what: str) -> str:
    if entry.token_file is not None:
        return read_token_file(base / entry.token_file, what)
    assert entry.token_env is not None
    value = env.get(entry.token_env)
    if value is None:
        raise CredentialsError(f"{what}: environment variable {entry.token_env} is not set")
    return _checked_token(value, f"{what}: ${entry.token_env}")


def _credential(entry: CredentialEntry, base: Path, env: Mapping[str, str]) -> Credential:
    what = f"credential {entry.name!r}"
    digest = None
    if entry.token_sha256 is not None:
        digest = digest_from_hex(entry.token_sha256)
    elif entry.token_file is not None or entry.token_env is not None:
        digest = token_digest(_token(entry, base, env, what))
    return Credential(
        Principal(entry.name, entry.origin, tuple(dict.fromkeys(entry.trust))), digest,
        parse_subject(entry.tls_subject) if entry.tls_subject is not None else None,
        entry.expires, entry.revoked,
    )


def parse_credentials(text: str, *, base: Path, env: Mapping[str, str], source: str = "credentials") -> AuthConfig:
    """The config a credentials document describes; CredentialsError names each problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CredentialsError(f"{source}: not valid YAML: {exc}") from None
    try:
        parsed = CredentialsFile.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise CredentialsError(f"{source}: {problems}") from None
    credentials = tuple(_credential(entry, base, env) for entry in parsed.credentials)
    peers = PeerTokens({peer_key(p.url): _token(p, base, env, f"peer {p.url}") for p in parsed.peers})
    return AuthConfig(credentials, peers)


def load_credentials(path: Path, env: Mapping[str, str] | None = None) -> AuthConfig:
    """Read and parse a credentials file (at most 1 MiB)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CredentialsError(f"cannot read credentials file {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise CredentialsError(f"credentials file {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError(f"credentials file {path} is not UTF-8 text") from None
    return parse_credentials(text, base=path.parent, env=os.environ if env is None else env, source=str(path))


CREDENTIALS_ENV = "MURMUR_CREDENTIALS_FILE"  # the credentials file, when --credentials is not given
TOKEN_FILE_ENV = "MURMUR_TOKEN_FILE"  # a file holding the operator token (--token-file)
TOKEN_ENV = "MURMUR_TOKEN"  # the operator token itself


def load_auth(credentials: Path | None, token_file: Path | None, env: Mapping[str, str]) -> AuthConfig:
    """What `murmurd serve` accepts: the credentials file (`--credentials` or
    $MURMUR_CREDENTIALS_FILE) plus one operator token (`--token-file`, $MURMUR_TOKEN_FILE or
    $MURMUR_TOKEN). `env` is the process environment, never a capsule's `.env`: a capsule must
    not choose the credentials that guard it."""
    path = credentials or (Path(env[CREDENTIALS_ENV]) if env.get(CREDENTIALS_ENV) else None)
    config = load_credentials(path, env) if path is not None else AuthConfig()
    token_path = token_file or (Path(env[TOKEN_FILE_ENV]) if env.get(TOKEN_FILE_ENV) else None)
    if token_path is not None:
        return config.with_operator_token(read_token_file(token_path, "--token-file"))
    if env.get(TOKEN_ENV):
        return config.with_operator_token(env[TOKEN_ENV])
    return config


def client_token(token_file: Path | None, env: Mapping[str, str]) -> str | None:
    """The token `murmurd send`/`watch` present: `--token-file`, $MURMUR_TOKEN_FILE or $MURMUR_TOKEN."""
    token_path = token_file or (Path(env[TOKEN_FILE_ENV]) if env.get(TOKEN_FILE_ENV) else None)
    if token_path is not None:
        return read_token_file(token_path, "--token-file")
    if env.get(TOKEN_ENV):
        return _checked_token(env[TOKEN_ENV], f"${TOKEN_ENV}")
    return None
