"""murmur-tool-registry-search, bundled by name (issue 28 item 2), through real sessions: the
native tool runs contained; `registry: local` searches the real project store that
`murmurd build` + `murmurd install` filled in the test; an index URL is served on loopback
(through the capsule's network grant); an index outside the workdir stays unreadable under
`scoped`; bad input is a clear error result."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loopkit import driver_capsule, run_tasks, trace_events
from murmurd.containment.host import probe_host
from murmurd.containment.plan import plan_containment
from murmurd.manifest.writing import dump_yaml
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import stage_capsule

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
TOOL = "murmur-tool-registry-search"
HERE = plan_containment(probe_host(), "auto")
DEBIAN_PATH = "/usr/bin:/bin"


def calls(*inputs: dict[str, Any]) -> dict[str, Any]:
    responses = [{"stop_reason": "tool_call", "content": [{"type": "tool_call", "id": f"c{i}", "name": TOOL,
                                                           "input": value}]} for i, value in enumerate(inputs)]
    return {"responses": [*responses, {"stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}]}]}


def native_artifact(root: Path, name: str, description: str, tags: list[str]) -> Path:
    directory = root / name
    (directory / "bin").mkdir(parents=True)
    (directory / "murmur.yaml").write_text(dump_yaml({
        "name": name, "version": "1.4.0", "runtime": "tool", "implementation": "native",
        "description": description, "tags": tags, "requires_files": [f"bin/{name}"]}))
    exe = directory / "bin" / name
    exe.write_text('#!/bin/sh\necho \'{"status": "passed", "summary": "ok"}\'\n')
    exe.chmod(0o755)
    return directory


def murmurd(*args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "murmurd", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def results(text: str) -> dict[str, Any]:
    return json.loads(text)


@contextmanager
def index_server(index: dict[str, Any]) -> Iterator[str]:
    body = json.dumps(index).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/artifacts-index.json":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_local_searches_the_project_store_ranked_and_cut_to_the_limit(tmp_path: Path, host) -> None:
    sources = tmp_path / "src"
    archives = [murmurd("build", str(native_artifact(sources, name, description, tags)), cwd=ROOT).split()[1]
                for name, description, tags in [
                    ("word-count", "Counts words in a file.", ["text"]),
                    ("word", "The exact-name match.", []),
                    ("line-tools", "Line and word utilities.", ["lines"]),
                    ("csv-reader", "Reads CSV files.", ["table", "wordy"]),
                    ("unrelated", "Nothing to see.", ["misc"]),
                ]]
    capsule = driver_capsule(tmp_path, "scripted-driver", calls(
        {"query": "Word", "registry": "local"},
        {"query": "word", "registry": "local", "limit": 2},
        {"query": "zebra", "registry": "local"},
    ), extra_artifacts=[{"name": TOOL, "runtime": "tool", "version": "0.1.0"}])
    for archive in archives:  # the real project store: <capsule>/.murmur/artifacts/<name>/<version>/
        murmurd("install", archive, cwd=capsule)
    assert (capsule / ".murmur" / "artifacts" / "word-count" / "1.4.0" / "word-count-1.4.0.meta.json").is_file()

    staged = stage_capsule(capsule, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                           env={**os.environ, "PATH": DEBIAN_PATH})
    assert staged.artifacts[TOOL].resolved.native and staged.artifacts[TOOL].resolved.origin.startswith("bundled:")
    (outcome,) = await run_tasks(staged, host, "find me a word tool")
    assert outcome.exit_status == "ok", outcome.error
    every, cut, none = [results(m.text) for m in outcome.messages if m.role == "tool"]

    names = [r["name"] for r in every["results"]]
    assert names[:2] == ["word", "word-count"]  # exact, then prefix
    assert sorted(names[2:]) == ["csv-reader", "line-tools"]  # description and tag substrings
    assert "unrelated" not in names and every["count"] == 4
    first = every["results"][0]
    assert first == {"name": "word", "version": "1.4.0", "runtime": "tool", "description": "The exact-name match.",
                     "published_date": ""}
    assert [r["name"] for r in cut["results"]] == ["word", "word-count"] and cut["count"] == 2
    assert none == {"results": [], "count": 0}
    traced = [e for e in trace_events(staged) if e["event_type"] == "tool_call"]
    assert [e["status"] for e in traced] == ["ok", "ok", "ok"]


async def test_an_index_url_on_loopback_and_the_index_checks(tmp_path: Path, host) -> None:
    index = {"schema_version": "1", "updated_at": "2026-11-30T12:00:00Z", "artifacts": [
        {"name": "murmur-tool-git", "version": "0.1.0", "runtime": "tool", "description": "Typed git.",
         "tags": ["tool", "git"], "platforms": ["linux-x86_64"]},
        {"name": "murmur-driver-deepseek", "version": "0.1.0", "runtime": "driver",
         "tags": ["driver", "deepseek", "inference"], "platforms": []},
    ]}
    outside = tmp_path / "outside-index.json"
    outside.write_text(json.dumps(index))
    with index_server(index) as origin, index_server({**index, "schema_version": "2"}) as bad_origin:
        capsule = driver_capsule(tmp_path, "scripted-driver", calls(
            {"query": "deepseek", "registry": f"{origin}/artifacts-index.json"},
            {"query": "git", "registry": f"{bad_origin}/artifacts-index.json"},
            {"query": "git", "registry": str(outside)},
            {"registry": "local"},
        ), extra_artifacts=[{"name": TOOL, "runtime": "tool"}],
            capabilities={"network": {"allow": [origin, bad_origin]}})
        staged = stage_capsule(capsule, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                               env={**os.environ, "PATH": DEBIAN_PATH})
        (outcome,) = await run_tasks(staged, host, "search")
    assert outcome.exit_status == "ok", outcome.error
    found, schema, unreadable, no_query = [m for m in outcome.messages if m.role == "tool"]
    assert results(found.text) == {"results": [{
        "name": "murmur-driver-deepseek", "version": "0.1.0", "runtime": "driver", "description": "\u2014",
        "published_date": "2026-11-30T12:00:00Z"}], "count": 1}
    assert schema.is_error and "schema_error" in schema.text and "expected \"1\"" in schema.text
    assert no_query.is_error and "query is required" in no_query.text
    if HERE.achieved == "scoped":  # a host file outside the workdir is not the tool's to read
        assert unreadable.is_error and "io_error: cannot read" in unreadable.text


async def test_local_reads_the_stores_staging_resolves_through_project_then_global(tmp_path: Path, host,
                                                                                   monkeypatch) -> None:
    from murmurd.paths import cache_dir

    monkeypatch.setenv("MURMUR_CACHE_DIR", str(cache_dir()))  # the build cache stays where it is
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MURMUR_REGISTRY", str(tmp_path / "directory-registry"))
    sources = tmp_path / "src"
    archive = {name: murmurd("build", str(native_artifact(sources, name, f"{name} does alpha things.", [])),
                             cwd=ROOT).split()[1] for name in ("alpha-shared", "alpha-project", "alpha-global")}
    capsule = driver_capsule(tmp_path, "scripted-driver", calls({"query": "alpha", "registry": "local"}),
                             extra_artifacts=[{"name": TOOL, "runtime": "tool"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home)}
    for name, flags in (("alpha-shared", ["-g"]), ("alpha-global", ["-g"]), ("alpha-shared", []),
                        ("alpha-project", [])):
        proc = subprocess.run([sys.executable, "-m", "murmurd", "install", *flags, archive[name]], capture_output=True,
                              text=True, timeout=300, cwd=capsule, env=env)
        assert proc.returncode == 0, proc.stderr
    assert (home / ".murmur" / "artifacts" / "alpha-global" / "1.4.0").is_dir()

    staged = stage_capsule(capsule, host=host, registry=None, env={**os.environ, "PATH": DEBIAN_PATH})
    assert [Path(s.root) for s in staged.registry.stores] == [capsule / ".murmur" / "artifacts",
                                                              home / ".murmur" / "artifacts"]
    (outcome,) = await run_tasks(staged, host, "what alpha tools are installed?")
    assert outcome.exit_status == "ok", outcome.error
    (found,) = [results(m.text) for m in outcome.messages if m.role == "tool"]
    # one tier (name prefix): the project store's entries, then the global store's; a version in both once
    assert [r["name"] for r in found["results"]] == ["alpha-project", "alpha-shared", "alpha-global"]
