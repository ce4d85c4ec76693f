"""examples/supervised served for a test: copied beside the test (so its workdir and state stay
in tmp_path), its local sources pointed back at examples/, started with a deadline long enough
for a cold build and compile of the bundled request-input tool on a loaded machine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml

from a2akit import Served, start
from conftest import EXAMPLES
from murmurd.manifest.writing import dump_yaml

SUPERVISED = EXAMPLES / "supervised"
QUESTION = "Deploy release 1.4.2 to production? Answer approve or hold."
APPROVED = "Approved: release 1.4.2 is deployed to production."
HELD = "Holding: release 1.4.2 stays staged and nothing was deployed."
CHECKED = '{"text": "release 1.4.2 is built and tested"}'  # the echo tool's result
START_SECONDS = 900


def supervised_copy(root: Path) -> Path:
    manifest = yaml.safe_load((SUPERVISED / "murmur.yaml").read_text())
    for artifact in manifest["artifacts"]:
        if "source" in artifact:
            artifact["source"] = str((SUPERVISED / artifact["source"]).resolve())
    directory = root / "supervised"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(dump_yaml(manifest))
    return directory


@contextlib.contextmanager
def serving_supervised(root: Path, *args: str) -> Iterator[Served]:
    served = start(supervised_copy(root), root / "state", *args, timeout=START_SECONDS)
    try:
        yield served
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(timeout=30)
