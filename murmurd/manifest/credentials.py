"""Which environment variables are credentials: the rule every guest and shell environment
filter applies, whatever an operator's `baseline_env` / `env.allow` globs let through (pure).

A variable is a credential when its **name** says so or its **value** shows it:

- a name word (split on anything but letters and digits) is a credential word: `KEY`, `TOKEN`,
  `SECRET`, `PASSWORD`, `PASS`, `PWD` (`MYSQL_PWD`), `AUTH`, `DSN`, `WEBHOOK`, ...;
- a name word *ends* with an unambiguous one (`PGPASSWORD`, `CLIENTSECRET`, `NPMTOKEN`);
- the name contains `CONNECTION_STRING`, or is a `*_URL` / `*_URI` naming a data store or
  broker (`DATABASE_URL`, `REDIS_URL`, `MONGODB_URI`, `CELERY_BROKER_URL`): such URLs carry
  passwords often enough that their name alone decides;
- the value holds a URL with userinfo (`scheme://user:pass@host`, `https://token@host`), so
  `HTTP_PROXY=http://u:p@proxy` is caught whatever it is called;
- the value starts like a well-known token (`ghp_`, `github_pat_`, `xoxb-`, `AKIA…`, a PEM
  private key).

`PWD` and `OLDPWD` themselves are the shell's working-directory variables, never credentials.
"""

from __future__ import annotations

import re

# A whole word of the name.
_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PWD",
    "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "DSN", "WEBHOOK", "WEBHOOKS", "COOKIE",
})
# The end of a word glued to a prefix (`PGPASSWORD`); `KEY` and `PWD` are not here (`MONKEY`, `OLDPWD`).
_SUFFIXES = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY", "WEBHOOK")
# Data stores and brokers whose `*_URL` / `*_URI` is a connection string.
_STORES = frozenset({
    "DATABASE", "DB", "REDIS", "REDISCLOUD", "MONGO", "MONGODB", "POSTGRES", "POSTGRESQL", "PG", "MYSQL",
    "MARIADB", "AMQP", "CLOUDAMQP", "RABBITMQ", "BROKER", "ELASTICSEARCH", "OPENSEARCH", "MEMCACHE",
    "MEMCACHED", "KAFKA", "NATS", "CLICKHOUSE", "SQLALCHEMY", "SMTP", "LDAP", "FTP", "SFTP",
})
# Working-directory variables a shell sets; `PWD` as a *word* elsewhere still counts (`MYSQL_PWD`).
_NOT_CREDENTIALS = frozenset({"PWD", "OLDPWD"})

_USERINFO_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")
_TOKEN_PREFIXES = re.compile(
    r"\s*(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,}|xox[abposr]-|(?:AKIA|ASIA)[A-Z0-9]{16}\b"
    r"|sk-[A-Za-z0-9_-]{20,}|glpat-|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)


def looks_like_credential(name: str, value: str | None = None) -> bool:
    """Whether a variable must never reach a guest or a shell: by its name, or its value when given."""
    return credential_name(name) or (value is not None and credential_value(value))


def credential_name(name: str) -> bool:
    """`GITHUB_TOKEN`, `PGPASSWORD`, `MYSQL_PWD`, `SENTRY_DSN`, `DATABASE_URL`, ... (not `PWD`)."""
    upper = name.upper()
    if upper in _NOT_CREDENTIALS:
        return False
    words = [word for word in re.split(r"[^A-Z0-9]+", upper) if word]
    if any(word in _WORDS or word.endswith(_SUFFIXES) for word in words):
        return True
    if "CONNECTION_STRING" in upper or "CONNSTR" in words:
        return True
    return len(words) >= 2 and words[-1] in ("URL", "URI", "URLS") and any(word in _STORES for word in words[:-1])


def credential_value(value: str) -> bool:
    """A URL with userinfo anywhere in the value, or a value shaped like a well-known token."""
    return _USERINFO_URL.search(value) is not None or _TOKEN_PREFIXES.match(value) is not None
