"""`murmurd init` (issue 25, item 2): a new capsule that validates and runs, for each driver;
an existing manifest is never overwritten. Real subprocesses; the Anthropic capsule runs
against the provider stand-in on loopback (its endpoint pointed there, as a user would for a
local proxy)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, ROOT
from murmurd.manifest.writing import dump_yaml
from standins import anthropic_standin, anthropic_stream

BUNDLED_SCRIPTED = ROOT / "murmurd" / "bundled" / "murmur-driver-scripted"


def murmurd(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**clean, **(env or {})})


def test_init_scripted_writes_a_capsule_that_validates_and_runs_offline(tmp_path: Path) -> None:
    directory = tmp_path / "My Agent"
    made = murmurd("init", str(directory), "--driver", "scripted")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"wrote {directory / 'murmur.yaml'} (my-agent, murmur-driver-scripted)\n")
    assert (directory / "README.md").is_file() and "workdir/" in (directory / ".gitignore").read_text()
    assert murmurd("validate", str(directory)).returncode == 0
    ran = murmurd("run", str(directory), "--task", "Say hello")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("Hello from my-agent! This answer is scripted")


@pytest.mark.parametrize("driver,key", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_init_for_a_provider_validates_once_its_key_is_set(tmp_path: Path, driver: str, key: str) -> None:
    directory = tmp_path / driver
    made = murmurd("init", str(directory), "--driver", driver)
    assert made.returncode == 0, made.stderr
    assert f"next: put {key}=... in {directory / '.env'}" in made.stdout
    without = murmurd("validate", str(directory))
    assert without.returncode == 1 and "E-INF-004" in without.stdout  # the key, and only the key, is missing
    assert without.stdout.count(" error ") == 1
    (directory / ".env").write_text(f"{key}=sk-test\n")
    assert murmurd("validate", str(directory)).returncode == 0


def test_init_anthropic_runs_against_the_api(tmp_path: Path) -> None:
    directory = tmp_path / "real"
    assert murmurd("init", str(directory), "--driver", "anthropic").returncode == 0
    with anthropic_standin() as api:
        api.replies = [anthropic_stream([{"type": "text", "text": "Hello from the model."}], "end_turn",
                                        {"input_tokens": 12})]
        manifest = yaml.safe_load((directory / "murmur.yaml").read_text())
        manifest["inference"]["endpoint"] = api.url
        manifest["capabilities"]["network"]["allow"] = [api.url]
        (directory / "murmur.yaml").write_text(dump_yaml(manifest))
        ran = murmurd("run", str(directory), "--task", "Say hello", env={"ANTHROPIC_API_KEY": "sk-test"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "Hello from the model."
    assert api.problems == [] and api.requests[0].body["model"] == "claude-sonnet-4-5"


def test_init_never_overwrites_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: mine\n")
    proc = murmurd("init", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == f"murmurd init: {tmp_path / 'murmur.yaml'} already exists; nothing was written\n"
    assert (tmp_path / "murmur.yaml").read_text() == "name: mine\n"


def test_the_bundled_scripted_driver_is_the_example_byte_for_byte() -> None:
    assert (BUNDLED_SCRIPTED / "app.py").read_bytes() == (EXAMPLES / "scripted-driver" / "app.py").read_bytes()
