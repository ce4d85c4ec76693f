"""Helpers for session-loop tests: write a capsule directory, stage it, run tasks, read the trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


from conftest import EXAMPLES, FIXTURES
from murmurd.host import ComponentHost
from murmurd.manifest.writing import dump_yaml
from murmurd.session.session import Session, TaskOutcome, TaskSpec
from murmurd.staging.registry import FileRegistry
from murmurd.staging.stage import StagedCapsule, stage_capsule


def local(name: str, runtime: str, source: Path, **extra: Any) -> dict[str, Any]:
    return {"name": name, "runtime": runtime, "source": str(source), "local_source": True, **extra}


def capsule_dir(root: Path, manifest: dict[str, Any], capsule_wasm: Path | None = None) -> Path:
    directory = root / manifest["name"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    if capsule_wasm is not None:
        shutil.copyfile(capsule_wasm, directory / "capsule.wasm")
    return directory


def driver_capsule(root: Path, driver: str, config: dict[str, Any], *, extra_artifacts=(), **extra: Any) -> Path:
    source = FIXTURES / driver if (FIXTURES / driver).is_dir() else EXAMPLES / driver
    manifest = {
        "name": extra.pop("name", "loop-test"),
        "version": "0.3.0",
        "artifacts": [local(driver, "driver", source, **extra.pop("driver_entry", {})), *extra_artifacts],
        "inference": {
            "endpoint": "http://127.0.0.1:9",
            "model": "scripted",
            "driver": {"artifact": driver, "config": config},
            **extra.pop("inference", {}),
        },
        **extra,
    }
    return capsule_dir(root, manifest)


def stage(directory: Path, host: ComponentHost, tmp_path: Path) -> StagedCapsule:
    return stage_capsule(directory, host=host, registry=FileRegistry(tmp_path / "no-registry"))


async def run_tasks(staged: StagedCapsule, host: ComponentHost, *tasks: TaskSpec | str) -> list[TaskOutcome]:
    session = Session(staged, host)
    await session.open()
    outcomes = []
    try:
        for i, task in enumerate(tasks):
            spec = task if isinstance(task, TaskSpec) else TaskSpec(f"tsk_{i:032x}", task)
            outcomes.append(await session.run_task(spec))
    finally:
        await session.close()
    return outcomes


def trace_events(staged: StagedCapsule) -> list[dict[str, Any]]:
    return [json.loads(line) for line in staged.workdir.trace.read_text().splitlines()]
