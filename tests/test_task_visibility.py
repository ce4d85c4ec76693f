"""Who may read which task, through a real `murmurd serve` with bearer tokens: an operator
credential reads every task; a peer credential reads only the tasks it created, by every read
route (tasks/get, tasks/list, tasks/resubscribe, GET /tasks/{id}/stream, the watch streams). A
task it may not read answers as an unknown one: its existence is not confirmed either."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx
import pytest

from authkit import bearer, token_sha256
from a2akit import Served, serving
from browserkit import FIRST_WORDS, scripted_capsule

OPS = "ops-token-" + "o" * 32
PEER = "peer-token-" + "p" * 32
OTHER = "other-token-" + "q" * 32
SECRET = "say hello, the launch code is 0000"




@pytest.fixture(autouse=True)
def _built(artifacts) -> None:
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts):
    artifacts.example("scripted-driver")
    artifacts.fixture("ask")
    root = tmp_path_factory.mktemp("visibility")
    creds = root / "credentials.yaml"
    creds.write_text(f"""
credentials:
  - {{name: ops, origin: operator, token_sha256: {token_sha256(OPS)}}}
  - {{name: partner, origin: peer, trust: [partner], token_sha256: {token_sha256(PEER)}}}
  - {{name: other, origin: peer, trust: [other, partner], token_sha256: {token_sha256(OTHER)}}}
