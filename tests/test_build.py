"""`murmurd build`: componentize-py builds, the content-addressed cache, and clear failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from murmurd.authoring.build import BuildError, build_artifact

TOOL_MANIFEST = "name: {name}\nversion: 0.1.0\nruntime: tool\n"
GOOD_APP = '''
from wit_world import exports
from wit_world.exports import run

class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        return run.ToolResult(run.Status.PASSED, "{marker}", input.data, None, False, [])
'''


def _artifact(root: Path, name: str, app: str) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "murmur.yaml").write_text(TOOL_MANIFEST.format(name=name))
    (directory / "app.py").write_text(app)
    return directory


def test_a_build_writes_the_component_and_a_rebuild_comes_from_the_cache(tmp_path: Path, host) -> None:
    builds = tmp_path / "builds"
    directory = _artifact(tmp_path, "fresh", GOOD_APP.format(marker=str(tmp_path)))  # unique content
    messages: list[str] = []
    first = build_artifact(directory, progress=messages.append, builds_dir=builds)
    assert not first.cached and first.output == directory / "fresh.wasm"
    assert any("building fresh" in m for m in messages)
    first.output.unlink()
    second = build_artifact(directory, builds_dir=builds)
    assert second.cached and second.output.is_file()
    loaded = host.load(second.output)
    from murmurd.host import ToolInput

    assert host.call_tool_sync(loaded, ToolInput(data="x")).summary == str(tmp_path)


def test_a_changed_source_is_rebuilt(tmp_path: Path) -> None:
    from murmurd.authoring.build import build_key
    from murmurd.contract import wit_root

    directory = _artifact(tmp_path, "keyed", GOOD_APP.format(marker="one"))
    before = build_key(directory, wit_root() / "guest", "tool")
    (directory / "app.py").write_text(GOOD_APP.format(marker="two"))
    assert build_key(directory, wit_root() / "guest", "tool") != before


def test_a_syntax_error_names_the_file_and_python_message(tmp_path: Path) -> None:
    directory = _artifact(tmp_path, "broken", "def run(:\n    pass\n")
    with pytest.raises(BuildError) as raised:
        build_artifact(directory, builds_dir=tmp_path / "builds")
    message = str(raised.value)
    assert str(directory / "app.py") in message
    assert "SyntaxError" in message
    assert "Stack backtrace" not in message


def test_a_wrong_export_names_what_is_missing(tmp_path: Path) -> None:
    directory = _artifact(tmp_path, "wrong", "class Nope:\n    pass\n")
    with pytest.raises(BuildError) as raised:
        build_artifact(directory, builds_dir=tmp_path / "builds")
    assert str(directory / "app.py") in str(raised.value)
    assert "has no attribute 'Run'" in str(raised.value)


def test_a_missing_entry_module_is_reported(tmp_path: Path) -> None:
    directory = _artifact(tmp_path, "empty", "")
    (directory / "app.py").unlink()
    with pytest.raises(BuildError, match="app.py: missing"):
        build_artifact(directory, builds_dir=tmp_path / "builds")


def test_an_unknown_runtime_is_reported_with_the_manifest_path(tmp_path: Path) -> None:
    from murmurd.manifest.artifact import ArtifactManifestError

    directory = _artifact(tmp_path, "odd", GOOD_APP.format(marker="x"))
    (directory / "murmur.yaml").write_text("name: odd\nversion: 0.1.0\nruntime: quantum\n")
    with pytest.raises(ArtifactManifestError, match="murmur.yaml: runtime"):
        build_artifact(directory, builds_dir=tmp_path / "builds")


OWN_WORLD = """package test:own-wit@0.1.0;

