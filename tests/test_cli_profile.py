"""The process transport's containment profile, derived from the real CLIs' install
(`murmurd/containment/cli_profile.py`): what each may read and execute, and what it may reach."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import clikit
from murmurd.containment import cli_profile

needs_clis = pytest.mark.skipif(clikit.missing_reason() is not None, reason=str(clikit.missing_reason()))


@needs_clis
def test_codex_s_npm_wrapper_brings_node_and_the_native_package_it_runs() -> None:
    profile = cli_profile.cli_profile(str(clikit.codex_wrapper()), {"PATH": os.environ.get("PATH", "/usr/bin")})
    node = shutil.which("node")
    assert node is not None
    assert profile.executables == (os.path.realpath(clikit.codex_wrapper()), os.path.realpath(node))  # env -> node
    packages = [Path(p) for p in profile.packages]
    assert packages[0] == Path(os.path.realpath(clikit.codex_wrapper())).parent.parent  # @openai/codex
    assert Path(os.path.realpath(clikit.codex_binary())).is_relative_to(packages[1])  # @openai/codex-linux-x64
    assert "/proc/self" in profile.read_only and "/etc/ssl/openssl.cnf" in profile.read_only
    assert "/etc" not in profile.read_only and "/etc/ssl" not in profile.read_only  # never /etc/ssl/private


@needs_clis
def test_claude_code_is_its_binary_and_its_package() -> None:
    profile = cli_profile.cli_profile(str(clikit.claude_binary()), {"PATH": "/usr/bin:/bin"})
    assert profile.executables == (os.path.realpath(clikit.claude_binary()),)
    package = Path(os.path.realpath(clikit.claude_binary())).parent.parent
    assert profile.packages[0] == str(package)  # and its installed platform packages, nothing else
    assert all(Path(p).parent == package.parent and Path(p).name.startswith("claude-code") for p in profile.packages)


def test_a_binary_outside_any_package_has_none(tmp_path: Path) -> None:
    assert cli_profile.package_dirs("/bin/sh") == ()
    script = tmp_path / "cli"
    script.write_text("#!/usr/bin/env -S definitely-not-installed --flag\n")
    assert cli_profile.script_interpreter(str(script), "/usr/bin:/bin") is None


def test_an_env_script_s_closure_brings_the_program_env_runs(tmp_path: Path) -> None:
    # a `#!/usr/bin/env sh` script in shell.allow (or a CLI's wrapper) needs sh and its libraries too
    from murmurd.containment.closure import closure

    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env sh\necho hi\n")
    found = closure([str(script)])
    shell = os.path.realpath(shutil.which("sh", path="/usr/local/bin:/usr/bin:/bin") or "/bin/sh")
    assert os.path.realpath("/usr/bin/env") in found and shell in found
    assert any(Path(p).name.startswith("libc.so") for p in found)


def test_the_provider_origins_come_from_the_cli_s_own_configuration(tmp_path: Path) -> None:
    assert cli_profile.provider_origins("claude", {}) == ("https://api.anthropic.com",)
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}))
    assert cli_profile.provider_origins("claude", {"HOME": str(tmp_path)}) == ("http://127.0.0.1:9",)
    assert cli_profile.provider_origins("codex", {"HOME": str(tmp_path)}) == (
        "https://api.openai.com/v1", "https://chatgpt.com/backend-api/codex")
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(
        'model_provider = "local"\n[model_providers.local]\nbase_url = "http://127.0.0.1:7/v1"\n')
    assert cli_profile.provider_origins("codex", {"HOME": str(tmp_path)}) == ("http://127.0.0.1:7/v1",)


def test_only_listed_provider_origins_and_the_bridge_are_granted() -> None:
    origins = ("https://api.anthropic.com", "http://127.0.0.1:7/v1")
    granted = cli_profile.granted_origins(origins, ["https://api.anthropic.com"])
    assert granted == ("https://api.anthropic.com",)
    grant = cli_profile.cli_grant(granted, "http://127.0.0.1:4242/bridge")
    assert grant.pairs == frozenset({("api.anthropic.com", 443), ("127.0.0.1", 4242)})
    assert cli_profile.cli_grant((), None).pairs == frozenset()
