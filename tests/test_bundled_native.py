"""How murmurd's bundled native tools are laid down (one zipapp in the cache, run by the
daemon's interpreter) and what their contained process is granted besides (issue 28 item 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from murmurd.staging.bundled import find_bundled, resolve_bundled
from murmurd.staging.bundled_native import (
    declared_binaries, helper_runtime, lay_down, native_extensions, native_runtime,
)

NATIVE = ("murmur-tool-git", "murmur-tool-test-report", "murmur-tool-code-graph", "murmur-tool-code-coverage")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MURMUR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", NATIVE)
def test_each_native_tool_resolves_to_one_executable_in_the_cache(name: str, cache: Path) -> None:
    artifact = find_bundled(name)
    assert artifact is not None and artifact.manifest.is_native and artifact.kind == "tool"
    resolved = resolve_bundled(artifact, artifact.manifest.version)
    assert resolved.native and resolved.payload.is_relative_to(cache)
    assert resolved.payload.name == name and resolved.payload.stat().st_mode & 0o111
    assert resolved.payload.read_bytes().split(b"\n", 1)[0] == f"#!{sys.executable} -Es".encode()
    # It speaks upstream's protocol: blank stdin is an input error, never a traceback.
    proc = subprocess.run([str(resolved.payload)], input="", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["message"] == "missing input on stdin"
    assert resolve_bundled(artifact, None).payload == resolved.payload  # laid down once


def test_a_changed_source_is_laid_down_anew(tmp_path: Path, cache: Path) -> None:
    source = tmp_path / "murmur-tool-x"
    shutil.copytree(find_bundled("murmur-tool-test-report").directory, source)
    first = lay_down("murmur-tool-x", "0.1.0", source)
    (source / "__main__.py").write_text((source / "__main__.py").read_text() + "\n# changed\n")
    second = lay_down("murmur-tool-x", "0.1.0", source)
    assert first != second and first.is_file() and second.is_file()
    (source / "__main__.py").unlink()
    with pytest.raises(ValueError, match="no __main__.py"):
        lay_down("murmur-tool-y", "0.1.0", source)


def test_grants_name_the_daemons_site_packages_and_the_declared_binaries(tmp_path: Path, cache: Path) -> None:
    exe = resolve_bundled(find_bundled("murmur-tool-code-graph"), None).payload
    grants = dict(native_runtime(exe))
    import tree_sitter

    site = Path(tree_sitter.__file__).resolve().parent.parent
    assert any(site.is_relative_to(Path(path)) and listed for path, listed in grants.items())
    objects = native_extensions(exe)
    assert any("tree_sitter" in path and path.endswith(".so") for path in objects)
    assert any(os.path.basename(path).startswith("_sqlite3") for path in objects)
    # A script another interpreter runs gets none of that.
    other = tmp_path / "other"
    other.write_text("#!/usr/bin/env python3\nprint('{}')\n")
    assert native_runtime(other) == () and native_extensions(other) == ()
    # What the tool's own manifest says it runs, found on the child's PATH; names with a `/` never.
    git = os.path.realpath(shutil.which("git", path="/usr/bin:/bin"))
    sh = os.path.realpath(shutil.which("sh", path="/usr/bin:/bin"))  # git runs its transport helpers through sh
    assert declared_binaries({"capabilities": {"shell": {"allow": ["git", "/bin/sh", "no-such-binary-x"]}}},
                             "/usr/bin:/bin") == (git, sh)
    assert helper_runtime([git]) == tuple((str(Path(git).parent.parent / d), True)
                                          for d in ("lib/git-core", "libexec/git-core", "share/git-core")
                                          if (Path(git).parent.parent / d).is_dir())
    assert helper_runtime([sh]) == ()
    assert declared_binaries({}, "/usr/bin") == () and declared_binaries(None, None) == ()
