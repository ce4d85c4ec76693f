"""Reading a tool's `data-path` beneath the session workdir: one test per row of the seed's
"Returning a large result" table, plus the escapes and symlink shapes around it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from murmurd.session.data_path import MAX_DATA_BYTES, DataPathError, read_data_path

MiB = 1024 * 1024


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    (root / "out" / "deep").mkdir(parents=True)
    (root / "out" / "result.json").write_text('{"ok": true}', encoding="utf-8")
    (root / "out" / "deep" / "notes.txt").write_text("deep", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("secret outside", encoding="utf-8")
    return root


def refused(root: Path, data_path: str, **kwargs: int) -> str:
    with pytest.raises(DataPathError) as caught:
        read_data_path(root, data_path, **kwargs)
    message = str(caught.value)
    assert message.startswith(f"data-path {data_path!r}")
    assert isinstance(caught.value, ValueError)
    return message


# -- a regular file under the session workdir: its contents become the result


def test_a_regular_file_under_the_workdir(workdir: Path) -> None:
    assert read_data_path(workdir, "out/result.json") == '{"ok": true}'
    assert read_data_path(workdir, "out/deep/notes.txt") == "deep"
    assert read_data_path(workdir, "./out//deep/./notes.txt") == "deep"


def test_invalid_utf8_is_replaced_not_refused(workdir: Path) -> None:
    (workdir / "bin.dat").write_bytes(b"ok \xff\xfe end")
    assert read_data_path(workdir, "bin.dat") == "ok \ufffd\ufffd end"


def test_an_empty_file_is_an_empty_result(workdir: Path) -> None:
    (workdir / "empty.txt").write_bytes(b"")
    assert read_data_path(workdir, "empty.txt") == ""


# -- an absolute path, or one climbing out with `..`: the call fails


def test_an_absolute_path_fails(workdir: Path) -> None:
    target = workdir / "out" / "result.json"  # even one that points inside the workdir
    assert "absolute" in refused(workdir, str(target))
    assert "absolute" in refused(workdir, "/etc/passwd")


@pytest.mark.parametrize("data_path", ["../outside.txt", "out/../../outside.txt", "out/../out/result.json", ".."])
def test_climbing_with_dotdot_fails(workdir: Path, data_path: str) -> None:
    assert "climbs out with '..'" in refused(workdir, data_path)


# -- a path passing through a symlink, wherever the symlink points: the call fails


def test_a_symlink_pointing_outside_fails(workdir: Path) -> None:
    os.symlink(workdir.parent / "outside.txt", workdir / "link.txt")
    message = refused(workdir, "link.txt")
    assert "symlink at 'link.txt'" in message


def test_a_symlink_pointing_inside_the_workdir_fails_too(workdir: Path) -> None:
    os.symlink("out/result.json", workdir / "alias.json")
    assert "symlink at 'alias.json'" in refused(workdir, "alias.json")


def test_a_symlinked_directory_in_the_middle_fails(workdir: Path) -> None:
    os.symlink(workdir / "out" / "deep", workdir / "out" / "shortcut")
    assert "symlink at 'out/shortcut'" in refused(workdir, "out/shortcut/notes.txt")
    os.symlink(workdir.parent, workdir / "up")
    assert "symlink at 'up'" in refused(workdir, "up/outside.txt")


def test_a_dangling_symlink_fails_as_a_symlink(workdir: Path) -> None:
    os.symlink("nowhere", workdir / "dangling")
    assert "symlink" in refused(workdir, "dangling")


# -- a file that does not exist: the call fails


def test_a_missing_file_fails(workdir: Path) -> None:
    assert "no such file" in refused(workdir, "out/missing.json")
    assert "no such file" in refused(workdir, "nodir/missing.json")


def test_a_file_used_as_a_directory_fails(workdir: Path) -> None:
    assert "no such file" in refused(workdir, "out/result.json/inner")


def test_a_directory_or_special_file_is_not_a_regular_file(workdir: Path) -> None:
    assert "not a regular file" in refused(workdir, "out/deep")
    assert "not a regular file" in refused(workdir, "out/deep/")
    os.mkfifo(workdir / "pipe")
    assert "not a regular file" in refused(workdir, "pipe")


@pytest.mark.parametrize("data_path", ["", ".", "./", "%2e"])
def test_a_name_without_a_file_fails(workdir: Path, data_path: str) -> None:
    refused(workdir, data_path)


# -- a file over 10 MiB: the call fails


def test_exactly_10_mib_is_read(workdir: Path) -> None:
    assert MAX_DATA_BYTES == 10 * MiB
    (workdir / "big.txt").write_bytes(b"x" * (10 * MiB))
    text = read_data_path(workdir, "big.txt")
    assert len(text) == 10 * MiB


def test_10_mib_and_one_byte_fails(workdir: Path) -> None:
    (workdir / "big.txt").write_bytes(b"x" * (10 * MiB + 1))
    message = refused(workdir, "big.txt")
    assert f"is {10 * MiB + 1} bytes, over the {10 * MiB}-byte limit" in message


def test_the_limit_is_configurable(workdir: Path) -> None:
    (workdir / "small.txt").write_bytes(b"12345")
    assert read_data_path(workdir, "small.txt", max_bytes=5) == "12345"
    assert "over the 4-byte limit" in refused(workdir, "small.txt", max_bytes=4)


# -- a path holding `%` escapes: decoded before it is resolved


def test_percent_escapes_are_decoded_before_resolving(workdir: Path) -> None:
    (workdir / "out" / "with space.txt").write_text("spaced", encoding="utf-8")
    assert read_data_path(workdir, "out/with%20space.txt") == "spaced"
    assert read_data_path(workdir, "out%2Fresult.json") == '{"ok": true}'


@pytest.mark.parametrize("data_path", ["%2e%2e/outside.txt", "out/%2E%2E/%2e%2e/outside.txt", "%2E%2E"])
def test_encoded_dotdot_fails_like_dotdot(workdir: Path, data_path: str) -> None:
    message = refused(workdir, data_path)
    assert "climbs out with '..'" in message
    assert "(decoded '" in message


def test_an_encoded_absolute_path_fails(workdir: Path) -> None:
    message = refused(workdir, "%2Fetc%2Fpasswd")
    assert "absolute" in message and "(decoded '/etc/passwd')" in message


def test_an_encoded_nul_fails(workdir: Path) -> None:
    assert "NUL" in refused(workdir, "out/result.json%00.txt")


def test_a_literal_percent_that_is_not_an_escape_is_kept(workdir: Path) -> None:
    (workdir / "100%.txt").write_text("full", encoding="utf-8")
    assert read_data_path(workdir, "100%.txt") == "full"


def test_the_message_names_the_path_and_the_rule(workdir: Path) -> None:
    with pytest.raises(DataPathError) as caught:
        read_data_path(workdir, "x/../y")
    assert str(caught.value) == "data-path 'x/../y': climbs out with '..'"
    assert caught.value.data_path == "x/../y"
