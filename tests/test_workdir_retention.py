"""No caller fills the disk by opening contexts (issue 21 item 6; the serve side of issue 24's
workdir retention): a closed context session's workdir goes when its context's last task leaves
the store, at most `--keep-context-sessions` closed ones are kept in any case, and a threaded
context's history goes with its last task. Real `murmurd serve` processes on loopback."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from a2akit import Served, serving
from replicakit import wait_for
from tenancykit import recorder_capsule, tenant_capsule

BOUND = 4  # tasks at once: as many context sessions open at most


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask", "recorder-driver"):
        artifacts.fixture(name)
    artifacts.example("echo")


def _sessions(served: Served) -> list[Path]:
    return sorted((served.capsule / "workdir").glob("ses_*"))


def _bytes(path: Path) -> int:
    """Bytes of the regular files under `path`; a sweep may remove a workdir while this walks it."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _send_each(served: Served, texts: list[str]) -> list[dict]:
    """One blocking send per text, each in a new context, BOUND at a time."""
    def send(text: str) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                "params": {"message": {"messageId": f"m-{text}", "role": "user", "parts": [{"text": text}]},
                           "configuration": {"blocking": True}}}
        answer = httpx.post(served.url, json=body, timeout=120).json()
        assert "result" in answer, answer
        return answer["result"]

    with ThreadPoolExecutor(BOUND) as pool:
        return list(pool.map(send, texts))


def test_200_tasks_in_200_contexts_leave_the_disk_bounded(tmp_path: Path) -> None:
    retained = 5
    capsule = tenant_capsule(tmp_path, max_concurrent_tasks=BOUND)
    with serving(capsule, tmp_path / "state", "--retain-finished-count", str(retained),
                 "--session-idle", "0.5") as served:
        answers = _send_each(served, [f"task {i}" for i in range(200)])
        assert [a for a in answers if a["status"]["state"] != "completed"] == []
        assert len({a["contextId"] for a in answers}) == 200
        # the daemon's own workdir, plus one per context still holding a retained task (the
        # store keeps `retained`, and prunes a tenth past it at most: one here)
        most = 1 + retained + 1
        wait_for(lambda: len(_sessions(served)) <= most, 120, f"at most {most} session workdirs")
        sizes = [_bytes(s) for s in _sessions(served) if s.name != served.session_id]
        assert sizes, "the retained contexts keep their workdirs"
        assert _bytes(served.capsule / "workdir") <= _bytes(served.workdir) + most * max(sizes)
        index = sorted(os.listdir(served.state_dir / "context-sessions"))
        assert len(index) <= most - 1 and set(index) <= {s.name for s in _sessions(served)}
        # what the store still holds is still answered, workdir or not
        newest = answers[-1]["id"]
        got = httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": newest}},
                         timeout=30).json()
        assert got["result"]["status"]["state"] == "completed"


def test_closed_context_workdirs_beyond_the_keep_bound_go_first(tmp_path: Path) -> None:
    keep = 3
    capsule = tenant_capsule(tmp_path, max_concurrent_tasks=BOUND)
    with serving(capsule, tmp_path / "state", "--keep-context-sessions", str(keep), "--session-idle", "0.5") as served:
        answers = _send_each(served, [f"task {i}" for i in range(12)])
        wait_for(lambda: len(_sessions(served)) <= 1 + keep, 120, f"at most {keep} closed context workdirs")
        # every task is still answered from the store (no retention limit given)
        for answer in answers:
            got = httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                               "params": {"id": answer["id"]}}, timeout=30).json()
            assert got["result"]["status"]["state"] == "completed"


def test_a_threaded_contexts_history_goes_with_its_last_task(tmp_path: Path) -> None:
    capsule = recorder_capsule(tmp_path, max_concurrent_tasks=BOUND)
    with serving(capsule, tmp_path / "state", "--retain-finished-count", "2", "--session-idle", "0.5") as served:
        answers = _send_each(served, [f"talk {i}" for i in range(12)])
        assert all(a["status"]["state"] == "completed" for a in answers)
        histories = served.workdir / "contexts"
        wait_for(lambda: len(list(histories.glob("*/history.json"))) <= 3, 120, "at most 3 histories kept")
        wait_for(lambda: len(_sessions(served)) <= 1 + 3, 120, "at most 3 context workdirs kept")


def test_a_restarted_daemon_removes_what_the_one_before_left(tmp_path: Path) -> None:
    capsule = tenant_capsule(tmp_path, max_concurrent_tasks=BOUND)
    with serving(capsule, tmp_path / "state", "--session-idle", "0.5") as first:
        _send_each(first, [f"task {i}" for i in range(6)])
        assert first.stop() == 0
    left = [s for s in _sessions(first) if s.name != first.session_id]
    assert len(left) == 6  # kept: their tasks are still in the store and under the keep bound
    with serving(capsule, tmp_path / "state", "--keep-context-sessions", "0") as second:
        wait_for(lambda: not any(s.exists() for s in left), 120, "the earlier daemon's context workdirs to go")
        assert (second.capsule / "workdir" / second.session_id).is_dir()
        assert (first.capsule / "workdir" / first.session_id).is_dir()  # a daemon's own workdir is not a context's


def test_the_index_holds_close_times_until_settled_and_a_new_reader_sees_them(tmp_path: Path) -> None:
    """The index answers from memory once read; a close time reaches the disk (what a restarted
    daemon orders the keep bound by) with `settle`, which also removes what it is given."""
    from murmurd.a2a.core.context_sessions import SessionIndex

    workdirs = tmp_path / "workdir"
    kept, going = "ses_" + "a" * 32, "ses_" + "b" * 32
    for name in (kept, going):
        (workdirs / name / "out").mkdir(parents=True)
    index = SessionIndex(tmp_path / "state" / "context-sessions", workdirs)
    index.record(kept, "ctx-kept")
    index.record(going, "ctx-going")
    assert [(e.session_id, e.context_id) for e in index.entries()] == [(kept, "ctx-kept"), (going, "ctx-going")]
    os.utime(index.index_dir / kept, (1_000_000, 1_000_000))  # as if recorded long ago
    index.closed(kept)
    assert index.unsettled and (index.index_dir / kept).stat().st_mtime == 1_000_000  # not yet on disk
    assert next(e for e in index.entries() if e.session_id == kept).closed_at > 1_000_000  # known at once
    assert index.settle([going]) == 1
    assert not (workdirs / going).exists() and not (index.index_dir / going).exists()
    assert not index.unsettled and (index.index_dir / kept).stat().st_mtime > 1_000_000
    fresh = SessionIndex(index.index_dir, workdirs).entries()  # what a restarted daemon reads
    assert [(e.session_id, e.context_id) for e in fresh] == [(kept, "ctx-kept")]
    assert fresh[0].closed_at > 1_000_000
