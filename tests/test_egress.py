"""Per-origin egress: what a `network.allow` entry lists, how an artifact narrows it, and a real
session in which a tool granted less than its capsule reaches its origin, is refused the other
one (no TCP connection ever accepted there) and the refusal is traced.

The host-level behaviour (every refused form, the no-grant case) is in `test_host_network.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXAMPLES, FIXTURES
from loopkit import driver_capsule, local, run_tasks, stage, trace_events
from murmurd.contract import Role
from murmurd.host import HOOK_LIMITS, CallGrant
from murmurd.host.egress import EgressPolicy, Origin, entry_origins, request_origin, url_origin
from murmurd.host.hook_values import HookOutput
from murmurd.host.http_policy import DENIED
from murmurd.manifest.validate import validate_manifest
from murmurd.staging.grants import compute_grants, network_allows
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule
from test_hook_host import SESSION
from test_host_network import Denials, Local, _no_connection, _serve

# -- what an entry lists --------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "origins"), [
    ("https://api.example.com", {("https", "api.example.com", 443)}),
    ("https://api.example.com/", {("https", "api.example.com", 443)}),
    ("http://10.0.0.5:8080", {("http", "10.0.0.5", 8080)}),
    ("HTTP://API.Example.COM.:80", {("http", "api.example.com", 80)}),
    ("api.example.com:8443", {("http", "api.example.com", 8443), ("https", "api.example.com", 8443)}),
    ("api.example.com", {("http", "api.example.com", 80), ("https", "api.example.com", 443)}),
    ("[::1]:9000", {("http", "::1", 9000), ("https", "::1", 9000)}),
    ("::1", {("http", "::1", 80), ("https", "::1", 443)}),
    ("http://[0:0::1]:9000", {("http", "::1", 9000)}),
])
def test_an_entry_lists_a_fixed_set_of_origins(entry: str, origins: set[tuple[str, str, int]]) -> None:
    assert entry_origins(entry) == {Origin(*o) for o in origins}


@pytest.mark.parametrize("entry", [
    "", "ftp://files.example.com", "https://api.example.com/v1", "https://u:p@api.example.com",
    "api.example.com:0", "api.example.com:99999", "api.example.com:http", "https://api.example.com?x=1",
    "a b", "[::1", "*.example.com:443",
])
def test_a_malformed_entry_lists_nothing(entry: str) -> None:
    assert entry_origins(entry) == frozenset()


@pytest.mark.parametrize(("scheme", "authority", "origin"), [
    ("http", "127.0.0.1:8080", Origin("http", "127.0.0.1", 8080)),
    ("https", "Example.COM", Origin("https", "example.com", 443)),
    (None, "example.com", Origin("https", "example.com", 443)),  # wasmtime's default scheme
    ("http", "[::1]:81", Origin("http", "::1", 81)),
    ("http", "user@127.0.0.1:8080", None),
    ("http", "127.0.0.1:", None),
    ("http", "127.0.0.1:65536", None),
    ("http", "::1", None),  # an authority brackets an IPv6 host
    ("ws", "127.0.0.1:8080", None),
    ("http", None, None),
    ("http", "", None),
])
def test_a_request_names_the_origin_wasmtime_connects_to(scheme, authority, origin) -> None:
    assert request_origin(scheme, authority) == origin


def test_message_send_peers_follow_the_same_rule() -> None:
    allow = ["http://127.0.0.1:8080", "peer.example:9000", "bare.example"]
    assert network_allows("http://127.0.0.1:8080/a2a", allow)
    assert network_allows("https://peer.example:9000", allow) and network_allows("http://peer.example:9000", allow)
    assert network_allows("https://bare.example/x", allow)
    assert not network_allows("https://127.0.0.1:8080", allow)  # another scheme
    assert not network_allows("http://127.0.0.1:8081", allow)  # another port
    assert not network_allows("http://bare.example:8080", allow)  # a bare host lists the default ports only
    assert not network_allows("http://user@127.0.0.1:8080", allow)
    assert not network_allows("not a url", allow)
    assert url_origin("http://127.0.0.1:8080/x?y") == Origin("http", "127.0.0.1", 8080)


# -- narrowing per artifact -------------------------------------------------------------------


def _grants(tmp_path: Path, capsule: list[str], tool: list[str] | None, hook: list[str] | None = None):
    raw = {
        "name": "egress", "version": "0.1.0",
        "capabilities": {"network": {"allow": capsule}},
        "artifacts": [
            {"name": "t", "version": "0.1.0", **({"capabilities": {"network": {"allow": tool}}} if tool is not None else {})},
            {"name": "h", "version": "0.1.0", "runtime": "hook",
             **({"capabilities": {"network": {"allow": hook}}} if hook is not None else {})},
        ],
    }
    manifest, report = validate_manifest(raw, tmp_path, {})
    assert manifest is not None, report
    return compute_grants(manifest, {})


def test_an_artifact_keeps_the_entries_whose_origins_the_capsule_lists(tmp_path: Path) -> None:
    grants = _grants(tmp_path, ["127.0.0.1:8080", "https://api.example.com"],
                     ["http://127.0.0.1:8080", "https://127.0.0.1:8443", "api.example.com", "https://API.example.com:443"])
    assert grants.components["t"].network == ("http://127.0.0.1:8080", "https://API.example.com:443")
    assert grants.warnings == [
        "t: network.allow entry 'https://127.0.0.1:8443' is outside the capsule's grant; dropped",
        "t: network.allow entry 'api.example.com' is outside the capsule's grant; dropped",  # it lists http:80 too
    ]


def test_an_artifact_without_its_own_network_block_gets_the_capsules(tmp_path: Path) -> None:
    grants = _grants(tmp_path, ["127.0.0.1:8080"], None)
    assert grants.components["t"].network == ("127.0.0.1:8080",)
    assert grants.components["h"].network == ()  # a hook starts from nothing


def test_a_hook_gets_exactly_its_own_entries(tmp_path: Path) -> None:
    grants = _grants(tmp_path, [], None, hook=["https://hooks.example.com"])
    assert EgressPolicy.from_allow(grants.components["h"].network).origins == {Origin("https", "hooks.example.com", 443)}


# -- a real session ---------------------------------------------------------------------------


@pytest.fixture
def granted():
    yield from _serve()


@pytest.fixture
def capsule_only():
    yield from _serve("127.0.0.2")


@pytest.mark.anyio
async def test_a_tool_granted_less_than_its_capsule_is_refused_the_rest_and_the_refusal_is_traced(
    tmp_path: Path, host, granted: Local, capsule_only: Local
) -> None:
    responses = [
        {"stop_reason": "tool_call", "content": [
            {"type": "tool_call", "id": "a", "name": "http-get", "input": {"url": granted.url("/a")}},
            {"type": "tool_call", "id": "b", "name": "http-get", "input": {"url": capsule_only.url("/b")}},
        ]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]},
    ]
    tool = local("http-get", "tool", FIXTURES / "http-get",
                 capabilities={"network": {"allow": [granted.origin]}})
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, extra_artifacts=[tool],
                               capabilities={"network": {"allow": [granted.origin, capsule_only.origin]}})
    assert (EXAMPLES / "scripted-driver").is_dir()
    staged = stage(directory, host, tmp_path)
    assert staged.grant_for("http-get").network == (granted.origin,)

    (outcome,) = await run_tasks(staged, host, "fetch both")
    assert outcome.exit_status == "ok", outcome.error
    reached, refused = [m for m in outcome.messages if m.role == "tool"]
    assert (reached.text, reached.is_error) == ("status 200", False)
    assert refused.is_error and DENIED in refused.text
    assert granted.seen.snapshot()[1] == ["/a"]
    _no_connection(capsule_only)  # the capsule may reach it; the tool's own grant may not

    events = trace_events(staged)
    (denial,) = [e for e in events if e["event_type"] == "egress_denied"]
    assert denial["artifact"] == "http-get"
    assert denial["interface"] == "wasi:http/outgoing-handler#handle"
    assert denial["origin"] == capsule_only.origin
    assert denial["authority"] == f"127.0.0.2:{capsule_only.port}" and denial["scheme"] == "http"
    assert denial["reason"] == "not in capabilities.network.allow"
    assert denial["turn"] == 0
    calls = [e for e in events if e["event_type"] == "tool_call"]
    assert [c["status"] for c in calls] == ["ok", "error"]
    assert json.dumps(denial)  # one JSON line like every other event


# -- hooks: a store that lives the session ------------------------------------------------------


@pytest.fixture(scope="module")
def http_hook(host, artifacts):
    return host.load(artifacts.fixture("http-hook"), expected=Role.HOOK)


def test_a_hooks_store_checks_every_request_of_every_call(
    host, http_hook, tmp_path: Path, granted: Local, capsule_only: Local
) -> None:
    session = Denials()
    grant = CallGrant(env={"HTTP_HOOK_URLS": json.dumps([granted.url("/a"), capsule_only.url("/b")])},
                      network=(granted.origin,), log_path=tmp_path / "logs" / "hook-h.log", root=tmp_path,
                      limits=HOOK_LIMITS)
    hook = host.hook_instance(http_hook, grant=grant, session=session, name="h")
    try:
        for _ in range(2):
            assert hook.call_sync("on-session-start", SESSION) == HookOutput("none")
    finally:
        hook.close()
    lines = [json.loads(line) for line in (tmp_path / "logs" / "hook-h.log").read_text().splitlines()]
    assert [line["n"] for line in lines] == [1, 2]  # one instance, one store, its forwarder reused
    assert [line["outcomes"] for line in lines] == [["status 200", "error-code HttpRequestDenied"]] * 2
    assert granted.seen.snapshot()[1] == ["/a", "/a"]
    _no_connection(capsule_only)
    assert [(d.artifact, d.origin) for d in session.seen] == [("h", capsule_only.origin)] * 2


@pytest.mark.anyio
async def test_a_hook_reaches_only_its_own_grant_and_its_refusals_are_traced(
    tmp_path: Path, host, granted: Local, capsule_only: Local
) -> None:
    """A hook starts from nothing: the capsule may reach B, the hook's own entry names A only."""
    hook = local("http-hook", "hook", FIXTURES / "http-hook",
                 capabilities={"network": {"allow": [granted.origin]}, "env": {"allow": ["HTTP_HOOK_URLS"]}})
    responses = [{"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]
    directory = driver_capsule(tmp_path, "scripted-driver", {"responses": responses}, extra_artifacts=[hook],
                               capabilities={"network": {"allow": [capsule_only.origin]}})
    env = {"HTTP_HOOK_URLS": json.dumps([granted.url("/a"), capsule_only.url("/b")])}
    staged = stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"), env=env)
    assert staged.grant_for("http-hook").network == (granted.origin,)
    (outcome,) = await run_tasks(staged, host, "hello")
    assert outcome.exit_status == "ok", outcome.error
    _no_connection(capsule_only)
    events = trace_events(staged)
    denials = [e for e in events if e["event_type"] == "egress_denied"]
    log = staged.workdir.root / "logs" / "hook-http-hook.log"
    heard = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert heard[:3] == ["on-stage", "on-session-start", "on-task-start"] and "on-session-end" in heard
    assert len(granted.seen.snapshot()[1]) == len(heard)  # one request to A per event
    # every refusal is traced but on-stage's: it runs before the trace exists (as its faults do)
    assert len(denials) == len(heard) - 1
    assert {(d["artifact"], d["origin"], d["reason"]) for d in denials} == {
        ("http-hook", capsule_only.origin, "not in capabilities.network.allow")}
    assert all(isinstance(d["turn"], int) for d in denials)
