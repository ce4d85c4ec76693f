"""`murmurd.workdir_fs`: workdir paths opened without following a symlink, on real files."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from murmurd import workdir_fs
from murmurd.workdir_fs import FileTooLarge, NotRegularFile, UnsafePathError, storage_name


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workdir = tmp_path / "workdir"
    (workdir / "out").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "target.txt").write_text("outside\n")
    return workdir


CAP = 1024  # enough for every small file these tests read


def _outside(root: Path) -> Path:
    return root.parent / "outside"


def test_files_round_trip(root: Path) -> None:
    workdir_fs.write_text(root, "out/deep/a.txt", "one")
    workdir_fs.write_text(root, "out/deep/a.txt", "two")
    workdir_fs.append_text(root, "logs/x.log", "a\n")
    workdir_fs.append_bytes(root, "logs/x.log", b"b\n")
    assert workdir_fs.read_text(root, "out/deep/a.txt", max_bytes=CAP) == "two"
    assert workdir_fs.read_bytes(root, "./logs//x.log", max_bytes=CAP) == b"a\nb\n"
    assert sorted(os.listdir(root / "out" / "deep")) == ["a.txt"]  # no temporary file left
    workdir_fs.write_text(root, "out/wire.txt", "lone \ud800 surrogate")
    assert workdir_fs.read_text(root, "out/wire.txt", max_bytes=CAP) == "lone ? surrogate"
    workdir_fs.unlink(root, "out/deep/a.txt")
    workdir_fs.unlink(root, "out/deep/a.txt")  # already gone: fine
    assert not (root / "out" / "deep" / "a.txt").exists()


def test_a_symlinked_file_is_never_read_or_appended_to(root: Path) -> None:
    os.symlink("../../outside/target.txt", root / "out" / "link.txt")
    with pytest.raises(UnsafePathError, match="'out/link.txt': is a symlink"):
        workdir_fs.read_text(root, "out/link.txt", max_bytes=CAP)
    with pytest.raises(UnsafePathError, match="'out/link.txt': is a symlink"):
        workdir_fs.append_text(root, "out/link.txt", "appended")
    assert (_outside(root) / "target.txt").read_text() == "outside\n"


def test_a_whole_file_write_replaces_a_symlink_and_never_writes_through_it(root: Path) -> None:
    os.symlink("../../outside/target.txt", root / "out" / "result.txt")
    workdir_fs.write_text(root, "out/result.txt", "answer")
    assert not (root / "out" / "result.txt").is_symlink()
    assert (root / "out" / "result.txt").read_text() == "answer"
    assert (_outside(root) / "target.txt").read_text() == "outside\n"


@pytest.mark.parametrize("operation", ["read", "write", "append", "make_dirs", "unlink", "create_new"])
def test_a_symlinked_directory_on_the_way_is_refused(root: Path, operation: str) -> None:
    os.symlink("../outside", root / "logs")
    (_outside(root) / "x.log").write_text("outside\n")
    act = {
        "read": lambda: workdir_fs.read_bytes(root, "logs/x.log", max_bytes=CAP),
        "write": lambda: workdir_fs.write_text(root, "logs/x.log", "in"),
        "append": lambda: workdir_fs.append_text(root, "logs/x.log", "in"),
        "make_dirs": lambda: workdir_fs.make_dirs(root, "logs/sub"),
        "unlink": lambda: workdir_fs.unlink(root, "logs/x.log"),
        "create_new": lambda: workdir_fs.create_new(root, "logs/new.log"),
    }[operation]
    with pytest.raises(UnsafePathError, match="'logs': is a symlink; murmurd follows no symlink"):
        act()
    assert sorted(os.listdir(_outside(root))) == ["target.txt", "x.log"]
    assert (_outside(root) / "x.log").read_text() == "outside\n"


def test_a_file_where_a_directory_belongs_is_refused(root: Path) -> None:
    (root / "logs").write_text("not a dir")
    with pytest.raises(UnsafePathError, match="'logs': is not a directory"):
        workdir_fs.append_text(root, "logs/x.log", "in")


def test_missing_files_and_other_kinds(root: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'out/none.txt'"):
        workdir_fs.read_bytes(root, "out/none.txt", max_bytes=CAP)
    with pytest.raises(FileNotFoundError, match="'nodir'"):
        workdir_fs.read_bytes(root, "nodir/x", max_bytes=CAP)
    with pytest.raises(NotRegularFile, match="'out' is not a regular file"):
        workdir_fs.read_bytes(root, "out", max_bytes=CAP)
    os.mkfifo(root / "out" / "pipe")
    with pytest.raises(NotRegularFile):  # opened non-blocking: a FIFO never stalls the runtime
        workdir_fs.read_bytes(root, "out/pipe", max_bytes=CAP)
    with pytest.raises(OSError):  # no reader: ENXIO, not a hang
        workdir_fs.append_text(root, "out/pipe", "x")
    with pytest.raises(FileExistsError):
        workdir_fs.create_new(root, "out")
    with pytest.raises(OSError, match="cannot be opened"):
        workdir_fs.read_bytes(root / "missing-root", "x", max_bytes=CAP)


def test_reads_are_capped(root: Path) -> None:
    workdir_fs.write_text(root, "big.txt", "x" * 10)
    assert workdir_fs.read_bytes(root, "big.txt", max_bytes=10) == b"x" * 10
    with pytest.raises(FileTooLarge, match="10 bytes, over the 9-byte limit"):
        workdir_fs.read_bytes(root, "big.txt", max_bytes=9)


def test_a_sparse_file_of_gigabytes_is_refused_without_reading_it(root: Path) -> None:
    """What a guest does to a file it can reach: truncate it huge (free on disk until read)."""
    with open(root / "out" / "result.txt", "wb") as handle:
        handle.truncate(3 * 1024**3)
    tracemalloc.start()
    try:
        with pytest.raises(FileTooLarge, match="'out/result.txt' is 3221225472 bytes, over the 1024-byte limit"):
            workdir_fs.read_text(root, "out/result.txt", max_bytes=CAP)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_file_larger_than_its_descriptor_says_is_still_cut_at_the_limit() -> None:
    """procfs files report size 0 and read as more: the read itself stops at the limit (a file
    that grows after the size check is caught the same way)."""
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0 and len(status.read_bytes()) > 64
    with pytest.raises(FileTooLarge, match="'status' is at least 65 bytes, over the 64-byte limit"):
        workdir_fs.read_bytes(Path("/proc/self"), "status", max_bytes=64)


@pytest.mark.parametrize("unnamed", [True, False], ids=["o_tmpfile", "named-then-unlinked"])
def test_an_anonymous_file_has_no_name_a_guest_could_open(root: Path, unnamed: bool) -> None:
    before = sorted(os.listdir(root / "out"))
    directory = workdir_fs.open_directory(root, "out")
    try:
        fd = workdir_fs.anonymous_file(directory, unnamed=unnamed)
    finally:
        os.close(directory)
    try:
        assert sorted(os.listdir(root / "out")) == before
        with open(workdir_fs.fd_path(fd), "wb") as writer:  # what wasmtime does with the path
            writer.write(b"written through the path")
        assert os.pread(fd, 100, 0) == b"written through the path"
    finally:
        os.close(fd)


def test_an_fd_path_opens_what_was_checked_even_after_a_swap(root: Path) -> None:
    fd = workdir_fs.open_directory(root, "data/sub")
    try:
        os.rename(root / "data", root / "moved")
        os.symlink("../outside", root / "data")  # the name now leads outside
        (root / "moved" / "sub" / "inside.txt").write_text("inside")
        assert os.listdir(workdir_fs.fd_path(fd)) == ["inside.txt"]
    finally:
        os.close(fd)


@pytest.mark.parametrize(("rel", "rule"), [
    ("../outside/target.txt", "climbs out"),
    ("out/../../outside/target.txt", "climbs out"),
    ("/etc/passwd", "absolute"),
    ("out/a\x00b", "NUL"),
    ("", "names the workdir itself"),
    ("./", "names the workdir itself"),
])
def test_malformed_relative_paths_are_refused(root: Path, rel: str, rule: str) -> None:
    with pytest.raises(UnsafePathError, match=rule):
        workdir_fs.write_text(root, rel, "x")
    assert (_outside(root) / "target.txt").read_text() == "outside\n"


def test_storage_names_keep_plain_ids_and_hash_the_rest() -> None:
    assert storage_name("ctx_0123abcd") == "ctx_0123abcd"
    assert storage_name("client-chosen-1.v2") == "client-chosen-1.v2"
    hostile = ["../../../tmp/x", "a/b", "..", ".", ".hidden", "ctx\x00nul", "", "x" * 129, "é", "\ud800"]
    names = [storage_name(value) for value in hostile]
    assert all(name.startswith("_") and len(name) == 65 and name[1:].isalnum() for name in names)
    assert len(set(names)) == len(hostile)
    assert storage_name("a/b") == storage_name("a/b")  # stable: the same context finds its history again


def test_the_layout_turns_names_and_ids_into_safe_relative_paths(tmp_path: Path) -> None:
    from murmurd.workdir import Workdir, component, history_file, log_file, task_result_file, tool_file

    assert history_file("ctx_1") == "contexts/ctx_1/history.json"
    assert history_file("../../../tmp/x") == f"contexts/{storage_name('../../../tmp/x')}/history.json"
    assert task_result_file("tsk_1") == "out/result_tsk_1.txt"
    assert task_result_file("a/../../b").count("/") == 1
    assert tool_file("echo", "skill.md") == "tools/echo/skill.md" and log_file("tool-echo.log") == "logs/tool-echo.log"
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x00b"):
        with pytest.raises(UnsafePathError, match="is not a plain file name"):
            component(bad)
    with pytest.raises(UnsafePathError):
        tool_file("../../escape", "murmur.yaml")
    layout = Workdir(tmp_path)
    assert layout.path(".") == layout.path("./") == tmp_path and layout.path("out/x") == tmp_path / "out" / "x"
    with pytest.raises(UnsafePathError, match="climbs out"):
        layout.path("data/../../x")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_lay_down_makes_a_new_tree_in_one_pass_and_hands_back_its_root_and_appender(tmp_path: Path) -> None:
    before = _open_fds()
    skill = b"x" * 300_000  # more than one write(2) may take at once
    tree = workdir_fs.plan_tree(("out", "tools", "tools/ask"), ("tools/ask/murmur.yaml", "tools/ask/skill.md", "MURMUR.md"),
                                append="trace.jsonl")
    root_fd, trace_fd = workdir_fs.lay_down(tmp_path, "ses_a", tree, (b"name: ask\n", skill, b"# hi\n"))
    try:
        root = tmp_path / "ses_a"
        assert os.fstat(root_fd).st_ino == root.stat().st_ino
        assert (root / "out").is_dir() and (root / "tools/ask/murmur.yaml").read_bytes() == b"name: ask\n"
        assert (root / "tools/ask/skill.md").read_bytes() == skill and (root / "MURMUR.md").read_bytes() == b"# hi\n"
        assert (root / "trace.jsonl").read_bytes() == b""
        assert trace_fd is not None
        os.write(trace_fd, b"one\n")
        with (root / "trace.jsonl").open("ab") as other:  # someone else appends meanwhile
            other.write(b"two\n")
        os.write(trace_fd, b"three\n")  # O_APPEND: never over another writer's line
        assert (root / "trace.jsonl").read_bytes() == b"one\ntwo\nthree\n"
    finally:
        os.close(root_fd)
        os.close(trace_fd)
    assert _open_fds() == before  # every directory opened on the way is closed

    # Nothing is laid over what exists, nor through a symlink planted at the name.
    os.symlink(tmp_path / "ses_a", tmp_path / "ses_b")
    for name in ("ses_a", "ses_b"):
        with pytest.raises(FileExistsError):
            workdir_fs.lay_down(tmp_path, name, workdir_fs.plan_tree(("out",), ("MURMUR.md",), append="trace.jsonl"),
                                (b"planted?\n",))
    assert (tmp_path / "ses_a/MURMUR.md").read_bytes() == b"# hi\n"
    assert _open_fds() == before
    with pytest.raises(UnsafePathError):
        workdir_fs.lay_down(tmp_path, "../up", workdir_fs.plan_tree((), ()), ())
    for refused in ("../x", "/abs", "a\x00b"):  # a plan's names are checked once, when planned
        with pytest.raises(UnsafePathError):
            workdir_fs.plan_tree((), (refused,))
    for parts in (("..",), ("a/b",), ("",), ()):  # nor can a plan made by hand hold one
        with pytest.raises(UnsafePathError):
            workdir_fs.TreePlan((), (parts,), None)
    with pytest.raises(ValueError, match="1 files planned, 0 contents given"):  # before anything is made
        workdir_fs.lay_down(tmp_path, "ses_short", workdir_fs.plan_tree((), ("MURMUR.md",)), ())
    assert not (tmp_path / "ses_short").exists() and _open_fds() == before
    files = [("MURMUR.md",)]  # nor one changed after it was made: the plan holds copies
    plan = workdir_fs.TreePlan((), files, None)
    files[0] = ("..", "escaped.txt")
    os.close(workdir_fs.lay_down(tmp_path, "ses_copy", plan, (b"x",))[0])
    assert (tmp_path / "ses_copy/MURMUR.md").read_bytes() == b"x" and not (tmp_path / "escaped.txt").exists()

