"""The WIT contract parses with a real WIT parser, and shared packages agree byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from murmurd.contract import SERVED, WORLDS, wit_root

WORLD_FAMILIES = sorted(set(WORLDS.values()) | {("host", "runtime-host")})


@pytest.mark.parametrize(("family", "world"), WORLD_FAMILIES, ids=lambda v: str(v))
def test_every_world_parses_with_componentize_py(family: str, world: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import componentize_py, sys; sys.exit(componentize_py.script())",
         "-d", str(wit_root() / family), "-w", world, "bindings", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "wit_world" / "__init__.py").is_file()


def test_packages_copied_into_several_families_are_identical() -> None:
    root = wit_root()
    seen: dict[str, bytes] = {}
    for path in sorted(root.glob("*/deps/*/*.wit")):
        key = f"{path.parent.name}/{path.name}"
        content = path.read_bytes()
        assert seen.setdefault(key, content) == content, f"{path} differs from another copy of {key}"


def test_every_served_interface_is_declared_at_its_served_version() -> None:
    text = "\n".join(p.read_text() for p in wit_root().rglob("*.wit"))
    for interface, version in SERVED.items():
        namespace_package, name = interface.split("/")
        assert f"package {namespace_package}@{version};" in text, interface
        assert f"interface {name} {{" in text, interface


def test_tool_types_keep_the_published_field_and_case_order() -> None:
    text = (wit_root() / "guest/deps/murmur-tool/run.wit").read_text()
    text = text[text.index("record tool-result") :]
    fields = ["status: status", "summary: option<string>", "data: option<string>",
              "data-path: option<string>", "truncated: bool", "metadata: list<tuple<string, string>>"]
    positions = [text.index(f) for f in fields]
    assert positions == sorted(positions)
    full = (wit_root() / "guest/deps/murmur-tool/run.wit").read_text()
    assert full.index("passed") < full.index("failed") < full.index("error,")
