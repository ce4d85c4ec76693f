"""The credential rule, table-driven over names and values, and where it applies (grants)."""

from __future__ import annotations

import pytest

from murmurd.manifest.credentials import credential_name, credential_value, looks_like_credential
from murmurd.staging.grants import env_names

CREDENTIAL_NAMES = [
    # the name words the rule always had
    "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "DB_PASSWORD", "SMTP_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
    "my_secret",
    # passwords, including glued and PWD forms
    "PGPASSWORD", "MYSQL_PWD", "DB_PWD", "SMTP_PASS", "REDISCLI_AUTH", "GPG_PASSPHRASE", "ANSIBLE_VAULT_PASSWORD_FILE",
    "CLIENTSECRET", "HOMEBREW_GITHUB_API_TOKEN", "VAULT_TOKEN", "MAVEN_CREDS",
    # DSNs, webhooks, connection strings
    "SENTRY_DSN", "DATABASE_DSN", "SLACK_WEBHOOK_URL", "DISCORD_WEBHOOK", "TEAMS_WEBHOOK_URL",
    "AZURE_STORAGE_CONNECTION_STRING", "SQL_CONNSTR",
    # data-store and broker URLs: their name decides, whatever the value
    "DATABASE_URL", "REDIS_URL", "MONGODB_URI", "MONGO_URL", "POSTGRES_URL", "CELERY_BROKER_URL", "AMQP_URL",
    "RABBITMQ_URL", "ELASTICSEARCH_URL", "SQLALCHEMY_DATABASE_URI", "TEST_DATABASE_URL",
]

ORDINARY_NAMES = [
    "PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "HOME", "SHELL", "EDITOR", "PWD", "OLDPWD",
    "HOSTNAME", "SHLVL", "LS_COLORS", "DISPLAY", "AWS_REGION", "AWS_DEFAULT_REGION", "PYTHONPATH", "MONKEY_MODE",
    "KEYBOARD_LAYOUT", "PASSENGER_APP_ENV", "API_URL", "HOMEPAGE_URL", "PIP_INDEX_URL", "NO_PROXY",
    "SESSION_MANAGER", "XDG_RUNTIME_DIR", "GITHUB_REPOSITORY", "DB_NAME", "REDIS_HOST",
]

CREDENTIAL_VALUES = [
    "postgres://app:hunter2@db.internal:5432/app",
    "https://user:pass@example.com/",
    "https://ghp_abc@github.com/org/repo.git",  # a token as the user name
    "redis://:secret@cache:6379/0",
    "amqp://guest:guest@rabbit//",
    "before http://u:p@proxy:3128 after",  # anywhere in the value
    "ghp_0123456789abcdef0123",
    "github_pat_11ABCDEFG0123456789_abcdef",
    "xoxb-1234-5678-abcdef",
    "AKIAIOSFODNN7EXAMPLE",
    "sk-proj-0123456789abcdefghijklmn",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
]

ORDINARY_VALUES = [
    "", "/usr/local/bin:/usr/bin:/bin", "C.UTF-8", "xterm-256color", "https://example.com/path?q=a@b",
    "https://pypi.org/simple", "user@example.com", "mailto:someone@example.com", "/home/tester", "sk-short",
    "postgres://db.internal:5432/app",
]


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_credential_names(name: str) -> None:
    assert credential_name(name) and looks_like_credential(name)


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names(name: str) -> None:
    assert not credential_name(name) and not looks_like_credential(name, "plain")


@pytest.mark.parametrize("value", CREDENTIAL_VALUES)
def test_credential_values_under_any_name(value: str) -> None:
    assert credential_value(value)
    assert looks_like_credential("HTTP_PROXY", value) and looks_like_credential("SOMETHING", value)


@pytest.mark.parametrize("value", ORDINARY_VALUES)
def test_ordinary_values(value: str) -> None:
    assert not credential_value(value) and not looks_like_credential("SOMETHING", value)


def test_without_a_value_only_the_name_decides() -> None:
    assert not looks_like_credential("HTTP_PROXY")
    assert looks_like_credential("HTTP_PROXY", "http://u:p@proxy:3128")


def test_a_star_env_allow_passes_no_credential_to_a_guest() -> None:
    host_env = {
        "LANG": "C.UTF-8", "PGPASSWORD": "pw", "MYSQL_PWD": "pw", "DATABASE_URL": "postgres://h/db",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X", "SENTRY_DSN": "https://k@o1.ingest.sentry.io/1",
        "HTTPS_PROXY": "http://u:p@proxy:3128", "PWD": "/srv", "EDITOR": "vi",
    }
    assert env_names(["*"], [], host_env) == ("EDITOR", "LANG", "PWD")