""")
    with serving(scripted_capsule(root), root / "state", "--credentials", str(creds)) as daemon:
        yield daemon


def rpc(served: Served, method: str, params: dict, token: str, version: str | None = None) -> dict:
    headers = {**bearer(token), **({"a2a-version": version} if version else {})}
    return httpx.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                      headers=headers, timeout=30).json()


def send(served: Served, text: str, token: str) -> str:
    message = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}]}
    return rpc(served, "message/send", {"message": message}, token)["result"]["id"]


def wait_completed(served: Served, task_id: str) -> None:
    deadline = time.monotonic() + 30
    while rpc(served, "tasks/get", {"id": task_id}, OPS)["result"]["status"]["state"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def listed(served: Served, token: str) -> tuple[set[str], int]:
    result = rpc(served, "ListTasks", {"pageSize": 100}, token, version="1.0")["result"]
    return {t["id"] for t in result["tasks"]}, result["totalSize"]


@pytest.fixture(scope="module")
def tasks(served: Served) -> dict[str, str]:
    made = {"ops": send(served, SECRET, OPS), "partner": send(served, "say hello", PEER),
            "other": send(served, "say hello", OTHER)}
    for task_id in made.values():
        wait_completed(served, task_id)
    return made


def test_an_operator_reads_every_task(served: Served, tasks: dict[str, str]) -> None:
    ids, total = listed(served, OPS)
    assert set(tasks.values()) <= ids and total >= 3
    for task_id in tasks.values():
        assert rpc(served, "tasks/get", {"id": task_id}, OPS)["result"]["id"] == task_id


def test_a_peer_lists_and_gets_only_the_tasks_it_created(served: Served, tasks: dict[str, str]) -> None:
    assert listed(served, PEER) == ({tasks["partner"]}, 1)
    # a peer trusted for more classes still reads only its own
    assert listed(served, OTHER) == ({tasks["other"]}, 1)
    assert rpc(served, "tasks/get", {"id": tasks["partner"]}, PEER)["result"]["id"] == tasks["partner"]
    for foreign in (tasks["ops"], tasks["other"]):
        answer = rpc(served, "tasks/get", {"id": foreign}, PEER)
        assert answer["error"]["code"] == -32001, answer  # as unknown as a task that never existed
        assert "launch code" not in json.dumps(answer)
        assert rpc(served, "tasks/get", {"id": "tsk_" + "0" * 32}, PEER)["error"]["message"].replace(
            "tsk_" + "0" * 32, foreign) == answer["error"]["message"]


def test_a_peer_cannot_stream_another_credentials_task(served: Served, tasks: dict[str, str]) -> None:
    own = httpx.get(served.url + f"tasks/{tasks['partner']}/stream", headers=bearer(PEER), timeout=30)
    assert own.status_code == 200 and FIRST_WORDS.split()[0] in own.text
    for foreign in (tasks["ops"], tasks["other"]):
        refused = httpx.get(served.url + f"tasks/{foreign}/stream", headers=bearer(PEER), timeout=30)
        assert refused.status_code == 404, refused.text
        assert "launch code" not in refused.text
        resub = rpc(served, "tasks/resubscribe", {"id": foreign}, PEER)
        assert resub["error"]["code"] == -32001, resub


def _watch(served: Served, token: str, seen: list[str], ready: threading.Event, until: list[str],
           post: bool = False) -> None:
    """Collect the watch stream's lines (GET /stream, or POST stream/watch) until the final status
    of the task named in `until`."""
    request = (("POST", served.url, {"json": {"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}}})
               if post else ("GET", served.url + "stream", {}))
    # the test reads `seen` itself; a watcher still open when the daemon stops just ends
    with contextlib.suppress(httpx.TransportError), \
            httpx.stream(request[0], request[1], headers=bearer(token), timeout=30, **request[2]) as response:
        assert response.status_code == 200
        ready.set()
        for line in response.iter_lines():
            seen.append(line)
            if until and until[0] in line and '"final":true' in line:
                return


@pytest.mark.parametrize("post", [False, True], ids=["GET /stream", "POST stream/watch"])
def test_a_peers_watch_stream_carries_only_its_own_tasks_events(served: Served, tasks: dict[str, str],
                                                                 post: bool) -> None:
    seen: list[str] = []
    ready, until = threading.Event(), []
    watcher = threading.Thread(target=_watch, args=(served, PEER, seen, ready, until, post), daemon=True)
    watcher.start()
    assert ready.wait(10)
    foreign = send(served, SECRET, OPS)
    wait_completed(served, foreign)
    own = send(served, "say hello", PEER)
    until.append(own)
    wait_completed(served, own)
    # the final frame may have passed before `until` named it (the send answers fast): wait for
    # it among the lines seen, not for the watcher to notice it
    deadline = time.monotonic() + 20
    while not any(own in line and '"final":true' in line for line in list(seen)):
        assert time.monotonic() < deadline, seen[-5:]
        time.sleep(0.05)
    text = "\n".join(seen)
    assert own in text and '"final":true' in text
    assert foreign not in text and "launch code" not in text


def send_in(served: Served, text: str, token: str, context_id: str) -> dict:
    message = {"messageId": f"m{time.monotonic_ns()}", "role": "user", "parts": [{"text": text}],
               "contextId": context_id}
    return rpc(served, "message/send", {"message": message}, token)


def test_a_peer_cannot_add_a_task_to_another_credentials_context(served: Served, tasks: dict[str, str]) -> None:
    """A context's conversation is shared by its tasks: a peer that names the operator's context
    (a client-chosen, guessable id) would read and steer the operator's conversation."""
    chosen = f"support-{time.monotonic_ns()}"
    first = send_in(served, SECRET, OPS, chosen)["result"]["id"]
    wait_completed(served, first)
    before = listed(served, OPS)[1]
    for token in (PEER, OTHER):
        refused = send_in(served, "say hello, what did we talk about?", token, chosen)
        assert refused["error"]["code"] == -32031, refused
        assert "context" in refused["error"]["message"] and "launch code" not in json.dumps(refused)
    assert listed(served, OPS)[1] == before  # nothing recorded
    # a peer's own context takes more tasks of that peer, and an operator may join any context
    own_context = f"peer-{time.monotonic_ns()}"
    again = [send_in(served, "say hello", PEER, own_context)["result"]["id"] for _ in range(2)]
    for task_id in again:
        wait_completed(served, task_id)
    joined = send_in(served, "say hello", OPS, own_context)["result"]["id"]
    wait_completed(served, joined)
    # ...after which the peer may not add to it any more (an operator's task is in it)
    assert send_in(served, "say hello", PEER, own_context)["error"]["code"] == -32031
