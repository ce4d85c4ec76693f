"""The official JavaScript A2A SDK (`@a2a-js/sdk`, installed by .ci/run into tests/js), driven by
Node against a real `murmurd serve`: card, send, stream, get, list, cancel, reply (tests/js/drive.mjs).

The SDK's `listTasks()` sends `"status": "UNRECOGNIZED"` when no filter is given: that is no
filter, and every invalid-params error names the field and what was expected in plain words."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from a2akit import Served, chaos_capsule, serving

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def served(tmp_path_factory, artifacts) -> Served:
    if not (JS / "node_modules" / "@a2a-js" / "sdk" / "package.json").is_file():
        pytest.fail("tests/js/node_modules lacks @a2a-js/sdk: run `npm ci` in tests/js (.ci/run does)")
    for name in ("chaos-driver", "ask"):
        artifacts.fixture(name)
    artifacts.example("echo")
    root = tmp_path_factory.mktemp("js-sdk")
    capsule = chaos_capsule(root, lifecycle={"task_acceptance": "queue", "queue_depth": 100})
    with serving(capsule, root / "state") as running:
        yield running


@pytest.fixture(scope="module")
def drive(served: Served) -> dict:
    proc = subprocess.run([NODE, "drive.mjs", served.url], cwd=JS, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, result["error"]
    return {step["name"]: step["value"] for step in result["steps"]}


def test_the_card_offers_the_sdk_a_1_0_json_rpc_interface(drive: dict) -> None:
    assert drive["card"]["name"] == "chaos"
    assert ["JSONRPC", "1.0"] in drive["card"]["interfaces"]


def test_send_stream_and_get_through_the_sdk(drive: dict, served: Served) -> None:
    sent = drive["send"]
    assert sent["state"] == "TASK_STATE_COMPLETED" and sent["answer"] == "answer: hello from node"
    assert served.get(sent["id"])["status"]["state"] == "completed"
    stream = drive["stream"]
    assert stream["frames"][0] == "task" and "artifactUpdate" in stream["frames"]
    assert stream["streamed"] == stream["stored"] == "answer: streamed from node"
    assert drive["get"] == {"id": sent["id"], "state": "TASK_STATE_COMPLETED"}


def test_list_without_a_filter_lists_every_task(drive: dict) -> None:
    assert drive["list"]["sentStatus"] == "UNRECOGNIZED"  # what the SDK's listTasks({}) puts on the wire
    assert drive["send"]["id"] in drive["list"]["ids"] and len(drive["list"]["ids"]) >= 2


def test_an_invalid_list_is_refused_in_plain_words(drive: dict) -> None:
    error = drive["list-invalid"]["error"]
    assert "pageSize: must be at most 100 (got 100000)" in error
    assert "literal[" not in error and "Input should be" not in error


def test_cancel_and_reply_through_the_sdk(drive: dict, served: Served) -> None:
    assert drive["cancel"]["state"] == "TASK_STATE_CANCELED"
    assert served.get(drive["cancel"]["id"])["status"]["state"] == "canceled"
    reply = drive["reply"]
    assert reply["state"] == "TASK_STATE_COMPLETED" and reply["answer"] == "answer: yes, go on"


@pytest.mark.parametrize(("params", "said"), [
    ({"status": "BOGUS"}, 'status: must be one of TASK_STATE_UNSPECIFIED, TASK_STATE_SUBMITTED,'),
    ({"status": 42}, "status: unknown task state number 42"),
    ({"includeArtifacts": "yes"}, 'includeArtifacts: must be true or false (got "yes")'),
])
def test_list_params_errors_name_the_field_and_the_expectation(served: Served, params: dict, said: str) -> None:
    error = served.rpc("ListTasks", params, headers={"A2A-Version": "1.0"})["error"]
    assert error["code"] == -32602 and said in error["message"]
    assert "literal[" not in error["message"] and ".int" not in error["message"]


@pytest.mark.parametrize("status", ["UNRECOGNIZED", "TASK_STATE_UNSPECIFIED", 0, -1])
def test_the_unset_status_enum_is_no_filter(served: Served, status: object) -> None:
    answer = served.rpc("ListTasks", {"status": status}, headers={"A2A-Version": "1.0"})
    assert "result" in answer, answer
