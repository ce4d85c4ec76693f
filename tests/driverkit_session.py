"""Run real sessions against a bundled driver pointed at a loopback stand-in."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conftest import EXAMPLES
from loopkit import capsule_dir, local, trace_events
from murmurd.host import ComponentHost
from murmurd.session.events import TaskEvents
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule

BUNDLED = Path(__file__).resolve().parent.parent / "murmurd" / "bundled"
API_KEY = "sk-standin-key"


class Chunks(TaskEvents):
    """The text and thinking chunks a task streamed (the host calls these from a worker thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.text: list[str] = []
        self.thinking: list[str] = []

    def text_chunk(self, text: str) -> None:
        with self.lock:
            self.text.append(text)

    def thinking_chunk(self, text: str) -> None:
        with self.lock:
            self.thinking.append(text)

    def tool_chunk(self, text: str) -> None:
        """A tool's own chunks are not the driver's text."""


def driver_capsule(root: Path, driver: str, endpoint: str | None, config: dict[str, Any], *,
                   network: bool = True, model: str = "standin-model", **inference: Any) -> Path:
    """A capsule naming the bundled `driver` by its directory, with the echo tool and a system prompt."""
    manifest: dict[str, Any] = {
        "name": "driver-test",
        "version": "1.2.0",
        "artifacts": [local(driver, "driver", BUNDLED / driver), local("echo", "tool", EXAMPLES / "echo")],
        "inference": {
            "model": model,
            "api_key": "${STANDIN_API_KEY}",
            "max_tokens": 1024,
            "system_prompt": "You are a careful test agent.",
            "driver": {"artifact": driver, "config": config},
            **inference,
        },
    }
    if endpoint is not None:
        manifest["inference"]["endpoint"] = endpoint
    if network and endpoint is not None:
        origin = urlsplit(endpoint)
        manifest["capabilities"] = {"network": {"allow": [f"{origin.scheme}://{origin.netloc}"]}}
    return capsule_dir(root, manifest)


def stage(directory: Path, host: ComponentHost, tmp_path: Path) -> StagedCapsule:
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"),
                         env={"STANDIN_API_KEY": API_KEY})


async def run(staged: StagedCapsule, host: ComponentHost, *texts: str,
              context_id: str | None = None) -> tuple[list[TaskOutcome], Chunks]:
    session = Session(staged, host)
    chunks = Chunks()
    await session.open()
    outcomes = []
    try:
        for i, text in enumerate(texts):
            outcomes.append(await session.run_task(TaskSpec(f"tsk_{i:032x}", text, context_id=context_id), chunks))
    finally:
        await session.close()
    return outcomes, chunks


def usage_rows(staged: StagedCapsule) -> list[dict[str, int] | None]:
    """The `usage` of every `inference` trace event, in order."""
    return [e.get("usage") for e in trace_events(staged) if e["event_type"] == "inference"]
