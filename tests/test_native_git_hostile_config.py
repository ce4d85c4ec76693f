"""murmur-tool-git against configuration the guest wrote (attack review, issue 28): a repository's
`.git/config`, its `.gitattributes` or the synthetic HOME's `.gitconfig` naming commands (an
fsmonitor hook, a filter driver, a hooks path, a remote's upload-pack, an ext:: URL) never has git
run them: the tool would otherwise run `sh -c <anything>` for a capsule granting no shell."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nativetoolkit import git_repo, native_calls

pytestmark = pytest.mark.anyio
GIT = "murmur-tool-git"


def marker_command(workdir: Path, name: str) -> str:
    return f"echo pwned > {workdir / name}; false"


def fsmonitor(workdir: Path) -> None:
    repo = git_repo(workdir)
    with open(repo / ".git" / "config", "a") as handle:
        handle.write(f'[core]\n\tfsmonitor = "{marker_command(workdir, "marker")}"\n')


def filter_driver(workdir: Path) -> None:
    repo = git_repo(workdir)
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    with open(repo / ".git" / "config", "a") as handle:
        handle.write(f'[filter "evil"]\n\tclean = "{marker_command(workdir, "marker")}"\n')


def home_config(workdir: Path) -> None:
    git_repo(workdir)
    home = workdir / ".capsule-home"
    home.mkdir(exist_ok=True)
    (home / ".gitconfig").write_text(f'[core]\n\tfsmonitor = "{marker_command(workdir, "marker")}"\n')


def upload_pack(workdir: Path) -> None:
    repo = git_repo(workdir)
    with open(repo / ".git" / "config", "a") as handle:
        handle.write(f'[remote "origin"]\n\turl = {repo}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
                     f'\tuploadpack = "{marker_command(workdir, "marker")}"\n')


VECTORS = {"fsmonitor": (fsmonitor, {"operation": "status", "repo": "proj"}),
           "filter": (filter_driver, {"operation": "add", "repo": "proj", "paths": ["calc.py"]}),
           "home-gitconfig": (home_config, {"operation": "status", "repo": "proj"}),
           "uploadpack": (upload_pack, {"operation": "fetch", "repo": "proj", "remote": "origin"})}


@pytest.mark.parametrize("vector", sorted(VECTORS))
async def test_commands_named_by_guest_written_git_config_never_run(tmp_path: Path, host, vector: str) -> None:
    prepare, call = VECTORS[vector]
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [call], prepare=prepare)
    assert not (staged.workdir.root / "marker").exists(), (vector, texts)
    if vector in ("filter", "uploadpack"):  # named by a driver or a remote: the repository is refused
        assert errors == [True] and "its git configuration names commands git would run" in texts[0], texts
    else:  # a key pinned on git's command line: the call goes on without it
        assert errors == [False] and json.loads(texts[0])["entries"][0]["path"] == "calc.py", texts


async def test_an_ext_url_never_runs_even_when_the_guest_allows_the_protocol(tmp_path: Path, host) -> None:
    def prepare(workdir: Path) -> None:
        git_repo(workdir)
        home = workdir / ".capsule-home"
        home.mkdir(exist_ok=True)
        (home / ".gitconfig").write_text("[protocol]\n\tallow = always\n")
    url = f"ext::sh -c echo% pwned% >% {tmp_path}/ext-marker"
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [
        {"operation": "clone", "url": url, "dest": "copy"},
        {"operation": "status", "repo": "proj"},
    ], prepare=prepare)
    assert not (tmp_path / "ext-marker").exists(), texts
    assert errors == [True, False], texts
    assert json.loads(texts[1])["entries"][0]["path"] == "calc.py"



def submodule_filter(workdir: Path) -> None:
    """A submodule whose own config (`.git/modules/sub/config`) names a filter driver: the
    superproject's status runs a status in the submodule, which would clean files through it."""
    repo = git_repo(workdir)
    lib = workdir / "lib"
    lib.mkdir()
    run = lambda where, *args: subprocess.run(["git", "-C", str(where), "-c", "protocol.file.allow=always", *args],  # noqa: E731
                                              check=True, capture_output=True)
    run(lib, "init", "-q", "-b", "main")
    (lib / "code.txt").write_text("x\n")
    (lib / ".gitattributes").write_text("*.txt filter=evil\n")
    run(lib, "add", ".")
    run(lib, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "lib")
    run(repo, "submodule", "add", "-q", str(lib), "sub")
    run(repo, "commit", "-qm", "sub")
    with open(repo / ".git" / "modules" / "sub" / "config", "a") as handle:
        handle.write(f'[filter "evil"]\n\tclean = "{marker_command(workdir, "marker")}"\n')
    (repo / "sub" / "code.txt").write_text("y\n")


async def test_a_submodules_own_config_is_checked_too(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [{"operation": "status", "repo": "proj"}],
                                               prepare=submodule_filter)
    assert not (staged.workdir.root / "marker").exists(), texts
    assert errors == [True] and "filter.evil.clean" in texts[0], texts


def push_target(workdir: Path) -> None:
    """A local repository pushed to whose own config runs a smudge filter when the push updates
    its checked-out branch (`receive.denyCurrentBranch=updateInstead`)."""
    repo = git_repo(workdir)
    run = lambda where, *args: subprocess.run(["git", "-C", str(where), *args], check=True, capture_output=True)  # noqa: E731
    run(workdir, "clone", "-q", str(repo), "target")
    target = workdir / "target"
    with open(target / ".git" / "config", "a") as handle:
        handle.write(f'[receive]\n\tdenyCurrentBranch = updateInstead\n'
                     f'[filter "evil"]\n\tsmudge = "{marker_command(workdir, "marker")}"\n')
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    run(repo, "add", ".")
    run(repo, "commit", "-qm", "attributes")
    run(repo, "remote", "add", "target", str(target))


async def test_a_local_remote_pushed_to_is_checked_too(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [
        {"operation": "push", "repo": "proj", "remote": "target", "branch": "main"},
        {"operation": "push", "repo": "proj", "remote": "../target", "branch": "main"},
        {"operation": "clone", "url": "target", "dest": "copy"},
        {"operation": "clone", "url": "proj", "dest": "copy2"},
    ], prepare=push_target)
    assert not (staged.workdir.root / "marker").exists(), texts
    assert errors == [True, True, True, False], texts
    assert all("filter.evil.smudge" in text for text in texts[:3]), texts


def submodule_gitdir_elsewhere(workdir: Path) -> None:
    """The submodule's `.git` is a file naming a git dir outside the superproject's."""
    submodule_filter(workdir)
    repo = workdir / "proj"
    hidden = workdir / "hidden"
    (repo / ".git" / "modules" / "sub").rename(hidden)
    (repo / "sub" / ".git").write_text(f"gitdir: {hidden}\n")
    subprocess.run(["git", "config", "--file", str(hidden / "config"), "core.worktree", str(repo / "sub")], check=True)


async def test_a_submodule_git_dir_named_by_a_git_file_is_checked_too(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [{"operation": "status", "repo": "proj"}],
                                               prepare=submodule_gitdir_elsewhere)
    assert not (staged.workdir.root / "marker").exists(), texts
    assert errors == [True] and "filter.evil.clean" in texts[0], texts
