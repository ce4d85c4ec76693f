"""Helpers for the tenancy attacks (issue 21): credentials for an operator and two peers, the
capsules they attack, JSON-RPC calls with a bearer token."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from a2akit import chaos_capsule
from authkit import bearer, token_sha256
from conftest import FIXTURES
from murmurd.manifest.writing import dump_yaml

OPS = "ops-token-" + "o" * 32
PEER_A = "peer-a-token-" + "a" * 32  # trust [partner]
PEER_B = "peer-b-token-" + "b" * 32  # trust [internal, partner]: at least as trusted as peer-a
TOKENS = {"ops": OPS, "peer-a": PEER_A, "peer-b": PEER_B}
QUEUE = {"task_acceptance": "queue", "queue_depth": 100}


def credentials(root: Path) -> Path:
    path = root / "credentials.yaml"
    path.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_sha256: {token_sha256(OPS)}}}
  - {{name: peer-a, origin: peer, trust: [partner], token_sha256: {token_sha256(PEER_A)}}}
  - {{name: peer-b, origin: peer, trust: [internal, partner], token_sha256: {token_sha256(PEER_B)}}}
""")
    return path


def tenant_capsule(root: Path, **lifecycle: Any) -> Path:
    """The chaos capsule (`answer: <text>`; `mode:ask` asks for input) under `queue`."""
    return chaos_capsule(root, lifecycle={**QUEUE, **lifecycle})


def recorder_capsule(root: Path, name: str = "recorder", **lifecycle: Any) -> Path:
    """A threaded capsule whose driver answers with every text it was sent (the context's
    history included): whatever history reaches the model is in the task's answer."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": name, "version": "1.0.0",
        "artifacts": [{"name": "recorder-driver", "runtime": "driver", "source": str(FIXTURES / "recorder-driver"),
                       "local_source": True}],
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "recorder",
                      "driver": {"artifact": "recorder-driver", "config": {"steps": 1}}},
        "lifecycle": {"after_task": "sleep", "conversation": "threaded", **QUEUE, **lifecycle},
    }
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


def rpc(url: str, method: str, params: Any, token: str, version: str | None = None, timeout: float = 120) -> dict:
    headers = {**bearer(token), **({"a2a-version": version} if version else {})}
    return httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                      headers=headers, timeout=timeout).json()


def message(text: str, **extra: Any) -> dict:
    return {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}], **extra}


def send(url: str, text: str, token: str, *, blocking: bool = True, **extra: Any) -> dict:
    """`message/send` (upstream's shape); the whole JSON-RPC answer."""
    return rpc(url, "message/send", {"message": message(text, **extra), "configuration": {"blocking": blocking}}, token)


def state_of(url: str, task_id: str) -> str:
    return rpc(url, "tasks/get", {"id": task_id}, OPS)["result"]["status"]["state"]


def wait_state(url: str, task_id: str, *states: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (state := state_of(url, task_id)) not in states:
        assert time.monotonic() < deadline, f"task {task_id} stayed {state}, wanted {states}"
        time.sleep(0.05)
