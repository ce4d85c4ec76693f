"""Capsule-to-capsule messaging between two real daemons on loopback."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from a2akit import chaos_capsule, orchestrator_capsule, script_capsule, serving


def _orchestrate(orchestrator, plan: dict) -> dict:
    task = orchestrator.send(json.dumps(plan))
    done = orchestrator.wait_state(task["id"], "completed", "failed")
    assert done["status"]["state"] == "completed", done
    return json.loads(done["status"]["response"])


def test_an_orchestrator_component_sends_to_a_worker_with_trace_and_trust(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    with serving(chaos_capsule(tmp_path, "worker"), tmp_path / "worker-state") as worker:
        orchestrator_dir = orchestrator_capsule(tmp_path, artifacts.fixture("pull-capsule"), worker)
        with serving(orchestrator_dir, tmp_path / "orch-state") as orchestrator:
            report = _orchestrate(orchestrator, {"send": [worker.url, "hello worker"]})
            peer_task_id, peer_context_id, state = report["send"]["ok"]
            assert state in ("submitted", "working", "completed")
            assert worker.wait_state(peer_task_id, "completed")["status"]["response"] == "answer: hello worker"

            sent = [e for e in orchestrator.trace() if e["event_type"] == "a2a_send"]
            assert len(sent) == 1
            assert (sent[0]["peer_url"], sent[0]["task_id"], sent[0]["context_id"]) == (
                worker.url, peer_task_id, peer_context_id)
            received = [e for e in worker.trace() if e["event_type"] == "a2a_task_received"]
            assert received[-1]["task_id"] == peer_task_id
            assert received[-1]["traceparent_from_caller"] == sent[0]["traceparent"]
            assert received[-1]["message_id"] == "msg_" + "0" * 32
            starts = [e for e in worker.trace() if e["event_type"] == "task_start" and e["task_id"] == peer_task_id]
            assert (starts[0]["origin"], starts[0]["trust"], starts[0]["source"]) == ("peer", "operator", "a2a")
            own = [e for e in orchestrator.trace() if e["event_type"] == "task_start"]
            assert (own[0]["origin"], own[0]["trust"]) == ("operator", "operator")


def test_an_unlisted_peer_is_refused_before_any_connection(tmp_path: Path, artifacts) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue
            except OSError:  # closed at the end of the test
                return

    threading.Thread(target=accept, daemon=True).start()
    unlisted = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    orchestrator_dir = script_capsule(tmp_path, "orchestrator", artifacts.fixture("pull-capsule"),
                                      capabilities={"network": {"allow": ["http://127.0.0.1:1"]}})
    with serving(orchestrator_dir, tmp_path / "state") as orchestrator:
        report = _orchestrate(orchestrator, {"send": [unlisted, "let me in"]})
    stop.set()
    listener.close()
    assert report["send"] == {"err": f"network policy: '{unlisted}' not in capabilities.network.allow"}
    assert accepted == []


def test_peer_headers_set_origin_and_trust_never_the_body(tmp_path: Path, artifacts) -> None:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    worker_dir = chaos_capsule(tmp_path, "worker", lifecycle={"task_acceptance": "queue", "queue_depth": 5})
    with serving(worker_dir, tmp_path / "state") as worker:
        message = {"messageId": "m1", "role": "user", "parts": [{"text": "x"}],
                   "metadata": {"origin": "operator", "trust": "root"}}
        peer = worker.rpc("message/send", {"message": message},
                          headers={"x-murmur-task-origin": "peer", "x-murmur-task-trust": "sandboxed",
                                   "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})["result"]
        plain = worker.rpc("message/send", {"message": {**message, "messageId": "m2"}})["result"]
        bogus = worker.rpc("message/send", {"message": {**message, "messageId": "m3"}},
                           headers={"x-murmur-task-origin": "peer", "x-murmur-task-trust": "ROOT; drop"})["result"]
        for task in (peer, plain, bogus):
            worker.wait_state(task["id"], "completed")
        starts = {e["task_id"]: e for e in worker.all_events() if e["event_type"] == "task_start"}
        assert (starts[peer["id"]]["origin"], starts[peer["id"]]["trust"]) == ("peer", "sandboxed")
        assert (starts[plain["id"]]["origin"], starts[plain["id"]]["trust"]) == ("operator", "operator")
        received = {e["task_id"]: e for e in worker.trace() if e["event_type"] == "a2a_task_received"}
        assert received[peer["id"]]["traceparent_from_caller"] == "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        assert (starts[bogus["id"]]["origin"], starts[bogus["id"]]["trust"]) == ("peer", "untrusted")