world mine {
    export murmur:tool/run@0.1.0;
}
"""


def _own_wit_artifact(root: Path, name: str, manifest_extra: str = "wit: wit\nworld: mine\n") -> Path:
    from murmurd.contract import wit_root

    directory = _artifact(root, name, GOOD_APP.format(marker=f"own wit {root}"))
    (directory / "murmur.yaml").write_text(TOOL_MANIFEST.format(name=name) + manifest_extra)
    deps = directory / "wit" / "deps" / "murmur-tool"
    deps.mkdir(parents=True)
    (directory / "wit" / "world.wit").write_text(OWN_WORLD)
    (deps / "run.wit").write_text((wit_root() / "guest" / "deps" / "murmur-tool" / "run.wit").read_text())
    return directory


def test_an_artifact_can_compile_against_its_own_wit(tmp_path: Path, host) -> None:
    from murmurd.authoring.build import world_for
    from murmurd.host import ToolInput
    from murmurd.manifest.artifact import load_artifact_manifest

    directory = _own_wit_artifact(tmp_path, "own")
    manifest = load_artifact_manifest(directory / "murmur.yaml")
    assert manifest.wit == "wit"
    assert world_for(manifest, directory) == (directory / "wit", "mine")
    messages: list[str] = []
    built = build_artifact(directory, progress=messages.append, builds_dir=tmp_path / "builds")
    assert any("against wit/mine" in m for m in messages)
    loaded = host.load(built.output)
    assert not any(name.startswith("murmur:text") for name in loaded.imports)  # not the bundled `tool` world
    assert host.call_tool_sync(loaded, ToolInput(data="x")).summary == f"own wit {tmp_path}"


def test_the_build_key_covers_the_artifacts_own_wit(tmp_path: Path) -> None:
    from murmurd.authoring.build import build_key, world_for
    from murmurd.manifest.artifact import load_artifact_manifest

    directory = _own_wit_artifact(tmp_path, "keyed-wit")
    wit_dir, world = world_for(load_artifact_manifest(directory / "murmur.yaml"), directory)
    before = build_key(directory, wit_dir, world)
    (wit_dir / "world.wit").write_text(OWN_WORLD.replace("world mine {", "/// changed\nworld mine {"))
    assert build_key(directory, wit_dir, world) != before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("wit: wit\n", "needs `world:`"),
        ("wit: nowhere\nworld: mine\n", "no such directory"),
        ("wit: ../outside\nworld: mine\n", "outside the artifact directory"),
    ],
)
def test_an_unusable_own_wit_is_reported(tmp_path: Path, extra: str, message: str) -> None:
    (tmp_path / "outside").mkdir()
    directory = _own_wit_artifact(tmp_path, "bad-wit", extra)
    with pytest.raises(BuildError, match=message):
        build_artifact(directory, builds_dir=tmp_path / "builds")


SHARED_APP = '''
from wit_world import exports
from wit_world.exports import run

import sharedmod

class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        return run.ToolResult(run.Status.PASSED, sharedmod.MARKER, input.data, None, False, [])
'''


def _shared_artifact(root: Path, name: str, marker: str) -> Path:
    shared = root / "_shared"
    shared.mkdir(exist_ok=True)
    (shared / "sharedmod.py").write_text(f"MARKER = {marker!r}\n")
    directory = _artifact(root, name, SHARED_APP)
    (directory / "murmur.yaml").write_text(TOOL_MANIFEST.format(name=name) + "python_path: [../_shared]\n")
    return directory


def test_python_path_shares_a_sibling_module_and_the_key_covers_it(tmp_path: Path, host) -> None:
    from murmurd.authoring.build import build_key, python_path_for, world_for
    from murmurd.host import ToolInput
    from murmurd.manifest.artifact import load_artifact_manifest

    directory = _shared_artifact(tmp_path, "sharing", f"shared {tmp_path}")
    manifest = load_artifact_manifest(directory / "murmur.yaml")
    extra = python_path_for(manifest, directory)
    assert extra == [(tmp_path / "_shared").resolve()]
    built = build_artifact(directory, builds_dir=tmp_path / "builds")
    assert host.call_tool_sync(host.load(built.output), ToolInput(data="x")).summary == f"shared {tmp_path}"

    wit_dir, world = world_for(manifest, directory)
    before = build_key(directory, wit_dir, world, extra)
    assert build_key(directory, wit_dir, world) != before  # the shared directory is part of the key
    (tmp_path / "_shared" / "sharedmod.py").write_text("MARKER = 'changed'\n")
    assert build_key(directory, wit_dir, world, extra) != before


@pytest.mark.parametrize(("entry", "message"), [("/abs/olute", "must be relative"), ("../nowhere", "no such directory")])
def test_an_unusable_python_path_is_reported(tmp_path: Path, entry: str, message: str) -> None:
    directory = _artifact(tmp_path, "bad-path", GOOD_APP.format(marker="x"))
    (directory / "murmur.yaml").write_text(TOOL_MANIFEST.format(name="bad-path") + f"python_path: [{entry}]\n")
    with pytest.raises(BuildError, match=message):
        build_artifact(directory, builds_dir=tmp_path / "builds")
