"""What a context costs (issue 29, items 1 and 2).

- Opening a context session lays down bytes rendered once per capsule: with every PyYAML
  serialization made to fail after staging, a context session still opens, runs a task and
  holds the same files as a session staged the slow way; once the capsule URL changes (what the
  template was rendered from), opening one re-renders, and the same trap catches it. Nor does a
  new context session compute the effective grants or the shell's containment plan again.
- Threads are O(bound), not O(contexts): 300 one-turn tasks, each in a new context, through a
  real `murmurd serve` on loopback; the process's thread count (/proc/PID/status) stays under
  the bound plus a constant the whole time (a writer thread per session made it grow with every
  context until each idled out).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from a2akit import chaos_capsule, serving
from murmurd.host import ComponentHost
from murmurd.session.session import Session, TaskSpec
from murmurd.staging.session_hold import exclusive
from murmurd.staging.sessions import open_session_staging
from murmurd.staging.stage import stage_capsule

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")


class Serialized(AssertionError):
    pass


def _refuse(*_args, **_kwargs):
    raise Serialized("a manifest was serialized with PyYAML, or a session's shared value computed again")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and p.name not in ("trace.jsonl", "task.md", "result.txt", "bootstrap.log")}


async def test_opening_a_context_session_serializes_no_manifest(tmp_path: Path, host: ComponentHost,
                                                                monkeypatch) -> None:
    skill = tmp_path / "tidy"
    skill.mkdir()
    (skill / "SKILL.md").write_text("Keep it tidy.\n")
    capsule = chaos_capsule(tmp_path, capabilities={"shell": {"allow": ["sh"]}})
    manifest = yaml.safe_load((capsule / "murmur.yaml").read_text())
    manifest["artifacts"].append({"name": "tidy", "runtime": "skill", "source": str(skill), "local_source": True})
    (capsule / "murmur.yaml").write_text(yaml.safe_dump(manifest))
    staged = await asyncio.to_thread(stage_capsule, capsule, host=host)

    # From here on every PyYAML serialization raises (the emitter is where each dump goes).
    monkeypatch.setattr(yaml.emitter.Emitter, "__init__", _refuse)
    opened = await asyncio.to_thread(open_session_staging, staged)
    session = Session(opened, host)
    await session.open()
    outcome = await session.run_task(TaskSpec("tsk_" + "1" * 32, "hello"))
    await session.close()
    assert outcome.ok, outcome.error
    assert outcome.result_text == "answer: hello"

    # The same tree as the staged session's, MURMUR.md apart from its session id.
    mine, theirs = _files(opened.workdir.root), _files(staged.workdir.root)
    assert sorted(mine) == sorted(theirs)
    assert {"tools/echo/murmur.yaml", "tools/tidy/skill.md", "tools/sh/murmur.yaml", "MURMUR.md"} <= set(mine)
    for name, data in theirs.items():
        expected = data.replace(staged.session_id.encode(), opened.session_id.encode())
        assert mine[name] == expected, name
    assert (opened.workdir.root / "tools/ask").is_dir()
    # The same directories (upstream's: `tools/` at staging; the staged session's `logs/` holds the
    # note staging wrote), then only what was written: `out/` with the task's result, none empty.
    def dirs(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}

    assert dirs(opened.workdir.root) == dirs(staged.workdir.root) - {"logs"} | {"out"}
    assert all(any(p.iterdir()) for p in opened.workdir.root.rglob("*") if p.is_dir())

    # The trap is live: what the template was rendered from changes, the next open re-renders.
    staged.capsule_url = "localhost:1"
    with pytest.raises(Serialized):
        open_session_staging(staged)


async def test_a_context_session_computes_no_grant_or_containment_again(tmp_path: Path, host: ComponentHost,
                                                                       monkeypatch) -> None:
    """What every session of a capsule computes alike (`session_start`'s effective grants, the
    shell's containment plan) is computed once: with both made to fail after the first session,
    a second context session opens and runs, and its `session_start` says the same. A change of
    what they are computed from (the grants object) computes each again: trapped one at a time,
    each trap catches it."""
    import murmurd.session.session as session_module
    import murmurd.session.tools as tools_module
    from murmurd.staging.grants import containment_plan, effective_grants

    capsule = chaos_capsule(tmp_path, capabilities={"shell": {"allow": ["sh"]}})
    staged = await asyncio.to_thread(stage_capsule, capsule, host=host)

    async def one_task(task_id: str) -> dict:
        opened = await asyncio.to_thread(open_session_staging, staged)
        try:
            session = Session(opened, host)
        except BaseException:
            opened.fresh.close()  # the hold and the trace the session would have taken
            raise
        try:
            await session.open()
            outcome = await session.run_task(TaskSpec(task_id, "hello"))
        finally:
            await session.close()
        assert outcome.ok, outcome.error
        lines = (opened.workdir.root / "trace.jsonl").read_text().splitlines()
        return next(e for e in map(json.loads, lines) if e["event_type"] == "session_start")

    first = await one_task("tsk_" + "4" * 32)
    monkeypatch.setattr(session_module, "effective_grants", _refuse)
    monkeypatch.setattr(tools_module, "containment_plan", _refuse)
    second = await one_task("tsk_" + "5" * 32)
    assert second["effective_grants"] == first["effective_grants"]
    assert first["effective_grants"] == json.loads(json.dumps(
        effective_grants(staged.manifest, staged.grants, env=staged.host_env)))

    staged.grants = replace(staged.grants)  # another object: the containment plan is computed again
    with pytest.raises(Serialized):
        await one_task("tsk_" + "6" * 32)  # refused as the session is made (its shell policy)

    monkeypatch.setattr(tools_module, "containment_plan", containment_plan)
    staged.grants = replace(staged.grants)  # and the effective grants, at the task's session_start
    with pytest.raises(Serialized):
        await one_task("tsk_" + "7" * 32)


async def test_a_fresh_workdir_is_held_from_its_laying_down_and_its_session_traces_into_it(
        tmp_path: Path, host: ComponentHost) -> None:
    staged = await asyncio.to_thread(stage_capsule, chaos_capsule(tmp_path), host=host)
    opened = await asyncio.to_thread(open_session_staging, staged)
    root = opened.workdir.root
    with exclusive(root) as free:
        assert not free  # held from the moment it exists: `murmurd gc` leaves it alone
    session = Session(opened, host)  # takes the hold and the trace laying down left open
    await session.open()
    outcome = await session.run_task(TaskSpec("tsk_" + "2" * 32, "hello"))
    with exclusive(root) as free:
        assert not free
    await session.close()
    assert outcome.ok, outcome.error
    events = [json.loads(line) for line in (root / "trace.jsonl").read_text().splitlines()]
    assert [e["event_type"] for e in events][:2] == ["task_start", "session_start"]
    assert events[-1]["event_type"] == "task_end" and {e["session_id"] for e in events} == {opened.session_id}
    with exclusive(root) as free:
        assert free  # closed: the hold is gone

    # Nobody took what laying down left open: dropping it lets the directory go.
    unused = await asyncio.to_thread(open_session_staging, staged)
    with exclusive(unused.workdir.root) as free:
        assert not free
    unused.fresh.close()
    with exclusive(unused.workdir.root) as free:
        assert free
    # A copy pointing elsewhere never takes another workdir's trace.
    other = await asyncio.to_thread(open_session_staging, staged)
    elsewhere = replace(other, workdir=replace(other.workdir, root=unused.workdir.root))
    stray = Session(elsewhere, host)
    await stray.close()
    kept = other.fresh.take_trace()  # still there: the stray session did not take it
    assert kept is not None
    os.close(kept)
    other.fresh.close()
    assert (unused.workdir.root / "trace.jsonl").read_text() == ""
    assert (other.workdir.root / "trace.jsonl").read_text() == ""


def _threads(pid: int) -> int:
    """Threads of the daemon and of its WASM worker processes (its children)."""
    def read(path: Path) -> str:
        try:
            return path.read_text()
        except (FileNotFoundError, ProcessLookupError):  # a thread or child that ended meanwhile
            return ""

    children = [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in read(task / "children").split()]
    lines = [line for member in (pid, *children) for line in read(Path(f"/proc/{member}/status")).splitlines()]
    return sum(int(line.split()[1]) for line in lines if line.startswith("Threads:"))


BOUND = 8
CONTEXTS = 300
# The daemon: the loop, uvicorn, the default executor, the store, the trace drain, the WASM pool
# (the bound plus a few); its worker process: a thread per call in flight (at most the pool's)
# and its ticker and run gate.
CONSTANT = 40


def test_threads_stay_under_the_bound_plus_a_constant_across_many_contexts(tmp_path: Path) -> None:
    capsule = chaos_capsule(tmp_path, lifecycle={"task_acceptance": "queue", "queue_depth": 10_000})
    with serving(capsule, tmp_path / "state", "--max-concurrent-tasks", str(BOUND)) as served:
        pid = served.proc.pid
        seen: list[int] = []

        def send(client: httpx.Client, k: int) -> None:
            message = {"messageId": f"m{k}", "role": "user", "parts": [{"text": f"task {k}"}]}
            body = {"jsonrpc": "2.0", "id": k, "method": "message/send",
                    "params": {"message": message, "configuration": {"blocking": True}}}
            answer = client.post(served.url, json=body, timeout=120).json()["result"]
            assert answer["status"]["state"] == "completed", answer
            if k % 10 == 0:
                seen.append(_threads(pid))

        def client_share(offset: int) -> None:
            with httpx.Client() as client:
                for k in range(offset, CONTEXTS, BOUND):
                    send(client, k)

        started = time.monotonic()
        with ThreadPoolExecutor(BOUND) as clients:
            list(clients.map(client_share, range(BOUND)))
        seen.append(_threads(pid))
        contexts = {json.loads(line)["context_id"] for line in served.workdir.joinpath("trace.jsonl").read_text()
                    .splitlines() if '"a2a_task_received"' in line}
        assert len(contexts) == CONTEXTS  # every task in a context of its own
        assert max(seen) <= 2 * BOUND + CONSTANT, (
            f"{max(seen)} threads after {CONTEXTS} contexts in {time.monotonic() - started:.1f} s "
            f"(bound {BOUND}; samples {seen})")
