"""The shipped container image and systemd unit are secure: the image's own command, run as
shipped (paths moved into a temporary directory), refuses to start without its token and, with
it, answers nothing without the token; the unit passes a token too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from a2akit import ROOT, chaos_capsule, serving
from authkit import bearer
from test_auth_serve import OPS, message


def _image_command() -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))
    command = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))
    assert entrypoint == ["murmurd"]
    return command


def test_the_image_command_needs_its_token_and_enforces_it(tmp_path: Path, artifacts) -> None:
    command = _image_command()
    assert "--insecure" not in command and command[command.index("--host") + 1] == "0.0.0.0"
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue"})
    moved = {"/capsule": str(capsule), "/var/lib/murmurd/state": str(tmp_path / "state"), "8080": "0",
             "/run/secrets/murmurd-token": str(tmp_path / "secrets" / "murmurd-token")}
    args = [moved.get(a, a) for a in command]
    assert args[0] == "serve"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MURMUR_TOKEN", "MURMUR_CREDENTIALS"))}
    missing = subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, cwd=ROOT,
                             env=env, timeout=60)
    assert missing.returncode == 2 and "cannot read token file" in missing.stderr
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "murmurd-token").write_text(OPS + "\n")
    with serving(capsule, tmp_path / "state", *args[2:], env=env) as served:
        url = "http://127.0.0.1:" + served.url.rsplit(":", 1)[1]
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message("hi")}}
        assert httpx.post(url, json=body, timeout=30).status_code == 401
        assert httpx.post(url, json=body, headers=bearer(OPS), timeout=30).status_code == 200


def test_the_systemd_unit_passes_a_token() -> None:
    unit = (ROOT / "deploy" / "murmurd@.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--token-file %d/token" in exec_start and "--insecure" not in exec_start
    assert "LoadCredential=token:" in unit
