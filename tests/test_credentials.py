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
    # personal access tokens, JWTs, authorization, glued connection strings
    "GH_PAT", "GITLAB_PAT", "JWT", "CI_JOB_JWT", "CI_JOB_JWT_V2", "VAULT_JWT", "HTTP_AUTHORIZATION",
    "PROXYAUTHORIZATION", "AZURE_STORAGE_CONNECTIONSTRING", "SERVICEBUS_CONNECTIONSTRING",
]

ORDINARY_NAMES = [
    "PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "HOME", "SHELL", "EDITOR", "PWD", "OLDPWD",
    "HOSTNAME", "SHLVL", "LS_COLORS", "DISPLAY", "AWS_REGION", "AWS_DEFAULT_REGION", "PYTHONPATH", "MONKEY_MODE",
    "KEYBOARD_LAYOUT", "PASSENGER_APP_ENV", "API_URL", "HOMEPAGE_URL", "PIP_INDEX_URL", "NO_PROXY",
    "SESSION_MANAGER", "XDG_RUNTIME_DIR", "GITHUB_REPOSITORY", "DB_NAME", "REDIS_HOST",
    # near the new words, and not them
    "PATTERN", "COMPAT_MODE", "PATCH_LEVEL", "SLACK_HOOK_URL", "TEAMS_HOOK", "GIT_HOOKS_DIR", "HTTP_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS", "JWKS_URL", "CONNECTION_TIMEOUT",
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
    # token shapes anywhere in the value, not only at its start
    "authorization=Bearer abc123def456ghi",  # OTEL_EXPORTER_OTLP_HEADERS
    "Bearer ghp_0123456789abcdef0123",
    "token ghp_0123456789abcdef0123",
    "x-api-key=1,key2=sk-proj-0123456789abcdefghijklmn",
    "Authorization: token abc",  # HTTP_HEADERS
    "Proxy-Authorization=Basic dXNlcjpwYXNz",
    "Basic dXNlcjpwYXNzd29yZA==",
    # Azure connection strings and SAS tokens
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=bXlrZXk=;EndpointSuffix=core.windows.net",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=abc=",
    "SharedAccessSignature=sv=2020-08-04&sig=abc%3D",
    "https://acct.blob.core.windows.net/c/b?sv=2020-08-04&se=2030-01-01&sig=abcDEF%3D",
    "sv=2020-08-04&ss=b&sig=abc",
    # Stripe, Google, Slack app tokens
    "sk_live_0123456789abcdefABCDEF", "rk_live_0123456789abcdefABCDEF", "sk_test_0123456789abcdef",
    "AIzaSyA0123456789abcdefghijklmnopqrstuv",
    "xapp-1-A0123456789-0123456789-abcdef",
    "glpat-0123456789abcdefghij",
    # webhooks
    "https://hooks.slack.com/services/T000/B000/XXXXXXXX",
    "https://acme.webhook.office.com/webhookb2/abc@def/IncomingWebhook/123/456",
    "https://outlook.office.com/webhook/abc",
    "https://discord.com/api/webhooks/123/abc",
    # secrets in a URL's query
    "https://api.example.com/v1/items?api_key=abc123",
    "https://api.example.com/v1/items?page=2&token=abc123",
    "https://maps.example.com/api?key=AIzaShort",
    "wss://stream.example.com/?access_token=abc",
    # JWTs
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "jwt=eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJnaXRsYWIifQ.",
]

ORDINARY_VALUES = [
    "", "/usr/local/bin:/usr/bin:/bin", "C.UTF-8", "xterm-256color", "https://example.com/path?q=a@b",
    "https://pypi.org/simple", "user@example.com", "mailto:someone@example.com", "/home/tester", "sk-short",
    "postgres://db.internal:5432/app",
    # near the new shapes, and not them
    "https://example.com/search?page=2&sort=asc", "https://example.com/?q=token", "https://hooks.example.com/x",
    "https://webhook.site.example.org/", "Basic English", "a basic setup", "Bearer of good news",
    "task-0123456789abcdefghijklmnop", "risk-0123456789abcdefghijklmnop", "desk_live_0123456789abcdef",
    "eyJhbGciOiJIUzI1NiJ9", "AccountName=acct;EndpointSuffix=core.windows.net", "signature", "x-tenant=acme",
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


HEADER_VARIABLES = [
    # (name, value, credential?): a *_HEADERS value naming a credential header is a credential
    ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=abc", True),
    ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,authorization=opaque", True),
    ("HTTP_HEADERS", "Accept: text/html\nX-Auth-Token: abc", True),
    ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "dd-api-key=abc", True),
    ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,x-region=eu", False),
    ("HTTP_HEADERS", "Accept: text/html", False),
    ("SOMETHING", "x-api-key=abc", False),  # only a *_HEADERS name makes header names count
]


@pytest.mark.parametrize(("name", "value", "expected"), HEADER_VARIABLES)
def test_header_variables(name: str, value: str, expected: bool) -> None:
    assert looks_like_credential(name, value) is expected


def test_ordinary_names_pass_with_ordinary_values() -> None:
    ordinary = {"PATH": "/usr/local/bin:/usr/bin", "LANG": "C.UTF-8", "HOME": "/home/u", "TERM": "xterm-256color",
                "PWD": "/srv/app", "SHELL": "/bin/bash", "EDITOR": "vi", "PYTHONPATH": "/srv/app:/srv/lib",
                "SLACK_HOOK_URL": "https://example.com/notify", "TEAMS_HOOK": "disabled",
                "PIP_INDEX_URL": "https://pypi.org/simple?format=json"}
    assert [name for name, value in ordinary.items() if looks_like_credential(name, value)] == []


def test_without_a_value_only_the_name_decides() -> None:
    assert not looks_like_credential("HTTP_PROXY")
    assert looks_like_credential("HTTP_PROXY", "http://u:p@proxy:3128")


def test_a_star_env_allow_passes_no_credential_to_a_guest() -> None:
    host_env = {
        "LANG": "C.UTF-8", "PGPASSWORD": "pw", "MYSQL_PWD": "pw", "DATABASE_URL": "postgres://h/db",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X", "SENTRY_DSN": "https://k@o1.ingest.sentry.io/1",
        "HTTPS_PROXY": "http://u:p@proxy:3128", "PWD": "/srv", "EDITOR": "vi",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer abc123def456", "GH_PAT": "x", "CI_JOB_JWT": "x",
        "AZURE_STORAGE_CONNECTIONSTRING": "x", "SLACK_HOOK_URL": "https://hooks.slack.com/services/T/B/X",
        "STRIPE": "sk_live_0123456789abcdef", "HTTP_HEADERS": "Authorization: token abc",
    }
    assert env_names(["*"], [], host_env) == ("EDITOR", "LANG", "PWD")
