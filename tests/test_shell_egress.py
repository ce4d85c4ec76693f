"""`capabilities.network.allow` reaches shell children through the egress relay (issue 22 item 3):
real commands in a real network namespace, a real HTTP origin on loopback, the DNS stub answering
real queries sent from inside the namespace."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from loopkit import driver_capsule, run_tasks, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not plan_containment(probe_host(), "auto").netns,
                       reason=f"no network namespace on this host: {probe_host().netns_error}"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed (.ci/run installs it)"),
]

BODY = b"hello from the granted origin\n"


class Origin(http.server.ThreadingHTTPServer):
    """A real HTTP server on 127.0.0.1 that counts the requests it answered."""

    daemon_threads = True

    def __init__(self) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                self.wfile.write(BODY)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]


@pytest.fixture
def origin() -> Iterator[Origin]:
    server = Origin()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def counting_listener() -> socket.socket:
    """A loopback port that is not granted: it must never see a connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    return server


def accepts(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def dns_query(name: str, qtype: int = 1) -> str:
    """A bash script that sends one DNS query from inside the namespace (to an address that is
    no resolver anywhere: the namespace routes every IPv4 address to its own lo, where the stub
    listens on :53) and prints the reply as hex."""
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00"
    packet = b"\x4d\x52\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + question + bytes([0, qtype, 0, 1])
    escaped = "".join(f"\\x{byte:02x}" for byte in packet)
    return (f"exec 3<>/dev/udp/192.0.2.53/53 && printf '{escaped}' >&3 && "
            "dd bs=512 count=1 status=none <&3 | od -An -tx1 -v | tr -d ' \\n'")


def calls(*commands: tuple[str, str]) -> dict[str, Any]:
    responses = [{"stop_reason": "tool_call", "content": [
        {"type": "tool_call", "id": f"c{i}", "name": binary, "input": {"command": command}}]}
        for i, (binary, command) in enumerate(commands)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


def staged_capsule(tmp_path: Path, host, commands: list[tuple[str, str]], capabilities: dict[str, Any],
                   said: list[str]) -> StagedCapsule:
    directory = driver_capsule(tmp_path, "scripted-driver", calls(*commands), capabilities=capabilities)
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"), env=os.environ,
                         progress=said.append)


def stdout_of(text: str) -> str:
    return text.split("Stdout:\n", 1)[1].split("\nStderr:", 1)[0]


async def test_a_granted_loopback_origin_is_reached_and_nothing_else_is(tmp_path: Path, host, origin: Origin) -> None:
    other = counting_listener()
    other_port = other.getsockname()[1]
    capabilities = {"shell": {"allow": ["curl", "bash", "dd", "od", "tr"]},
                    "network": {"allow": [f"http://127.0.0.1:{origin.port}", f"localhost:{origin.port}"]}}
    commands = [
        ("curl", f"-sS -m 20 http://127.0.0.1:{origin.port}/granted"),  # spliced to the real origin
        ("curl", f"-sS -m 20 http://127.0.0.1:{other_port}/"),  # a port nothing grants: no listener
        ("curl", f"-sS -m 20 http://127.0.0.2:{origin.port}/"),  # a granted port, an address nothing grants
        ("bash", dns_query("refused.example")),
        ("bash", dns_query("localhost")),  # a granted name: resolved by murmurd, answered
    ]
    said: list[str] = []
    try:
        staged = staged_capsule(tmp_path, host, commands, capabilities, said)
        assert not any("W-SEC-014" in line for line in said)  # the allowlist reaches shell children now
        (outcome,) = await run_tasks(staged, host, "reach out")
        assert outcome.exit_status == "ok", outcome.error
        texts = [m.text for m in outcome.messages if m.role == "tool"]
        shells = [e for e in trace_events(staged) if e["event_type"] == "shell"]

        granted, unlisted_port, unlisted_address, refused, answered = shells
        assert granted["exit_code"] == 0 and stdout_of(texts[0]) == BODY.decode().rstrip("\n")
        assert origin.requests == 1  # byte for byte through the relay: one real request

        assert unlisted_port["exit_code"] == 7 and "Couldn't connect" in texts[1]  # ECONNREFUSED in the namespace
        assert accepts(other) == 0  # the host's port never saw a connection
        assert unlisted_address["exit_code"] != 0 and origin.requests == 1  # reset by the relay, never forwarded

        reply = bytes.fromhex(stdout_of(texts[3]))
        assert reply[:2] == b"\x4d\x52" and reply[2] & 0x80 and reply[3] & 0x0F == 5  # a response: REFUSED
        reply = bytes.fromhex(stdout_of(texts[4]))
        assert reply[3] & 0x0F == 0 and int.from_bytes(reply[6:8], "big") == 1  # NOERROR, one answer
        assert reply[-4:] == bytes([127, 0, 0, 1])  # localhost's address, as the host resolves it

        denied = [e for e in trace_events(staged) if e["event_type"] == "egress_denied"]
        by_interface = {(e["interface"], e["authority"]) for e in denied}
        assert ("shell/egress#tcp", f"127.0.0.2:{origin.port}") in by_interface
        assert ("shell/egress#dns", "refused.example") in by_interface
        assert all(e["artifact"] in ("curl", "bash") and e["reason"] for e in denied)
        assert not any(t.name == "murmurd-shell-egress" for t in threading.enumerate())  # ended with each command
    finally:
        other.close()


async def test_a_grant_past_sixteen_ports_is_refused_before_anything_runs(tmp_path: Path, host) -> None:
    capabilities = {"shell": {"allow": ["curl"]},
                    "network": {"allow": [f"http://127.0.0.1:{port}" for port in range(20001, 20018)]}}
    said: list[str] = []
    staged = staged_capsule(tmp_path, host, [("curl", "-sS http://127.0.0.1:20001/")], capabilities, said)
    (outcome,) = await run_tasks(staged, host, "reach out")
    texts = [m.text for m in outcome.messages if m.role == "tool"]
    assert "17 ports; shell egress catches at most 16" in texts[0]


async def test_a_command_holds_at_most_sixty_four_relayed_connections(tmp_path: Path, host) -> None:
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(256)
    upstream.setblocking(False)
    port = upstream.getsockname()[1]
    # 65 connections held open at once; then wait on the last one, which the relay resets.
    script = (f"for i in {{1..65}}; do exec {{fd}}<>/dev/tcp/127.0.0.1/{port} || exit 3; done; "
              "read -t 60 -u $fd line; echo done")
    said: list[str] = []
    try:
        staged = staged_capsule(tmp_path, host, [("bash", script)], {
            "shell": {"allow": ["bash"]}, "network": {"allow": [f"127.0.0.1:{port}"]}}, said)
        (outcome,) = await run_tasks(staged, host, "flood")
        assert outcome.exit_status == "ok", outcome.error
        (shell,) = [e for e in trace_events(staged) if e["event_type"] == "shell"]
        assert shell["exit_code"] == 0
        denied = [e for e in trace_events(staged) if e["event_type"] == "egress_denied"]
        assert [e["reason"] for e in denied] == ["the command already has 64 open connections"]
        deadline = time.monotonic() + 60
        reached = 0
        while time.monotonic() < deadline:
            reached += accepts(upstream)
            if reached >= 64:
                break
            await anyio.sleep(0.05)
        reached += accepts(upstream)
        assert reached == 64  # every admitted connection reached the origin, the 65th never did
    finally:
        upstream.close()
