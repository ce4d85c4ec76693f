"""Shell completion (issue 25, item 2): the script `murmurd completion bash` prints, sourced in a
real bash, completes subcommands and each subcommand's flags from the argument parser."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BIN = Path(sys.executable).parent


def _complete(words: list[str]) -> list[str]:
    """COMPREPLY after bash completes the last of `words` through murmurd's completion function."""
    line = " ".join(words)
    script = (
        'source <(murmurd completion bash)\n'
        f'COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}\n'
        f'COMP_WORDS=({" ".join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n'
        f'_python_argcomplete murmurd {shlex.quote(words[-1])} {shlex.quote(words[-2])}\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def test_bash_completes_subcommands_and_flags() -> None:
    if not (BIN / "murmurd").exists():
        pytest.fail("the murmurd entry point is not installed beside this python (pip install -e .)")
    assert set(_complete(["murmurd", "se"])) == {"serve", "send"}
    assert set(_complete(["murmurd", "serve", "--max-c"])) == {"--max-concurrent-tasks", "--max-connections"}
    assert "--driver" in _complete(["murmurd", "init", "--d"])
    assert set(_complete(["murmurd", "init", "x", "--driver", ""])) == {"anthropic", "openai", "scripted"}


def test_the_zsh_script_registers_with_compdef() -> None:
    script = subprocess.run([sys.executable, "-m", "murmurd", "completion", "zsh"], capture_output=True, text=True,
                            cwd=ROOT, timeout=60).stdout
    assert script.startswith("#compdef murmurd")
    if shutil.which("zsh"):
        checked = subprocess.run(["zsh", "-n"], input=script, capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr
