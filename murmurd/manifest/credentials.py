"""Which environment variables are credentials: the rule every guest and shell environment
filter applies, whatever an operator's `baseline_env` / `env.allow` globs let through (pure).

A variable is a credential when its **name** says so or its **value** shows it:

- a name word (split on anything but letters and digits) is a credential word: `KEY`, `TOKEN`,
  `SECRET`, `PASSWORD`, `PASS`, `PWD` (`MYSQL_PWD`), `AUTH`, `AUTHORIZATION`, `DSN`, `WEBHOOK`,
  `PAT` (`GH_PAT`), `JWT` (`CI_JOB_JWT`), ...;
- a name word *ends* with an unambiguous one (`PGPASSWORD`, `CLIENTSECRET`, `NPMTOKEN`,
  `AZURE_STORAGE_CONNECTIONSTRING`);
- the name contains `CONNECTION_STRING`, or is a `*_URL` / `*_URI` naming a data store or
  broker (`DATABASE_URL`, `REDIS_URL`, `MONGODB_URI`, `CELERY_BROKER_URL`): such URLs carry
  passwords often enough that their name alone decides;
- a `*_HEADERS` variable whose value names a credential header (`authorization=...`,
  `x-api-key: ...`);
- the value, anywhere in it, holds a URL with userinfo (`scheme://user:pass@host`), a secret
  query parameter (`?api_key=`, `&token=`, `sig=`), a webhook URL (Slack, Teams, Discord), an
  `Authorization:` header, a `Bearer` / `Basic` credential, an Azure `AccountKey=` /
  `SharedAccessSignature=`, a JWT (`eyJ….eyJ….`), or a well-known token shape (`ghp_`,
  `github_pat_`, `glpat-`, `xoxb-`, `xapp-`, `AKIA…`, `sk-…`, Stripe `sk_live_` / `rk_live_`,
  Google `AIza…`, a PEM private key).

Value shapes are searched anywhere, not only at the start (`authorization=Bearer ghp_…`), with
a boundary before each token prefix so ordinary words (`task-…`, `risk-…`) do not match.
`PWD` and `OLDPWD` themselves are the shell's working-directory variables, never credentials.
"""

from __future__ import annotations

import re

# A whole word of the name.
_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PWD",
    "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "AUTHORIZATION", "DSN", "WEBHOOK", "WEBHOOKS", "COOKIE",
    "PAT", "JWT", "CONNECTIONSTRING", "CONNSTR",
})
# The end of a word glued to a prefix (`PGPASSWORD`); `KEY`, `PWD`, `PAT` are not here
# (`MONKEY`, `OLDPWD`, `COMPAT`).
_SUFFIXES = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY", "WEBHOOK", "AUTHORIZATION",
             "CONNECTIONSTRING", "JWT")
# Data stores and brokers whose `*_URL` / `*_URI` is a connection string.
_STORES = frozenset({
    "DATABASE", "DB", "REDIS", "REDISCLOUD", "MONGO", "MONGODB", "POSTGRES", "POSTGRESQL", "PG", "MYSQL",
    "MARIADB", "AMQP", "CLOUDAMQP", "RABBITMQ", "BROKER", "ELASTICSEARCH", "OPENSEARCH", "MEMCACHE",
    "MEMCACHED", "KAFKA", "NATS", "CLICKHOUSE", "SQLALCHEMY", "SMTP", "LDAP", "FTP", "SFTP",
})
# Working-directory variables a shell sets; `PWD` as a *word* elsewhere still counts (`MYSQL_PWD`).
_NOT_CREDENTIALS = frozenset({"PWD", "OLDPWD"})
_HEADER_WORDS = frozenset({"HEADER", "HEADERS"})

_USERINFO_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")
# Token shapes, each after a boundary (not glued to a letter, digit, `_` or `-` before it).
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,}|glpat-[A-Za-z0-9_-]{10,}"
    r"|xox[abposre]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|sk-[A-Za-z0-9_-]{20,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"
    r"|AIza[A-Za-z0-9_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"
    r")"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
# `Bearer <token>` / `Basic <base64>`; the token must hold a digit or one of `+/=` so prose
# ("Basic authentication") passes.
_SCHEME = re.compile(r"(?i)\b(?:bearer|basic)\s+(?=[A-Za-z0-9._~+/=-]*[0-9+/=])[A-Za-z0-9._~+/=-]{8,}")
_AUTH_HEADER = re.compile(r"(?i)\b(?:proxy-)?authorization\s*[:=]\s*\S")
# Azure storage / service bus connection-string parts and SAS signatures.
_AZURE = re.compile(r"(?i)(?:^|[;?&\s])(?:AccountKey|SharedAccessKey|SharedAccessSignature|sig)=[^;&\s]")
# A secret in a URL's query: `?api_key=…`, `&access_token=…`, `?key=…`.
_SECRET_QUERY = re.compile(
    r"(?i)[?&](?:api[_-]?key|apikey|key|access[_-]?token|auth[_-]?token|id[_-]?token|refresh[_-]?token|token"
    r"|client[_-]?secret|secret|password|passwd|pwd|sig|signature|x-amz-signature|x-amz-security-token)=[^&#\s]"
)
_WEBHOOK_URL = re.compile(
    r"(?i)https?://(?:hooks\.slack\.com/|[a-z0-9.-]*webhook\.office\.com/|outlook\.office(?:365)?\.com/webhook"
    r"|(?:discord|discordapp)\.com/api/webhooks/)"
)
_VALUE_RULES = (_USERINFO_URL, _TOKENS, _SCHEME, _AUTH_HEADER, _AZURE, _SECRET_QUERY, _WEBHOOK_URL)
# One header of a `*_HEADERS` value: `name=value` or `name: value`, separated by `,`, `;` or newlines.
_HEADER_NAME = re.compile(r"(?:^|[,;\n])\s*([A-Za-z0-9_-]+)\s*[:=]")


def looks_like_credential(name: str, value: str | None = None) -> bool:
    """Whether a variable must never reach a guest or a shell: by its name, or its value when given."""
    if credential_name(name):
        return True
    return value is not None and (credential_value(value) or credential_headers(name, value))


def credential_name(name: str) -> bool:
    """`GITHUB_TOKEN`, `PGPASSWORD`, `MYSQL_PWD`, `SENTRY_DSN`, `DATABASE_URL`, `GH_PAT`, ... (not `PWD`)."""
    upper = name.upper()
    if upper in _NOT_CREDENTIALS:
        return False
    words = _words(upper)
    if any(word in _WORDS or word.endswith(_SUFFIXES) for word in words):
        return True
    if "CONNECTION_STRING" in upper:
        return True
    return len(words) >= 2 and words[-1] in ("URL", "URI", "URLS") and any(word in _STORES for word in words[:-1])


def credential_value(value: str) -> bool:
    """Anywhere in the value: a URL with userinfo or a secret query parameter, a webhook URL, an
    authorization header or scheme, an Azure key or signature, a JWT, a well-known token."""
    return any(rule.search(value) is not None for rule in _VALUE_RULES)


def credential_headers(name: str, value: str) -> bool:
    """A `*_HEADERS` variable (`OTEL_EXPORTER_OTLP_HEADERS`) naming a credential header
    (`x-api-key=…`, `authorization=…`); other headers (`x-tenant=acme`) pass."""
    if not _HEADER_WORDS.intersection(_words(name.upper())):
        return False
    return any(credential_name(header) for header in _HEADER_NAME.findall(value))


def _words(upper: str) -> list[str]:
    return [word for word in re.split(r"[^A-Z0-9]+", upper) if word]
