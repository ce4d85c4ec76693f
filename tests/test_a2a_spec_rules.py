"""A2A 1.0 (and 0.3 where the rule exists) as the specification says (issue 12 item 5), through
a real `murmurd serve` on loopback and raw JSON-RPC, one test per rule and dialect."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from a2akit import Served, chaos_capsule, serving, start

V03 = {"A2A-Version": "0.3"}


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Served:
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("spec-rules")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 100})
    with serving(capsule, root / "state") as running:
        yield running


def v10_message(text: str, **extra: str) -> dict:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def v10_send(served: Served, text: str, **extra: str) -> dict:
    answer = served.rpc("SendMessage", {"message": v10_message(text, **extra)})
    assert "result" in answer, answer
    return answer["result"]["task"]


def finished_task(served: Served) -> dict:
    task = v10_send(served, "done soon")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return task


def error_code(answer: dict) -> int:
    assert "error" in answer, answer
    return answer["error"]["code"]


# -- ListTasks: totalSize counts every match; the state filter applies before the page --------

def test_list_total_size_counts_every_matching_task(served: Served) -> None:
    context = "ctx_" + uuid.uuid4().hex
    ids = {v10_send(served, f"n{i}", contextId=context)["id"] for i in range(5)}
    seen: list[str] = []
    token = ""
    for expected in (2, 2, 1):
        page = served.rpc("ListTasks", {"contextId": context, "pageSize": 2, "pageToken": token})["result"]
        assert page["totalSize"] == 5 and len(page["tasks"]) == expected
        seen += [t["id"] for t in page["tasks"]]
        token = page.get("nextPageToken", "")
    assert token == "" and set(seen) == ids


def test_list_state_filter_fills_the_page(served: Served) -> None:
    context = "ctx_" + uuid.uuid4().hex
    for text in ("ok1", "mode:banana", "ok2", "mode:banana", "ok3", "ok4", "mode:banana"):
        v10_send(served, text, contextId=context)
    failed = served.rpc("ListTasks", {"contextId": context, "status": "TASK_STATE_FAILED", "pageSize": 2})["result"]
    assert len(failed["tasks"]) == 2 and failed["totalSize"] == 3 and failed["nextPageToken"]
    assert all(t["status"]["state"] == "TASK_STATE_FAILED" for t in failed["tasks"])
    rest = served.rpc("ListTasks", {"contextId": context, "status": "TASK_STATE_FAILED", "pageSize": 2,
                                    "pageToken": failed["nextPageToken"]})["result"]
    assert len(rest["tasks"]) == 1 and rest["totalSize"] == 3
    done = served.rpc("ListTasks", {"contextId": context, "status": "TASK_STATE_COMPLETED", "pageSize": 3})["result"]
    assert len(done["tasks"]) == 3 and done["totalSize"] == 4


# -- a finished task takes no more messages and has nothing to subscribe to -------------------

def test_v10_message_to_a_finished_task_is_unsupported(served: Served) -> None:
    task = finished_task(served)
    answer = served.rpc("SendMessage", {"message": v10_message("again", taskId=task["id"])})
    assert error_code(answer) == -32004 and "completed" in answer["error"]["message"]


def test_v03_message_to_a_finished_task_is_unsupported(served: Served) -> None:
    task = finished_task(served)
    message = {"kind": "message", "messageId": "m" + uuid.uuid4().hex, "role": "user", "taskId": task["id"],
               "parts": [{"kind": "text", "text": "again"}]}
    assert error_code(served.rpc("message/send", {"message": message}, headers=V03)) == -32004


def test_upstream_message_to_a_finished_task_stays_invalid_params(served: Served) -> None:
    task = finished_task(served)
    message = {"messageId": "m" + uuid.uuid4().hex, "role": "user", "taskId": task["id"], "parts": [{"text": "x"}]}
    assert error_code(served.rpc("message/send", {"message": message})) == -32602


def test_v10_subscribe_to_a_finished_task_is_unsupported(served: Served) -> None:
    task = finished_task(served)
    assert error_code(served.rpc("SubscribeToTask", {"id": task["id"]})) == -32004


def test_v03_resubscribe_to_a_finished_task_is_unsupported(served: Served) -> None:
    task = finished_task(served)
    assert error_code(served.rpc("tasks/resubscribe", {"id": task["id"]}, headers=V03)) == -32004


def test_subscribe_to_an_unknown_task_is_still_task_not_found(served: Served) -> None:
    assert error_code(served.rpc("SubscribeToTask", {"id": "tsk_nobody"})) == -32001


# -- push notifications and the extended card are not offered, and say so --------------------

@pytest.mark.parametrize("method", [
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig", "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete", "tasks/pushNotification/set",
    "tasks/pushNotification/get",
])
def test_push_notification_config_methods_are_not_supported(served: Served, method: str) -> None:
    card = httpx.get(served.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is False
    answer = served.rpc(method, {"taskId": "tsk_x", "id": "tsk_x"})
    assert error_code(answer) == -32003 and "Push Notification is not supported" in answer["error"]["message"]


def test_v10_extended_card_is_unsupported_while_the_card_declares_none(served: Served) -> None:
    card = httpx.get(served.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert not card["capabilities"].get("extendedAgentCard")
    assert error_code(served.rpc("GetExtendedAgentCard", {})) == -32004


def test_v03_authenticated_extended_card_is_not_configured(served: Served) -> None:
    card = httpx.get(served.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert not card.get("supportsAuthenticatedExtendedCard")
    assert error_code(served.rpc("agent/getAuthenticatedExtendedCard", {}, headers=V03)) == -32007


# -- messageId is required -------------------------------------------------------------------

@pytest.mark.parametrize("message_id", [None, ""])
def test_v10_message_without_message_id_is_invalid_params(served: Served, message_id: str | None) -> None:
    message = {"role": "ROLE_USER", "parts": [{"text": "no id"}]}
    if message_id is not None:
        message["messageId"] = message_id
    answer = served.rpc("SendMessage", {"message": message})
    assert error_code(answer) == -32602 and "messageId" in answer["error"]["message"]


def test_v03_message_without_message_id_is_invalid_params(served: Served) -> None:
    message = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "no id"}]}
    assert error_code(served.rpc("message/send", {"message": message}, headers=V03)) == -32602


# -- the shutdown linger answers every request -------------------------------------------------

def test_every_request_in_the_shutdown_window_is_answered(tmp_path: Path) -> None:
    served = start(chaos_capsule(tmp_path), tmp_path / "state", "--after-task", "exit")
    task = v10_send(served, "the only one")
    answers: list[dict] = []
    with httpx.Client(timeout=10) as client:
        while served.proc.poll() is None:  # every dialect's get, in turn
            for method in ("GetTask", "tasks/get"):
                body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task["id"]}}
                try:
                    answers.append(client.post(served.url, json=body).json())
                except httpx.HTTPError:
                    time.sleep(0.01)  # the server has stopped listening: the window is over
    assert served.proc.wait(timeout=30) == 0
    states = {a.get("result", {}).get("status", {}).get("state") for a in answers}
    assert answers and states == {"TASK_STATE_COMPLETED", "completed"}, [a for a in answers if "result" not in a][:3]
    assert not any("task store is closed" in line for line in served.stderr)
