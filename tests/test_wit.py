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


def _wit_records(text: str) -> dict[str, list[str]]:
    """record name -> its field names, in order (doc comments dropped)."""
    import re

    records = {}
    for match in re.finditer(r"record ([a-z-]+) \{(.*?)\}", text, re.S):
        body = "\n".join(line for line in match[2].splitlines() if not line.strip().startswith("//"))
        records[match[1]] = re.findall(r"([a-z][a-z-]*):", body)
    return records


def test_hook_values_follow_the_hook_wit_field_by_field() -> None:
    """The canonical ABI is positional: each host dataclass lists the WIT fields in WIT order."""
    import dataclasses

    classes = _hook_classes()
    hook = wit_root() / "hook"
    records = _wit_records((hook / "deps/murmur-hook/lifecycle.wit").read_text() + (hook / "inference.wit").read_text())
    assert set(records) == set(classes)
    for name, cls in classes.items():
        assert [f.name.replace("_", "-") for f in dataclasses.fields(cls)] == records[name], name


def _hook_classes() -> dict[str, type]:
    from murmurd.host import hook_values as hv

    return {
        "message": hv.HookMessage, "tool-manifest": hv.ToolManifest, "session-context": hv.SessionContextRecord,
        "stage-event": hv.StageEvent, "task-start-event": hv.TaskStartEvent, "task-end-event": hv.TaskEndEvent,
        "inference-event": hv.InferenceEvent, "tool-outcome": hv.ToolOutcome, "tool-event": hv.ToolEvent,
        "shell-outcome": hv.ShellOutcome, "shell-event": hv.ShellEvent, "compaction-event": hv.CompactionEvent,
        "session-end-event": hv.SessionEndEvent, "inference-request": hv.InferenceRequest,
        "inference-response": hv.InferenceResponse,
    }


def test_hook_handlers_and_arms_keep_the_published_order() -> None:
    import re

    from murmurd.host.hook_values import ARMS, HANDLER_EVENT, HANDLERS

    text = (wit_root() / "hook/deps/murmur-hook/lifecycle.wit").read_text()
    handlers = re.findall(r"^\s*(on-[a-z-]+): func\((\w+): ([a-z-]+)\) -> result<hook-output, string>;", text, re.M)
    assert [h for h, _, _ in handlers] == list(HANDLERS)
    assert [(h, p) for h, p, _ in handlers if p != "event"] == [("on-session-start", "ctx")]
    variant = text[text.index("variant hook-output") :]
    variant = variant[: variant.index("}")]
    assert re.findall(r"^\s*([a-z-]+)[(,]", variant, re.M) == list(ARMS)
    assert {h: HANDLER_EVENT[h] for h, _, _ in handlers} == {h: _hook_classes()[t] for h, _, t in handlers}
