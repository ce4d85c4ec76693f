"""Attacks on `.mur.zip` reading: an archive whose central directory holds a huge number of
entries (or whose end record lies about how many) is refused before the zip reader parses
its directory, so a small upload or download cannot make murmurd build millions of records."""

from __future__ import annotations

import io
import struct
import time
import zipfile

import pytest
import yaml

from murmurd.registry.archive import MAX_DIRECTORY_BYTES, MAX_ENTRIES, ArchiveError, open_archive

MANIFEST = yaml.safe_dump({"name": "x", "version": "1.0.0", "runtime": "skill"}).encode()


def crowded(count: int, name_length: int = 1) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("murmur.yaml", MANIFEST)
        archive.writestr("skill.md", b"s")
        for index in range(count):
            archive.writestr(f"{index:0{name_length}d}", b"")
    return buffer.getvalue()


def test_an_archive_of_a_few_entries_still_opens() -> None:
    assert open_archive(crowded(50)).payload() == ("skill.md", b"s")


def test_more_entries_than_the_bound_are_refused_before_parsing() -> None:
    data = crowded(MAX_ENTRIES + 1)
    started = time.monotonic()
    with pytest.raises(ArchiveError, match="entries"):
        open_archive(data)
    assert time.monotonic() - started < 30


def test_an_end_record_that_lies_about_the_count_is_refused_by_the_directory_size() -> None:
    """Python's zip reader walks the central directory by its size in bytes, not by the count
    the end record claims: a count of 3 with a directory of many long-named entries is refused."""
    data = bytearray(crowded(MAX_DIRECTORY_BYTES // 200, name_length=250))
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 3, 3)  # entries on this disk, entries in total
    with pytest.raises(ArchiveError, match="central directory"):
        open_archive(bytes(data))
