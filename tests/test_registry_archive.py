"""`.mur.zip` reading and packing: entries by name, the hardening, the ceiling, upstream's messages."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import yaml

from murmurd.manifest.artifact import ArtifactManifest
from murmurd.registry.archive import ArchiveError, BuildRefused, decompression_ceiling, open_archive, pack
from murmurd.registry.install import parse_ref
from murmurd.registry.errors import RegistryError
from murmurd.registry.versions import best, is_reserved, satisfies
from registrykit import make_zip, sha

MANIFEST = yaml.safe_dump({"name": "t", "version": "1.0.0", "runtime": "tool"}).encode()


def test_an_archive_is_read_by_name_and_hashed_over_its_bytes() -> None:
    data = make_zip({"murmur.yaml": MANIFEST, "t.wasm": b"\0asm", "manifest.yaml": b"ignored"})
    archive = open_archive(data, {})
    assert archive.sha256 == sha(data) and archive.manifest.name == "t"
    assert archive.payload() == ("t.wasm", b"\0asm")
    assert open_archive(make_zip({"murmur.yaml": MANIFEST, "capsule.wasm": b"c", "x.wasm": b"x"}), {}).payload() == (
        "capsule.wasm", b"c")


def test_only_the_old_manifest_name_counts_as_no_manifest() -> None:
    with pytest.raises(ArchiveError, match="missing murmur.yaml") as caught:
        open_archive(make_zip({"manifest.yaml": MANIFEST}), {})
    assert caught.value.code == "E-IO-003"


def test_a_manifest_without_string_identity_fields_is_refused() -> None:
    with pytest.raises(ArchiveError, match="missing string field 'runtime'"):
        open_archive(make_zip({"murmur.yaml": b"name: t\nversion: '1'\n"}), {})


@pytest.mark.parametrize("entry", ["../t.wasm", "/t.wasm", "sub/../../t.wasm"])
def test_an_absolute_or_dotdot_entry_is_never_selected(entry: str) -> None:
    archive = open_archive(make_zip({"murmur.yaml": MANIFEST, entry: b"\0asm"}), {})
    with pytest.raises(ArchiveError, match=r"missing root \.wasm file \(expected capsule\.wasm or one root \*\.wasm\)"):
        archive.payload()
    with pytest.raises(ArchiveError, match="has an unsafe path"):
        archive.read(entry)


def test_several_root_wasm_files_are_named_sorted() -> None:
    archive = open_archive(make_zip({"murmur.yaml": MANIFEST, "b.wasm": b"b", "a.wasm": b"a"}), {})
    with pytest.raises(ArchiveError, match="multiple root .wasm files found: a.wasm, b.wasm"):
        archive.payload()


def test_a_symlink_entry_is_never_read() -> None:
    data = make_zip({"murmur.yaml": MANIFEST}, symlinks={"t.wasm": "/etc/passwd"})
    with pytest.raises(ArchiveError, match="zip entry 't.wasm' is a symlink"):
        open_archive(data, {}).payload()
    skill = yaml.safe_dump({"name": "s", "version": "1", "runtime": "skill"}).encode()
    with pytest.raises(ArchiveError, match="is a symlink"):
        open_archive(make_zip({"murmur.yaml": skill}, symlinks={"skill.md": "/etc/shadow"}), {}).payload()


def test_a_duplicated_entry_name_is_refused_rather_than_guessed() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("murmur.yaml", MANIFEST)
        with pytest.warns(UserWarning):
            archive.writestr("murmur.yaml", MANIFEST)
    with pytest.raises(ArchiveError, match="occurs 2 times"):
        open_archive(buffer.getvalue(), {})


def test_a_decompression_bomb_stops_at_the_ceiling() -> None:
    bomb = make_zip({"murmur.yaml": MANIFEST, "t.wasm": b"\0" * 5_000_000})
    assert len(bomb) < 20_000
    env = {"MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES": "100000"}
    with pytest.raises(ArchiveError, match="zip entry 't.wasm' exceeds the 100000-byte decompression ceiling"):
        open_archive(bomb, env).payload()
    assert open_archive(bomb, {}).payload()[1] == b"\0" * 5_000_000  # under the default 500 MiB


def test_a_header_that_understates_the_size_does_not_get_past_the_ceiling() -> None:
    """The sizes in the headers are rewritten to claim 10 bytes; the reader counts what it inflates."""
    bomb = bytearray(make_zip({"murmur.yaml": MANIFEST, "t.wasm": b"\0" * 5_000_000}))
    real = (5_000_000).to_bytes(4, "little")
    at = bomb.find(real)
    while at != -1:  # the local header and the central directory both carry the uncompressed size
        bomb[at:at + 4] = (10).to_bytes(4, "little")
        at = bomb.find(real, at + 4)
    with pytest.raises(ArchiveError, match="t.wasm"):
        open_archive(bytes(bomb), {"MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES": "100000"}).payload()


def test_the_ceiling_applies_to_the_manifest_too_and_a_bad_value_falls_back() -> None:
    big = MANIFEST + b"#" * 5000 + b"\n"
    with pytest.raises(ArchiveError, match="zip entry 'murmur.yaml' exceeds the 1000-byte"):
        open_archive(make_zip({"murmur.yaml": big}), {"MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES": "1000"})
    assert decompression_ceiling({"MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES": "lots"}) == 500 * 1024 * 1024
    assert decompression_ceiling({}) == 500 * 1024 * 1024


def test_not_a_zip_is_refused() -> None:
    with pytest.raises(ArchiveError, match="not a zip archive"):
        open_archive(b"PK\x03\x04 nonsense", {})


def test_pack_writes_the_manifest_first_then_requires_files(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: t\nversion: 1.0.0\nruntime: tool\nrequires_files: [t_x.wasm]\n")
    (tmp_path / "t_x.wasm").write_bytes(b"\0asm")
    (tmp_path / "other.txt").write_text("not packed")
    manifest = ArtifactManifest.model_validate(yaml.safe_load((tmp_path / "murmur.yaml").read_text()))
    data = pack(tmp_path, manifest)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == ["murmur.yaml", "t_x.wasm"]
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in archive.infolist())
    assert open_archive(data, {}).payload() == ("t_x.wasm", b"\0asm")


def test_pack_refuses_unsafe_requires_files_and_no_root_wasm(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text("name: t\nversion: 1.0.0\nruntime: tool\n")
    (tmp_path / "link.wasm").symlink_to("/etc/passwd")
    for listed, code in ((["../x.wasm"], "E-BLD-002"), (["/etc/passwd"], "E-BLD-002"), (["link.wasm"], "E-BLD-002")):
        manifest = ArtifactManifest(name="t", version="1.0.0", runtime="tool", requires_files=listed)
        with pytest.raises(BuildRefused) as caught:
            pack(tmp_path, manifest)
        assert caught.value.code == code
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(BuildRefused) as caught:
        pack(tmp_path, ArtifactManifest(name="t", version="1.0.0", runtime="tool", requires_files=["readme.txt"]))
    assert caught.value.code == "E-BLD-003"


def test_reference_forms_and_version_rules() -> None:
    assert parse_ref("./a.mur.zip").kind == "file" and parse_ref("dist/a-1.mur.zip").kind == "file"
    assert parse_ref("github:o/r@v1").repo == "o/r" and parse_ref("github:o/r@v1").tag == "v1"
    assert (parse_ref("x@1.0").name, parse_ref("x@1.0").version) == ("x", "1.0") and parse_ref("x").version is None
    for bad, message in (("gitlab:o/r@v1", "unsupported artifact source prefix 'gitlab'"),
                         ("github:o@v1", "invalid github artifact reference"),
                         ("x@", "<name@version>"), ("x@1@2", "<name@version>")):
        with pytest.raises(RegistryError, match=message):
            parse_ref(bad)
    assert all(is_reserved(v) for v in ("latest", "Stable", "EDGE")) and not is_reserved("1.0")
    assert satisfies(">=0.1", "0.2.0") and not satisfies(">=0.3", "0.2.0") and satisfies("latest", "9")
    assert best(">=0.1", ["0.1.0", "0.10.0", "0.9.0", "1.0.0-rc1"]) == "0.10.0"
    assert best(None, ["1.0.0", "2.0.0"]) == "2.0.0" and best("3.0.0", ["1.0.0"]) is None


def test_the_directory_registry_refuses_reserved_and_existing_versions(tmp_path: Path) -> None:
    from murmurd.staging.artifacts import ResolveError
    from murmurd.staging.registry import FileRegistry

    registry = FileRegistry(tmp_path / "reg")
    artifact = tmp_path / "skill"
    artifact.mkdir()
    (artifact / "skill.md").write_text("# S\n")
    (artifact / "murmur.yaml").write_text("name: s\nversion: '1.0.0'\nruntime: skill\n")
    registry.publish(artifact)
    with pytest.raises(ResolveError, match=r"error\[E-REG-003\]: artifact s@1.0.0 already exists in registry"):
        registry.publish(artifact)
    (artifact / "murmur.yaml").write_text("name: s\nversion: Edge\nruntime: skill\n")
    with pytest.raises(ResolveError, match=r"error\[E-REG-004\]: version 'Edge' is reserved"):
        registry.publish(artifact)


def test_a_store_never_joins_an_unchecked_name_version_or_platform(tmp_path: Path) -> None:
    from murmurd.registry.errors import NotFound
    from murmurd.registry.stores import Store

    store = Store(tmp_path / "store", "global")
    for name, version in (("../etc", "1"), ("x", "../../1"), ("x", "a/b")):
        with pytest.raises(RegistryError, match="invalid artifact"):
            store.lookup(name, version)
    data = make_zip({"murmur.yaml": MANIFEST})
    store.put("t", "1.0.0", data, sha(data), None, overwrite=False)
    assert store.lookup("t", "1.0.0", "../../../x").archive.name == "t-1.0.0.mur.zip"  # no variant by that name
    with pytest.raises(RegistryError) as caught:
        store.put("t", "1.0.0", data, sha(data), None, overwrite=False)
    assert caught.value.code == "E-REG-003"
    with pytest.raises(RegistryError) as caught:
        store.put("u", "1.0.0", data, "0" * 64, None, overwrite=True)
    assert caught.value.code == "E-REG-002" and not (tmp_path / "store" / "u").exists()
    with pytest.raises(NotFound):
        store.lookup("t", "2.0.0")
