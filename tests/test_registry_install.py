"""Artifacts from outside, end to end: a capsule pinning a tool and a skill resolves from the project
store, the global store, a GitHub release source, a Nexus registry and murmurd's own registry
server, runs a task that calls the tool and reads the skill, and writes `murmur.lock`; and every
refusal carries upstream's code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
import yaml

from conftest import EXAMPLES
from loopkit import run_tasks
from murmurd.paths import cache_dir
from murmurd.staging.stage import StagingError, stage_capsule
from registrykit import (SKILL, SKILL_TEXT, TOOL, GitHubStandIn, NexusStandIn, capsule, lock_of, make_zip, murmurd,
                         murmurd_registry, serving, sha, skill_archive, tool_archive)

pytestmark = pytest.mark.anyio
KEY = "nexus-test-key"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A home of the test's own (global store, config), the machine's build cache kept."""
    monkeypatch.setenv("MURMUR_CACHE_DIR", str(cache_dir()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MURMUR_REGISTRY", str(tmp_path / "no-directory-registry"))
    for name in ("GITHUB_TOKEN", "NEXUS_API_KEY", "MUR_GITHUB_API_BASE", "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "home").mkdir()
    return dict(os.environ)


@pytest.fixture
def archives(tmp_path: Path, artifacts) -> dict[str, Path]:
    out = tmp_path / "dist"
    out.mkdir()
    tool = out / f"{TOOL}-1.2.0.mur.zip"
    tool.write_bytes(tool_archive(artifacts.example("echo")))
    skill = out / f"{SKILL}-0.3.0.mur.zip"
    skill.write_bytes(skill_archive())
    return {TOOL: tool, SKILL: skill}


async def _stage_and_run(project: Path, host, progress: list[str] | None = None):  # type: ignore[no-untyped-def]
    staged = stage_capsule(project, host=host, progress=(progress.append if progress is not None else None))
    (outcome,) = await run_tasks(staged, host, "tidy up")
    assert outcome.exit_status == "ok", outcome.error
    assert outcome.result_text == "tidied"
    tool_messages = [m for m in outcome.messages if m.role == "tool"]
    assert json.loads(tool_messages[0].text) == {"text": "ping"} and not tool_messages[0].is_error
    assert tool_messages[1].text == SKILL_TEXT
    return staged


def _assert_locked(project: Path, archives: dict[str, Path]) -> None:
    pins = lock_of(project)
    assert set(pins) == {TOOL, SKILL}  # the local driver is never locked
    for name, path in archives.items():
        assert pins[name]["sha256"] == {"wasm": sha(path.read_bytes())}  # the whole .mur.zip, skills too
    assert (pins[TOOL]["resolved_version"], pins[SKILL]["resolved_version"]) == ("1.2.0", "0.3.0")


def error_of(done) -> str:  # type: ignore[no-untyped-def]
    """stderr from the first `error[` line on (progress lines come before it)."""
    at = done.stderr.find("error[")
    return done.stderr[at:] if at >= 0 else done.stderr


def _store_files(root: Path, name: str, version: str) -> set[str]:
    return {p.name for p in (root / name / version).iterdir()}


async def test_from_the_project_store(tmp_path: Path, env, archives, host) -> None:
    project = capsule(tmp_path, EXAMPLES)
    for path in archives.values():
        done = murmurd("install", str(path), cwd=project, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Installed ")
    store = project / ".murmur" / "artifacts"
    assert _store_files(store, TOOL, "1.2.0") == {f"{TOOL}-1.2.0.mur.zip", f"{TOOL}-1.2.0.sha256",
                                                  f"{TOOL}-1.2.0.meta.json"}
    assert (store / TOOL / "1.2.0" / f"{TOOL}-1.2.0.sha256").read_text() == sha(archives[TOOL].read_bytes())
    meta = json.loads((store / SKILL / "0.3.0" / f"{SKILL}-0.3.0.meta.json").read_text())["meta"]
    assert (meta["runtime"], meta["artifact_runtime"]) == ("static", "skill")
    assert not (project / "murmur.lock").exists()  # a local-file install writes no lock (upstream)
    staged = await _stage_and_run(project, host)
    assert staged.artifacts[TOOL].resolved.origin.startswith("project:")
    _assert_locked(project, archives)
    doctor = murmurd("doctor", cwd=project, env=env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "local source" in doctor.stdout and f"✓  {TOOL}@1.2.0" in doctor.stdout
    assert doctor.stdout.rstrip().endswith("All checks passed.")


async def test_from_the_global_store_with_a_version_requirement(tmp_path: Path, env, archives, host) -> None:
    project = capsule(tmp_path, EXAMPLES, tool_version=">=1.0", skill_version="latest")
    for path in archives.values():
        done = murmurd("publish", str(path), cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Published {SKILL}@0.3.0"
    assert (tmp_path / "home" / ".murmur" / "artifacts" / TOOL / "1.2.0" / f"{TOOL}-1.2.0.mur.zip").is_file()
    staged = await _stage_and_run(project, host)
    assert staged.artifacts[SKILL].resolved.origin.startswith("global:")
    _assert_locked(project, archives)
    again = murmurd("publish", str(archives[TOOL]), cwd=tmp_path, env=env)
    assert again.returncode == 1
    assert error_of(again).startswith(f"error[E-REG-003]: artifact {TOOL}@1.2.0 already exists in registry")
    assert "hint: use a new version string or remove the existing artifact" in again.stderr


def _github_config(home: Path, repo: str) -> None:
    (home / ".murmur").mkdir(parents=True, exist_ok=True)
    (home / ".murmur" / "config.yaml").write_text(yaml.safe_dump({"registry": {
        "default": "team", "sources": [{"name": "team", "type": "github", "repo": repo, "token": "${TEAM_TOKEN}"}]}}))


async def test_from_a_github_release_source_installed_at_staging(tmp_path: Path, env, archives, host,
                                                                 monkeypatch) -> None:
    github = GitHubStandIn("acme/artifacts", {"v2026.1": [(p.name, p.read_bytes()) for p in archives.values()]},
                           latest="v2026.1")
    _github_config(tmp_path / "home", "acme/artifacts")
    monkeypatch.setenv("TEAM_TOKEN", "tok-123")
    project = capsule(tmp_path, EXAMPLES)
    progress: list[str] = []
    with serving(github) as url:
        monkeypatch.setenv("MUR_GITHUB_API_BASE", url + "/")
        await _stage_and_run(project, host, progress)
    _assert_locked(project, archives)
    assert any(f"installing {TOOL}@1.2.0" in line for line in progress)
    assert any(line.startswith(f"installed {TOOL}@1.2.0 from github:acme/artifacts@v2026.1") for line in progress)
    paths = [s.path for s in github.seen]
    # tag 1.2.0, then v1.2.0 (no such releases), then the latest release; bytes from the asset endpoint
    assert paths[:3] == ["/repos/acme/artifacts/releases/tags/1.2.0", "/repos/acme/artifacts/releases/tags/v1.2.0",
                         "/repos/acme/artifacts/releases/latest"]
    assets = [s for s in github.seen if "/releases/assets/" in s.path]
    assert len(assets) == 2 and all(s.headers["accept"] == "application/octet-stream" for s in assets)
    assert all(s.headers["authorization"] == "Bearer tok-123" and s.headers["user-agent"] == "murmur-cli"
               for s in github.seen)
    store = project / ".murmur" / "artifacts"
    meta = json.loads((store / TOOL / "1.2.0" / f"{TOOL}-1.2.0.meta.json").read_text())["meta"]
    assert (meta["runtime"], meta["artifact_runtime"]) == ("wasm", "tool")
    # the second launch stages from the project store, fetching nothing
    seen = len(github.seen)
    await _stage_and_run(project, host)
    assert len(github.seen) == seen


def test_run_installs_what_is_missing_with_progress(tmp_path: Path, env, archives) -> None:
    github = GitHubStandIn("acme/artifacts", {"v1": [(p.name, p.read_bytes()) for p in archives.values()]},
                           latest="v1")
    _github_config(tmp_path / "home", "acme/artifacts")
    project = capsule(tmp_path, EXAMPLES)
    with serving(github) as url:
        done = murmurd("run", str(project), "--task", "tidy up", cwd=tmp_path,
                       env={**env, "MUR_GITHUB_API_BASE": url, "TEAM_TOKEN": "t"})
    assert done.returncode == 0, done.stderr
    assert "tidied" in done.stdout
    assert f"installing {TOOL}@1.2.0" in done.stderr and f"installed {SKILL}@0.3.0 from github:" in done.stderr
    _assert_locked(project, archives)


def test_an_unknown_version_from_the_sources_is_e_reg_001(tmp_path: Path, env, archives) -> None:
    github = GitHubStandIn("acme/artifacts", {"v1": [(p.name, p.read_bytes()) for p in archives.values()]},
                           latest="v1")
    _github_config(tmp_path / "home", "acme/artifacts")
    project = capsule(tmp_path, EXAMPLES)
    with serving(github) as url:
        done = murmurd("install", f"{TOOL}@9.9.9", cwd=project, env={**env, "MUR_GITHUB_API_BASE": url})
    assert done.returncode == 1
    assert error_of(done).startswith(f"error[E-REG-001]: could not resolve '{TOOL}@9.9.9'")
    assert "  github:acme/artifacts — " in done.stderr and "hint: run `murmurd doctor`" in done.stderr
    assert not (project / ".murmur" / "artifacts").exists() and not (project / "murmur.lock").exists()


async def test_from_a_nexus_registry(tmp_path: Path, env, archives, host) -> None:
    nexus = NexusStandIn(KEY, {(TOOL, "1.2.0"): archives[TOOL].read_bytes(),
                               (SKILL, "0.3.0"): archives[SKILL].read_bytes()})
    project = capsule(tmp_path, EXAMPLES)
    with serving(nexus) as url:
        missing_key = murmurd("install", "--registry", url, cwd=project, env=env)
        assert "NEXUS_API_KEY is required for remote registry mode. Set it or use local mode." in missing_key.stdout
        assert missing_key.returncode == 1
        wrong_key = murmurd("install", f"{TOOL}@1.2.0", "--registry", url, cwd=project,
                            env={**env, "NEXUS_API_KEY": "nope"})
        assert error_of(wrong_key).startswith(f"error[E-IO-003]: registry authentication failed for {url}.")
        nexus.wrong_sha = True
        tampered = murmurd("install", f"{TOOL}@1.2.0", "--registry", url, cwd=project,
                           env={**env, "NEXUS_API_KEY": KEY})
        assert tampered.returncode == 1
        assert error_of(tampered).startswith(f"error[E-REG-002]: artifact integrity check failed for {TOOL}@1.2.0")
        assert not (project / ".murmur" / "artifacts").exists()
        nexus.wrong_sha, nexus.omit_sha = False, True
        unsigned = murmurd("install", f"{TOOL}@1.2.0", "--registry", url, cwd=project,
                           env={**env, "NEXUS_API_KEY": KEY})
        assert error_of(unsigned).startswith("error[E-IO-003]: registry response missing x-murmur-sha256 header")
        nexus.omit_sha = False
        done = murmurd("install", "--registry", url, cwd=project, env={**env, "NEXUS_API_KEY": KEY})
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"Installed {TOOL}@1.2.0 from {url}" in done.stdout
    assert all(s.headers.get("authorization") == f"Bearer {KEY}" for s in nexus.seen[-2:])
    _assert_locked(project, archives)
    meta = json.loads((project / ".murmur/artifacts" / SKILL / "0.3.0" / f"{SKILL}-0.3.0.meta.json").read_text())
    assert meta["meta"]["artifact_runtime"] == ""  # upstream's placeholder for a Nexus download
    await _stage_and_run(project, host)


async def test_against_murmurds_own_registry_server(tmp_path: Path, env, archives, host) -> None:
    project = capsule(tmp_path, EXAMPLES)
    key_env = {**env, "NEXUS_API_KEY": KEY}
    with murmurd_registry(tmp_path / "served", KEY, env) as url:
        for path in archives.values():
            done = murmurd("publish", str(path), "--registry", url, cwd=tmp_path, env=key_env)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("Published ")
        again = murmurd("publish", str(archives[TOOL]), "--registry", url, cwd=tmp_path, env=key_env)
        assert again.returncode == 1 and error_of(again).startswith("error[E-REG-003]:")
        listing = httpx.get(f"{url}/v1/artifacts", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
        assert sorted((r["name"], r["version"], r["runtime"], r["artifact_runtime"]) for r in listing) == [
            (TOOL, "1.2.0", "wasm", "tool"), (SKILL, "0.3.0", "static", "skill")]
        fetched = httpx.get(f"{url}/v1/artifacts/{TOOL}/1.2.0", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert fetched.content == archives[TOOL].read_bytes()
        assert fetched.headers["x-murmur-sha256"] == sha(fetched.content)
        assert httpx.get(f"{url}/v1/artifacts", timeout=30).json() == {"error": "unauthorized"}
        traversal = httpx.get(f"{url}/v1/artifacts/..%2F..%2Fetc/passwd", headers={"Authorization": f"Bearer {KEY}"},
                              timeout=30)
        assert traversal.status_code in (400, 404) and b"root:" not in traversal.content
        unknown = murmurd("install", f"{TOOL}@9.9.9", "--registry", url, cwd=project, env=key_env)
        assert unknown.returncode == 1
        assert error_of(unknown).startswith(f"error[E-REG-001]: artifact {TOOL}@9.9.9 not found in registry")
        done = murmurd("install", "--registry", url, cwd=project, env=key_env)
        assert done.returncode == 0, done.stdout + done.stderr
    _assert_locked(project, archives)
    await _stage_and_run(project, host)


def test_a_reserved_version_is_refused_locally_and_by_the_server(tmp_path: Path, env, archives, artifacts) -> None:
    reserved = tmp_path / "dist" / f"{TOOL}-latest.mur.zip"
    reserved.write_bytes(tool_archive(artifacts.example("echo"), version="latest"))
    local = murmurd("publish", str(reserved), cwd=tmp_path, env=env)
    assert local.returncode == 1
    assert local.stderr.splitlines() == ["error[E-REG-004]: version 'latest' is reserved and cannot be published",
                                         "  hint: reserved strings: latest, stable, edge — use an explicit semver version"]
    with murmurd_registry(tmp_path / "served", KEY, env) as url:
        # the client refuses before contacting the server; the server refuses a direct upload too
        answer = httpx.post(f"{url}/v1/artifacts", params={"name": TOOL, "version": "Stable", "runtime": "wasm"},
                            content=reserved.read_bytes(), headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert answer.status_code == 422
        assert answer.json() == {"error": "reserved artifact version 'Stable' is not allowed"}
        remote = murmurd("publish", str(reserved), "--registry", url, cwd=tmp_path, env={**env, "NEXUS_API_KEY": KEY})
        assert remote.returncode == 1 and error_of(remote).startswith("error[E-REG-004]:")


async def test_a_tampered_store_archive_is_refused_against_the_lock(tmp_path: Path, env, archives, host) -> None:
    project = capsule(tmp_path, EXAMPLES)
    for path in archives.values():
        assert murmurd("install", str(path), cwd=project, env=env).returncode == 0
    await _stage_and_run(project, host)
    store = project / ".murmur/artifacts" / SKILL / "0.3.0"
    other = skill_archive(text="# Tidy\nNever tidy up.\n")  # consistent sidecar, different bytes
    (store / f"{SKILL}-0.3.0.mur.zip").write_bytes(other)
    (store / f"{SKILL}-0.3.0.sha256").write_text(sha(other))
    with pytest.raises(StagingError, match=rf"error\[E-REG-002\]: artifact integrity check failed for {SKILL}@0.3.0"):
        stage_capsule(project, host=host)
    doctor = murmurd("doctor", cwd=project, env=env)
    assert doctor.returncode == 1
    assert f"artifact integrity check failed for {SKILL}@0.3.0" in doctor.stdout
    assert f"expected sha256 (murmur.lock): {sha(archives[SKILL].read_bytes())}" in doctor.stdout
    assert "1 check passed" not in doctor.stdout and "2 checks passed, 1 error found." in doctor.stdout
    assert "Fix: tidy-skill: artifact on disk does not match murmur.lock — re-publish or delete the lock" in doctor.stdout
    (store / f"{SKILL}-0.3.0.sha256").write_text("0" * 64)  # bytes that disagree with their own sidecar
    with pytest.raises(StagingError, match=r"E-REG-002"):
        stage_capsule(project, host=host)


def test_a_lock_pin_that_conflicts_is_e_reg_005_and_writes_nothing(tmp_path: Path, env, archives, host) -> None:
    project = capsule(tmp_path, EXAMPLES)
    (project / "murmur.lock").write_text(yaml.safe_dump({"lock_version": 1, "artifacts": [
        {"name": TOOL, "resolved_version": "1.2.0", "sha256": {"wasm": "ab" * 32}}]}))
    before = (project / "murmur.lock").read_text()
    assert murmurd("publish", str(archives[TOOL]), cwd=tmp_path, env=env).returncode == 0  # into the global store
    done = murmurd("install", f"{TOOL}@1.2.0", cwd=project, env=env)
    assert done.returncode == 1
    assert error_of(done).startswith(f"error[E-REG-005]: murmur.lock conflict for '{TOOL}': pinned {TOOL}@1.2.0 "
                                  f"(sha256 {'ab' * 32}), but the registry now resolves {TOOL}@1.2.0 "
                                  f"(sha256 {sha(archives[TOOL].read_bytes())})")
    assert "hint: if this is an intentional upgrade, remove the stale entry from murmur.lock" in done.stderr
    assert (project / "murmur.lock").read_text() == before and not (project / ".murmur").exists()
    with pytest.raises(StagingError) as caught:  # and a launch refuses the pin and the missing entry
        stage_capsule(project, host=host)
    assert f"error[E-REG-002]: artifact integrity check failed for {TOOL}@1.2.0" in caught.value.problems[0]
    assert caught.value.problems[1].startswith(f"error[E-RUN-003]: murmur.lock missing artifact entry for '{SKILL}'")
    assert (project / "murmur.lock").read_text() == before and not (project / "workdir").exists()


def test_unsafe_entries_and_a_bomb_in_a_store_are_refused_at_staging(tmp_path: Path, env, host, monkeypatch) -> None:
    project = capsule(tmp_path, EXAMPLES)
    manifest = yaml.safe_dump({"name": TOOL, "version": "1.2.0", "runtime": "tool"}).encode()
    skill = skill_archive()
    for label, data, message in (
        ("dotdot", make_zip({"murmur.yaml": manifest, "../echo_tool.wasm": b"\0asm"}), "missing root .wasm file"),
        ("absolute", make_zip({"murmur.yaml": manifest, "/echo_tool.wasm": b"\0asm"}), "missing root .wasm file"),
        ("bomb", make_zip({"murmur.yaml": manifest, "echo_tool.wasm": b"\0" * 2_000_000}),
         "zip entry 'echo_tool.wasm' exceeds the 100000-byte decompression ceiling"),
    ):
        path = tmp_path / f"{label}.mur.zip"
        path.write_bytes(data)
        skill_path = tmp_path / f"{SKILL}-0.3.0.mur.zip"
        skill_path.write_bytes(skill)
        for item in (path, skill_path):
            assert murmurd("install", str(item), cwd=project, env=env).returncode == 0
        monkeypatch.setenv("MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES", "100000")
        with pytest.raises(StagingError) as caught:
            stage_capsule(project, host=host)
        text = str(caught.value)
        assert f"error[E-IO-003]: failed to read artifact archive for {TOOL}@1.2.0: {message}" in text, text
        assert not (project / "workdir").exists() and not (project / "murmur.lock").exists()
    # and `murmurd install` of a bomb's manifest is refused at the same ceiling
    bomb_manifest = tmp_path / "manifest-bomb.mur.zip"
    bomb_manifest.write_bytes(make_zip({"murmur.yaml": manifest + b"#" * 200_000}))
    done = murmurd("install", str(bomb_manifest), cwd=project,
                   env={**env, "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES": "100000"})
    assert done.returncode == 1 and "exceeds the 100000-byte decompression ceiling" in done.stderr
    assert error_of(done).startswith(f"error[E-IO-003]: {bomb_manifest} is not a valid .mur.zip:")


def test_doctor_reports_missing_and_lock_problems(tmp_path: Path, env, archives) -> None:
    project = capsule(tmp_path, EXAMPLES)
    done = murmurd("doctor", cwd=project, env=env)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"Checking {project / 'murmur.yaml'} for linux-x86_64..." or lines[0].startswith("Checking ")
    assert any(line.endswith("— missing") and TOOL in line for line in lines)
    assert f"Fix: murmurd install {TOOL}@1.2.0" in lines
    assert "1 check passed, 2 errors found." in lines
    assert murmurd("install", str(archives[TOOL]), cwd=project, env=env).returncode == 0
    assert murmurd("install", str(archives[SKILL]), cwd=project, env=env).returncode == 0
    (project / "murmur.lock").write_text(yaml.safe_dump({"lock_version": 1, "artifacts": [
        {"name": TOOL, "resolved_version": "1.1.0", "sha256": {"wasm": "ab" * 32}}]}))
    done = murmurd("doctor", cwd=project, env=env)
    assert done.returncode == 1
    assert (f"murmur.lock version mismatch for '{TOOL}': manifest requested 1.2.0, lock pinned 1.1.0"
            in done.stdout)
    assert f"murmur.lock missing artifact entry for '{SKILL}'" in done.stdout
    (project / "murmur.lock").write_text("lock_version: 2\nartifacts: []\n")
    done = murmurd("doctor", cwd=project, env=env)
    assert done.returncode == 1 and error_of(done).startswith("error[E-RUN-003]: invalid murmur.lock:")
    nowhere = murmurd("doctor", cwd=tmp_path, env=env)
    assert error_of(nowhere).startswith("error[E-IO-001]: no project root found")


def test_github_refs_bare_names_and_the_global_flag(tmp_path: Path, env, archives) -> None:
    github = GitHubStandIn("acme/artifacts", {
        "v1": [(archives[TOOL].name, archives[TOOL].read_bytes())],
        "v2": [(archives[SKILL].name, archives[SKILL].read_bytes()), ("notes.txt", b"not an artifact")]},
        latest="v2")
    _github_config(tmp_path / "home", "acme/artifacts")
    project = capsule(tmp_path, EXAMPLES)
    with serving(github) as url:
        run_env = {**env, "MUR_GITHUB_API_BASE": url, "GITHUB_TOKEN": "fallback"}
        tagged = murmurd("install", "github:acme/artifacts@v1", cwd=project, env=run_env)
        assert tagged.returncode == 0, tagged.stderr
        assert tagged.stdout.strip() == f"Installed {TOOL}@1.2.0 from github:acme/artifacts@v1"
        bare = murmurd("install", "-g", SKILL, cwd=tmp_path, env=run_env)  # latest release, global store, no lock
        assert bare.returncode == 0, bare.stderr
        missing = murmurd("install", "github:acme/artifacts@v9", cwd=project, env=run_env)
        assert missing.returncode == 1 and error_of(missing).startswith("error[E-IO-003]: no .mur.zip assets")
    # the configured source's `${TEAM_TOKEN}` is unset, so GITHUB_TOKEN is sent
    assert {s.headers.get("authorization") for s in github.seen} == {"Bearer fallback"}
    assert lock_of(project)[TOOL]["sha256"]["wasm"] == sha(archives[TOOL].read_bytes())
    assert SKILL not in lock_of(project)
    assert (tmp_path / "home/.murmur/artifacts" / SKILL / "0.3.0" / f"{SKILL}-0.3.0.mur.zip").read_bytes() == \
        archives[SKILL].read_bytes()


def test_build_packs_the_mur_zip_upstream_packs(tmp_path: Path, env, artifacts) -> None:
    import shutil
    import zipfile

    artifacts.example("echo")
    directory = tmp_path / "echo"
    shutil.copytree(EXAMPLES / "echo", directory, ignore=shutil.ignore_patterns("*.wasm", "*.mur.zip"))
    done = murmurd("build", str(directory), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    packed = directory / "echo-0.1.0.mur.zip"
    assert done.stdout.splitlines() == [str(directory / "echo.wasm"), str(packed)]
    with zipfile.ZipFile(packed) as archive:
        assert archive.namelist() == ["murmur.yaml", "echo.wasm"]
        assert archive.read("echo.wasm") == (directory / "echo.wasm").read_bytes()
    published = murmurd("publish", cwd=directory, env=env)  # no path: <name>-<version>.mur.zip here
    assert published.returncode == 0 and published.stdout.strip() == "Published echo@0.1.0"


def test_all_platforms_fills_the_global_store_per_platform(tmp_path: Path, env, archives) -> None:
    data = archives[TOOL].read_bytes()
    github = GitHubStandIn("acme/artifacts", {"1.2.0": [(f"{TOOL}-1.2.0-linux-x86_64.mur.zip", data),
                                                       (f"{TOOL}-1.2.0.mur.zip", data)]}, latest="1.2.0")
    _github_config(tmp_path / "home", "acme/artifacts")
    with serving(github) as url:
        done = murmurd("install", f"{TOOL}@1.2.0", "--all-platforms", cwd=tmp_path, env={**env, "MUR_GITHUB_API_BASE": url})
        assert done.returncode == 0, done.stderr
        refused = murmurd("install", TOOL, "--all-platforms", cwd=tmp_path, env={**env, "MUR_GITHUB_API_BASE": url})
        assert error_of(refused).startswith("error[E-IO-003]: --all-platforms requires an artifact reference")
    folder = tmp_path / "home/.murmur/artifacts" / TOOL / "1.2.0"
    assert {p.name for p in folder.iterdir()} == {f"{TOOL}-1.2.0-{p}.{ext}" for p in ("linux-x86_64", "darwin-aarch64")
                                                  for ext in ("mur.zip", "sha256")}
    assert done.stdout.splitlines()[0] == (f"Installed {TOOL}@1.2.0 (linux-x86_64) → ~/.murmur/artifacts/{TOOL}/1.2.0/"
                                           f"{TOOL}-1.2.0-linux-x86_64.mur.zip")


async def test_staging_installs_from_the_registry_the_manifest_names(tmp_path: Path, env, archives, host,
                                                                     monkeypatch) -> None:
    """`registry.remote_url` in murmur.yaml: a launch fetches what is missing from that Nexus
    registry (murmurd's own server here) into the project store, then pins it."""
    key_env = {**env, "NEXUS_API_KEY": KEY}
    with murmurd_registry(tmp_path / "served", KEY, env) as url:
        for path in archives.values():
            assert murmurd("publish", str(path), "--registry", url, cwd=tmp_path, env=key_env).returncode == 0
        project = capsule(tmp_path, EXAMPLES, registry={"remote_url": url + "/"})
        monkeypatch.setenv("NEXUS_API_KEY", KEY)
        progress: list[str] = []
        await _stage_and_run(project, host, progress)
    assert any(line.startswith(f"installed {SKILL}@0.3.0 from {url}") for line in progress), progress
    _assert_locked(project, archives)
    assert (project / ".murmur/artifacts" / TOOL / "1.2.0" / f"{TOOL}-1.2.0.mur.zip").read_bytes() == \
        archives[TOOL].read_bytes()
    validated = murmurd("validate", str(project), cwd=tmp_path, env=env)
    assert validated.returncode == 0 and "registry" not in validated.stdout + validated.stderr  # a known key


def test_serve_installs_what_is_missing_then_answers(tmp_path: Path, env, archives) -> None:
    import a2akit

    github = GitHubStandIn("acme/artifacts", {"v1": [(p.name, p.read_bytes()) for p in archives.values()]},
                           latest="v1")
    _github_config(tmp_path / "home", "acme/artifacts")
    project = capsule(tmp_path, EXAMPLES)
    with serving(github) as url:
        with a2akit.serving(project, tmp_path / "state", env={**env, "MUR_GITHUB_API_BASE": url}) as served:
            task = served.send("tidy up")
            done = served.wait_state(task["id"], "completed", "failed", timeout=120)
            assert done["status"]["state"] == "completed", done
            assert any(f"installed {TOOL}@1.2.0 from github:acme/artifacts@v1" in line for line in served.stderr)
    _assert_locked(project, archives)
