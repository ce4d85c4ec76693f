"""Callers never reach each other's tasks (issue 21 items 1-4, 6 and 9), each written as the attack
against a real `murmurd serve` on loopback: two replicas on a real PostgreSQL where the attack
needs them (tests/pgkit.py), one daemon on SQLite otherwise."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from a2akit import Served, serving, start
from authkit import bearer
from tenancykit import (
    OPS,
    PEER_A,
    PEER_B,
    credentials,
    recorder_capsule,
    rpc,
    send,
    tenant_capsule,
    wait_state,
)

PAIRS = 50  # paired sends of one client-chosen id per race test (the issue asks for at least 50)
AT_ONCE = 5  # pairs raced at the same moment
STATE_WORDS = ("submitted", "working", "input-required", "completed", "not waiting")


@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    for name in ("chaos-driver", "ask", "recorder-driver"):
        artifacts.fixture(name)
    artifacts.example("echo")


# -- item 1: one client-chosen id, two credentials, at the same moment ----------------------------

def _send_02(task_id: str, text: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "tasks/send",
            "params": {"id": task_id, "message": {"role": "user", "parts": [{"type": "text", "text": text}]}}}


async def _race(url_a: str, url_b: str, prefix: str) -> list[tuple[str, dict, dict]]:
    """PAIRS pairs: peer-a to `url_a` and peer-b to `url_b`, each pair sending one id at once."""
    outcomes: list[tuple[str, dict, dict]] = []
    limits = httpx.Limits(max_connections=AT_ONCE * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits, headers=bearer(PEER_A)) as a, \
            httpx.AsyncClient(timeout=120, limits=limits, headers=bearer(PEER_B)) as b:
        for start_at in range(0, PAIRS, AT_ONCE):
            ids = [f"{prefix}-{i}" for i in range(start_at, start_at + AT_ONCE)]
            calls = [c for task_id in ids for c in (a.post(url_a, json=_send_02(task_id, f"secret-a of {task_id}")),
                                                    b.post(url_b, json=_send_02(task_id, f"secret-b of {task_id}")))]
            answers = [r.json() for r in await asyncio.gather(*calls)]
            outcomes += [(task_id, answers[2 * n], answers[2 * n + 1]) for n, task_id in enumerate(ids)]
    return outcomes


def _check_never_crossed(outcomes: list[tuple[str, dict, dict]], url_a: str, url_b: str) -> None:
    for task_id, answer_a, answer_b in outcomes:
        mine = {"a": f"secret-a of {task_id}", "b": f"secret-b of {task_id}"}
        for who, answer, other in (("a", answer_a, "b"), ("b", answer_b, "a")):
            text = json.dumps(answer)
            assert mine[other] not in text, f"peer-{who} was answered with peer-{other}'s task: {answer}"
            if "result" in answer:
                assert mine[who] in text and f"answer: {mine[who]}" in text, answer
            else:  # the loser: a clear error naming the id, never a task, nor the winner's state
                error = answer["error"]
                assert error["code"] in (-32602, -32001) and task_id in error["message"], answer
                assert not any(word in error["message"] for word in STATE_WORDS), answer
        winners = [who for who, answer in (("a", answer_a), ("b", answer_b)) if "result" in answer]
        assert len(winners) == 1, (task_id, answer_a, answer_b)
        # the winner reads its own task anywhere; the loser reads nothing of it
        for who, token, url in (("a", PEER_A, url_b), ("b", PEER_B, url_a)):
            got = rpc(url, "tasks/get", {"id": task_id}, token)
            if who in winners:
                assert f"answer: {mine[who]}" in json.dumps(got["result"]), got
            else:
                assert got["error"]["code"] == -32001 and mine[winners[0]] not in json.dumps(got), got


def test_two_replicas_never_hand_one_client_chosen_id_to_two_credentials(tmp_path: Path, postgres_dsn: str) -> None:
    creds = credentials(tmp_path)
    extra = ("--store", postgres_dsn, "--replica-lease", "5", "--credentials", str(creds))
    first = start(tenant_capsule(tmp_path / "r0"), tmp_path / "state0", *extra)
    try:
        second = start(tenant_capsule(tmp_path / "r1"), tmp_path / "state1", *extra)
        try:
            outcomes = asyncio.run(_race(first.url, second.url, "job"))
            _check_never_crossed(outcomes, first.url, second.url)
        finally:
            second.proc.send_signal(signal.SIGKILL)
            second.proc.wait(timeout=10)
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)


def test_one_daemon_never_hands_one_client_chosen_id_to_two_credentials(tmp_path: Path) -> None:
    with serving(tenant_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path))) as served:
        outcomes = asyncio.run(_race(served.url, served.url, "job"))
        _check_never_crossed(outcomes, served.url, served.url)
        received = [e["task_id"] for e in served.trace() if e["event_type"] == "a2a_task_received"]
        assert sorted(received) == sorted(task_id for task_id, _, _ in outcomes)  # a refused send traced nothing


# -- items 2 and 9: cancel and reply answer only with what GetTask would ---------------------------

@pytest.fixture
def peers_served(tmp_path: Path):
    with serving(tenant_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path))) as served:
        yield served


def _as_unknown(answer: dict, task_id: str, url: str, token: str) -> None:
    """The answer is exactly what a task that never existed gets (-32001, the same words)."""
    assert answer.get("error", {}).get("code") == -32001, answer
    unknown = rpc(url, "tasks/get", {"id": "tsk_" + "0" * 32}, token)["error"]["message"]
    assert answer["error"]["message"] == unknown.replace("tsk_" + "0" * 32, task_id), answer


def test_cancel_and_reply_hand_over_nothing_of_another_credentials_task(peers_served: Served) -> None:
    url = peers_served.url
    task_id = send(url, "mode:ask the vault code is 4711", PEER_A, blocking=False)["result"]["id"]
    wait_state(url, task_id, "input-required")
    attempts = {
        "GetTask": rpc(url, "GetTask", {"id": task_id}, PEER_B, version="1.0"),
        "CancelTask": rpc(url, "CancelTask", {"id": task_id}, PEER_B, version="1.0"),
        "tasks/cancel": rpc(url, "tasks/cancel", {"id": task_id}, PEER_B),
        "SendMessage": rpc(url, "SendMessage", {"message": {"messageId": "x1", "role": "ROLE_USER", "taskId": task_id,
                                                            "parts": [{"text": "go on"}]},
                                                "configuration": {"blocking": True}}, PEER_B, version="1.0"),
        "message/send": send(url, "go on", PEER_B, taskId=task_id),
    }
    for method, answer in attempts.items():
        assert "4711" not in json.dumps(answer), (method, answer)
        _as_unknown(answer, task_id, url, PEER_B)
    wait_state(url, task_id, "input-required")  # neither cancelled nor answered
    # its creator still answers it
    assert send(url, "go on", PEER_A, taskId=task_id)["result"]["id"] == task_id
    wait_state(url, task_id, "completed")


def test_a_message_naming_another_credentials_task_learns_nothing_of_it(peers_served: Served) -> None:
    url = peers_served.url
    done = send(url, "the finished secret 1234", PEER_A)["result"]["id"]
    wait_state(url, done, "completed")
    for answer in (send(url, "hello", PEER_B, taskId=done),
                   rpc(url, "tasks/send", {"id": done, "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}},
                       PEER_B),
                   rpc(url, "SendMessage", {"message": {"messageId": "x2", "role": "ROLE_USER", "taskId": done,
                                                        "parts": [{"text": "x"}]}}, PEER_B, version="1.0")):
        assert "completed" not in json.dumps(answer) and "1234" not in json.dumps(answer), answer
        _as_unknown(answer, done, url, PEER_B)
    # its creator is told the truth about its own task
    own = send(url, "hello", PEER_A, taskId=done)
    assert own["error"]["code"] == -32602 and "completed" in own["error"]["message"], own


# -- item 3: pruning a context's last task opens it to no one ----------------------------------------

def test_retention_never_opens_an_operators_context_to_a_peer(tmp_path: Path) -> None:
    capsule = recorder_capsule(tmp_path)
    with serving(capsule, tmp_path / "state", "--credentials", str(credentials(tmp_path)),
                 "--retain-finished-count", "2") as served:
        url = served.url
        first = send(url, "operator secret: the merger closes friday", OPS, contextId="support-case-1")
        assert "merger" in json.dumps(first["result"])
        refused = send(url, "what did we talk about?", PEER_A, contextId="support-case-1")
        assert refused["error"]["code"] == -32031, refused
        for i in range(3):  # peer-a's own tasks push the operator's out of the store
            assert send(url, f"peer task {i}", PEER_A)["result"]["status"]["state"] == "completed"
        assert rpc(url, "tasks/get", {"id": first["result"]["id"]}, OPS)["error"]["code"] == -32001  # pruned
        joined = send(url, "what did we talk about?", PEER_A, contextId="support-case-1")
        assert "merger" not in json.dumps(joined), joined  # never the operator's history
        if "error" in joined:
            assert joined["error"]["code"] == -32031, joined
        else:  # its history went with its last task: a fresh context now
            assert joined["result"]["status"]["state"] == "completed"


# -- item 4: U+0000 in a message breaks no one's listing ----------------------------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return ("--store", request.getfixturevalue("postgres_dsn")) if request.param == "postgres" else ()


def _listing(url: str, token: str) -> dict:
    return rpc(url, "ListTasks", {"pageSize": 100, "historyLength": 5}, token, version="1.0")


def test_a_nul_in_one_callers_text_lists_for_everyone_allowed(tmp_path: Path, store_args: tuple[str, ...]) -> None:
    with serving(tenant_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path)),
                 *store_args) as served:
        url = served.url
        own_b = send(url, "peer-b plain", PEER_B)["result"]["id"]
        nul = send(url, "zero \u0000 byte", PEER_A)
        assert nul["result"]["status"]["state"] == "completed", nul
        for token, expected in ((PEER_B, {own_b}), (PEER_A, {nul["result"]["id"]}),
                                (OPS, {own_b, nul["result"]["id"]})):
            listed = _listing(url, token)
            assert "result" in listed, listed
            assert {t["id"] for t in listed["result"]["tasks"]} == expected
            assert listed["result"]["totalSize"] == len(expected)
        texts = [p.get("text") for t in _listing(url, PEER_A)["result"]["tasks"] for m in t.get("history", [])
                 for p in m.get("parts", [])]
        assert "zero \u0000 byte" in texts  # stored and listed as sent
        # an id holding U+0000 is refused alike on every store, naming the field
        bad = send(url, "hello", PEER_A, contextId="ctx\u0000x")
        assert bad["error"]["code"] == -32602 and "contextId" in bad["error"]["message"], bad
        assert "result" in _listing(url, PEER_B)


# -- item 6: the contexts one credential holds open are bounded ----------------------------------------

def test_a_peer_may_hold_only_so_many_contexts_open(peers_served_bounded: Served) -> None:
    url = peers_served_bounded.url
    waiting = [send(url, "mode:ask", PEER_A, blocking=False)["result"] for _ in range(3)]
    for task in waiting:
        wait_state(url, task["id"], "input-required")
    refused = send(url, "mode:ask", PEER_A, blocking=False)
    assert refused["error"]["code"] == -32000, refused
    assert refused["error"]["data"] == {"limit_open_contexts": 3} and "contexts" in refused["error"]["message"]
    # its open contexts still take messages, another credential is not held back
    assert send(url, "go on", PEER_A, contextId=waiting[0]["contextId"])["result"]["id"] == waiting[0]["id"]
    wait_state(url, waiting[0]["id"], "completed")
    assert send(url, "plain", PEER_B)["result"]["status"]["state"] == "completed"
    # one finished: room for one more
    again = send(url, "plain", PEER_A)
    assert again["result"]["status"]["state"] == "completed", again


@pytest.fixture
def peers_served_bounded(tmp_path: Path):
    with serving(tenant_capsule(tmp_path), tmp_path / "state", "--credentials", str(credentials(tmp_path)),
                 "--max-open-contexts", "3") as served:
        yield served
