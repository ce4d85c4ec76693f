"""Shared fixtures: one component host per test session, and examples built once per run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from murmurd.authoring.build import build_artifact
from murmurd.host import ComponentHost

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def host() -> Iterator[ComponentHost]:
    """A host sharing the machine's compile cache (content-addressed, safe to share)."""
    component_host = ComponentHost()
    yield component_host
    component_host.close()


class Artifacts:
    """Builds Python artifacts on first use (through the build cache) and remembers them."""

    def __init__(self) -> None:
        self._built: dict[Path, Path] = {}

    def wasm(self, directory: Path) -> Path:
        if directory not in self._built:
            self._built[directory] = build_artifact(directory).output
        return self._built[directory]

    def example(self, name: str) -> Path:
        return self.wasm(EXAMPLES / name)

    def fixture(self, name: str) -> Path:
        return self.wasm(FIXTURES / name)


@pytest.fixture(scope="session")
def artifacts() -> Artifacts:
    return Artifacts()
