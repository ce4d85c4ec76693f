"""Registry test helpers: `.mur.zip` archives shaped as upstream publishes them, loopback
stand-ins for GitHub's releases API and a Nexus registry (stdlib http.server), murmurd's own
registry server on a loopback port, and a capsule pinning a tool and a skill."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SKILL_TEXT = "# Tidy\nAlways tidy up before you finish.\n"
TOOL = "echo-tool"
SKILL = "tidy-skill"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_zip(entries: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def tool_archive(wasm: Path, name: str = TOOL, version: str = "1.2.0", **extra: Any) -> bytes:
    """As default-artifacts packs a wasm tool: flat, `murmur.yaml` + `<crate>.wasm` in `requires_files`."""
    crate = f"{name.replace('-', '_')}.wasm"
    manifest = {"name": name, "version": version, "runtime": "tool", "description": "Echo the input back",
                "requires_files": [crate],
                "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}, **extra}
    return make_zip({"murmur.yaml": yaml.safe_dump(manifest).encode(), crate: wasm.read_bytes()})


def skill_archive(name: str = SKILL, version: str = "0.3.0", text: str = SKILL_TEXT) -> bytes:
    manifest = {"name": name, "version": version, "runtime": "skill", "description": "Tidy up",
                "requires_files": ["skill.md"]}
    return make_zip({"murmur.yaml": yaml.safe_dump(manifest).encode(), "skill.md": text.encode()})


def capsule(root: Path, examples: Path, *, tool_version: str = "1.2.0", skill_version: str = "0.3.0",
            **extra: Any) -> Path:
    """A capsule whose driver is local and whose tool and skill are named, pinned artifacts; its
    scripted driver calls the tool, then reads the skill, then answers."""
    responses = [
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c1", "name": TOOL,
                                                  "input": {"text": "ping"}}]},
        {"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": "c2", "name": SKILL, "input": {}}]},
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "tidied"}]},
    ]
    manifest = {
        "name": "registry-capsule",
        "version": "1.0.0",
        "artifacts": [
            {"name": "scripted-driver", "runtime": "driver", "source": str(examples / "scripted-driver"),
             "local_source": True},
            {"name": TOOL, "version": tool_version, "runtime": "tool"},
            {"name": SKILL, "version": skill_version, "runtime": "skill"},
        ],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "scripted",
                      "driver": {"artifact": "scripted-driver", "config": {"responses": responses}}},
        **extra,
    }
    directory = root / "project"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return directory


def murmurd(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "murmurd", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def lock_of(project: Path) -> dict[str, dict]:
    lock = yaml.safe_load((project / "murmur.lock").read_text())
    assert lock["lock_version"] == 1
    return {p["name"]: p for p in lock["artifacts"]}


# -- HTTP stand-ins --------------------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class GitHubStandIn:
    """`/repos/{owner}/{repo}/releases/{tags/<tag>|latest}` and `.../releases/assets/{id}`."""

    repo: str
    releases: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)  # tag -> assets
    latest: str | None = None
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def _assets(self) -> dict[int, bytes]:
        found, n = {}, 0
        for tag in self.releases:
            for _name, data in self.releases[tag]:
                n += 1
                found[n] = data
        return found

    def release_json(self, tag: str) -> dict:
        start = 1 + sum(len(self.releases[t]) for t in list(self.releases)[: list(self.releases).index(tag)])
        return {"tag_name": tag, "assets": [{"id": start + i, "name": n, "browser_download_url": "http://nowhere/"}
                                            for i, (n, _d) in enumerate(self.releases[tag])]}

    def answer(self, path: str) -> tuple[int, str, bytes]:
        prefix = f"/repos/{self.repo}/releases/"
        if not path.startswith(prefix):
            return 404, "application/json", b'{"message":"Not Found"}'
        rest = path[len(prefix):]
        if rest == "latest" and self.latest:
            return 200, "application/json", json.dumps(self.release_json(self.latest)).encode()
        if rest.startswith("tags/") and rest[5:] in self.releases:
            return 200, "application/json", json.dumps(self.release_json(rest[5:])).encode()
        if rest.startswith("assets/") and rest[7:].isdigit() and int(rest[7:]) in self._assets():
            return 200, "application/octet-stream", self._assets()[int(rest[7:])]
        return 404, "application/json", b'{"message":"Not Found"}'


@dataclass
class NexusStandIn:
    """`GET /v1/artifacts/{name}/{version}` with `x-murmur-sha256` (or a wrong one, or none)."""

    key: str
    artifacts: dict[tuple[str, str], bytes] = field(default_factory=dict)
    wrong_sha: bool = False
    omit_sha: bool = False
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def answer(self, path: str, headers: dict[str, str]) -> tuple[int, str, bytes, dict[str, str]]:
        if headers.get("authorization") != f"Bearer {self.key}":
            return 401, "application/json", b'{"error":"unauthorized"}', {}
        parts = path.split("?")[0].strip("/").split("/")
        if len(parts) == 4 and parts[:2] == ["v1", "artifacts"] and (parts[2], parts[3]) in self.artifacts:
            data = self.artifacts[(parts[2], parts[3])]
            digest = "0" * 64 if self.wrong_sha else sha(data)
            return 200, "application/octet-stream", data, {} if self.omit_sha else {"x-murmur-sha256": digest}
        return 404, "application/json", json.dumps({"error": "not found"}).encode(), {}


@contextmanager
def serving(standin: GitHubStandIn | NexusStandIn) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            headers = {k.lower(): v for k, v in self.headers.items()}
            standin.seen.append(Seen("GET", self.path, headers))
            extra: dict[str, str] = {}
            if isinstance(standin, GitHubStandIn):
                status, kind, body = standin.answer(self.path)
            else:
                status, kind, body, extra = standin.answer(self.path, headers)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    standin.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield standin.url
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def murmurd_registry(directory: Path, key: str, env: dict[str, str]) -> Iterator[str]:
    """`murmurd registry serve DIR` as a real process on a free loopback port; waits until it answers."""
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = directory.parent / f"registry-{port}.log"
    sink = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "murmurd", "registry", "serve", str(directory)],
                            env={**env, "NEXUS_API_KEY": key, "NEXUS_BIND": f"127.0.0.1:{port}"},
                            stdout=subprocess.DEVNULL, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"registry server exited: {log.read_text()}")
            try:
                if httpx.get(f"{url}/v1/artifacts", timeout=5).status_code == 401:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("registry server did not answer within 120 s")
            time.sleep(0.1)  # polling for readiness, not a fixed wait
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.close()
