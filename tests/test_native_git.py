"""murmur-tool-git, bundled (issue 28 item 2): commits and diffs in a real repository through a
real session, the capsule naming no `git` in `shell.allow` (the binary runs inside the tool,
under the capsule's containment); caller values that would smuggle flags are refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nativetoolkit import as_json, git_repo, native_calls

pytestmark = pytest.mark.anyio
GIT = "murmur-tool-git"


def make_repo(workdir: Path) -> None:
    """The shared repository (nativetoolkit.git_repo), and a file git does not track yet."""
    (git_repo(workdir) / "notes.txt").write_text("todo\n")


async def test_the_git_tool_reads_stages_commits_and_diffs_a_real_repository(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [
        {"operation": "status", "repo": "proj"},
        {"operation": "diff", "repo": "proj"},
        {"operation": "add", "repo": "proj", "paths": ["calc.py", "notes.txt"]},
        {"operation": "diff", "repo": "proj", "staged": True, "path": "calc.py"},
        {"operation": "commit", "repo": "proj", "message": "calc: fix add\n\nit subtracted"},
        {"operation": "commit", "repo": "proj", "message": "again"},
        {"operation": "log", "repo": "proj", "n": 5},
        {"operation": "show", "repo": "proj"},
        {"operation": "branch", "repo": "proj", "subcommand": "create", "name": "feature"},
        {"operation": "switch", "repo": "proj", "branch": "feature"},
        {"operation": "branch", "repo": "proj", "subcommand": "list"},
        {"operation": "show", "repo": "proj", "ref": "nosuchref"},
    ], prepare=make_repo)
    assert staged.manifest.capabilities.shell is None  # no git for the capsule's shell
    assert errors == [False] * 5 + [True] + [False] * 5 + [True], texts
    status = json.loads(texts[0])["entries"]
    assert status == [{"path": "calc.py", "status": "modified", "status_code": " M"},
                      {"path": "notes.txt", "status": "untracked", "status_code": "??"}]
    assert "-    return a - b\n+    return a + b" in json.loads(texts[1])["diff"]
    assert json.loads(texts[2]) == {"staged": ["calc.py", "notes.txt"]}
    staged_diff = json.loads(texts[3])["diff"]
    assert "diff --git a/calc.py b/calc.py" in staged_diff and "notes.txt" not in staged_diff
    commit = json.loads(texts[4])
    real_head = subprocess.run(["git", "-C", str(staged.workdir.root / "proj"), "rev-parse", "HEAD"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert commit["hash"] == real_head and commit["short_hash"] == real_head[:7]
    assert commit["subject"] == "calc: fix add"
    assert texts[5].startswith("nothing to commit")
    commits = json.loads(texts[6])["commits"]
    assert [c["subject"] for c in commits] == ["calc: fix add", "calc: add"]
    assert commits[0]["author"] == "Ada Test" and commits[0]["hash"] == real_head
    shown = json.loads(texts[7])
    assert shown["commit"]["body"] == "it subtracted" and "+    return a + b" in shown["diff"]
    assert json.loads(texts[8]) == {"name": "feature"}
    assert json.loads(texts[9]) == {"branch": "feature"}
    assert json.loads(texts[10])["branches"] == [{"name": "feature", "current": True, "upstream": None},
                                                 {"name": "main", "current": False, "upstream": None}]
    assert texts[11] == "ref 'nosuchref' not found"
    log = (staged.workdir.root / "logs" / f"tool-{GIT}.log").read_text()
    assert "commit: repo='proj'" in log  # upstream's plain-text trace lines


async def test_flags_smuggled_through_fields_and_bad_requests_are_refused(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [
        {"operation": "checkout", "repo": "proj", "ref": "--patch"},
        {"operation": "branch", "repo": "proj", "subcommand": "create", "name": "-D"},
        {"operation": "reset", "repo": "proj", "mode": "hard", "ref": "--output=/tmp/x"},
        {"operation": "add", "repo": "proj", "paths": []},
        {"operation": "rebase", "repo": "proj"},
        {"operation": "reset", "repo": "proj"},
        {"operation": "status", "repo": "proj"},
    ], prepare=make_repo)
    assert errors == [True] * 6 + [False], texts
    assert texts[0] == ("ref '--patch' starts with '-' (a denied flag): checkout takes no flags through its "
                        "fields beyond its allowed_flags")
    assert texts[1].startswith("name '-D' starts with '-'")
    assert texts[2].startswith("ref '--output=/tmp/x' starts with '-'")
    assert texts[3] == "paths must not be empty"
    assert texts[4] == "unknown operation: rebase"
    assert texts[5] == "missing required field: mode (soft|mixed|hard)"
    assert len(json.loads(texts[6])["entries"]) == 2  # nothing above changed the repository
    assert not Path("/tmp/x").exists() or Path("/tmp/x").stat().st_mtime < staged.workdir.root.stat().st_mtime
    assert as_json(texts[6])["entries"][0]["path"] == "calc.py"


async def test_symbol_history_follows_a_code_graph_symbol_through_its_commits(tmp_path: Path, host) -> None:
    add = "python://proj/calc#add(a,b)"
    texts, errors, _ = await native_calls(tmp_path, host, GIT, [
        {"operation": "symbol_history", "repo": "proj", "symbol_id": add},
        {"operation": "commit", "repo": "proj", "message": "never staged"},
        {"operation": "add", "repo": "proj", "paths": ["calc.py"]},
        {"operation": "commit", "repo": "proj", "message": "calc: fix add"},
        ("murmur-tool-code-graph", {"operation": "index_repository", "repo_path": "proj"}),
        {"operation": "symbol_history", "repo": "proj", "symbol_id": add, "n": 5},
        {"operation": "symbol_history", "repo": "proj", "symbol_id": "python://proj/calc#nope()"},
    ], prepare=make_repo, also=("murmur-tool-code-graph",))
    assert errors == [True, True, False, False, False, False, True], texts
    assert texts[0].startswith("no code graph at ") and "index_repository first" in texts[0]
    assert texts[1].startswith("nothing to commit")
    history = json.loads(texts[5])
    assert (history["file"], history["start_line"], history["end_line"]) == ("calc.py", 1, 2)
    assert [c["subject"] for c in history["commits"]] == ["calc: fix add", "calc: add"]
    assert texts[6] == "symbol 'python://proj/calc#nope()' not found in the code graph"


async def test_stash_tag_merge_remote_clone_and_worktree(tmp_path: Path, host) -> None:
    texts, errors, staged = await native_calls(tmp_path, host, GIT, [
        {"operation": "stash", "repo": "proj", "subcommand": "push", "message": "wip fix"},
        {"operation": "stash", "repo": "proj", "subcommand": "list"},
        {"operation": "stash", "repo": "proj", "subcommand": "pop"},
        {"operation": "add", "repo": "proj", "paths": ["calc.py"]},
        {"operation": "commit", "repo": "proj", "message": "calc: fix add"},
        {"operation": "tag", "repo": "proj", "subcommand": "create", "name": "v1", "message": "first release"},
        {"operation": "tag", "repo": "proj", "subcommand": "list"},
        {"operation": "checkout", "repo": "proj", "ref": "side", "create": True},
        {"operation": "checkout", "repo": "proj", "ref": "main"},
        {"operation": "merge", "repo": "proj", "branch": "side"},
        {"operation": "remote", "repo": "proj", "subcommand": "add", "name": "origin", "url": "../upstream.git"},
        {"operation": "remote", "repo": "proj", "subcommand": "list"},
        {"operation": "clone", "url": "proj", "dest": "copy"},
        {"operation": "clone", "url": "proj", "dest": "copy"},
        {"operation": "worktree", "repo": "proj", "subcommand": "add", "path": "../proj-side", "branch": "side"},
        {"operation": "worktree", "repo": "proj", "subcommand": "list"},
        {"operation": "reset", "repo": "proj", "mode": "hard", "ref": "HEAD~1"},
    ], prepare=make_repo)
    assert errors == [False] * 13 + [True] + [False] * 3, texts
    assert json.loads(texts[0]) == {"stash_ref": "stash@{0}"}
    assert json.loads(texts[1])["entries"] == [{"index": 0, "message": "On main: wip fix", "branch": "main"}]
    tag = json.loads(texts[5])
    assert tag["name"] == "v1" and json.loads(texts[6])["tags"] == [{"name": "v1", "ref": tag["ref"]}]
    assert json.loads(texts[7]) == {"branch": "side", "detached": False}
    assert json.loads(texts[9]) == {"merged_commit": None, "fast_forward": False}  # already up to date
    assert json.loads(texts[11])["remotes"] == [{"name": "origin", "fetch_url": "../upstream.git",
                                                 "push_url": "../upstream.git"}]
    assert json.loads(texts[12]) == {"dest": "copy", "default_branch": "main"}
    assert (staged.workdir.root / "copy" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert texts[13] == "destination 'copy' already exists"
    trees = json.loads(texts[15])["worktrees"]
    assert [t["branch"] for t in trees] == ["main", "side"] and trees[1]["path"].endswith("/proj-side")
    head = json.loads(texts[16])["ref"]
    log = subprocess.run(["git", "-C", str(staged.workdir.root / "proj"), "log", "--format=%H %s", "-1"],
                         capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert log == [head, "calc: add\n"]
