"""A shell command's output: each stream collected (its head in memory, the rest spilled to a
nameless file), cut for the model, and logged in full when cut.

Each of stdout/stderr is cut at 16 KiB (on a UTF-8 character boundary, invalid bytes replaced)
and `truncated` is set; the full output of both streams, labelled, is then written to
`logs/shell-<UTC timestamp>.log` and `full_output_path` names it relative to the workdir. A stream
past `max_log_stream_bytes` (256 MiB) is cut in the log too, with a note, so a runaway command
cannot fill the disk. The spool and the log are opened through descriptors of the logs directory.
"""

from __future__ import annotations

import codecs
import datetime as dt
import os
import shlex
import shutil
from pathlib import Path
from typing import IO

from murmurd import workdir_fs
from murmurd.session.shell_model import ShellFailed, ShellInvocation, ShellOutcome, ShellPolicy, beneath_workdir

READ_CHUNK = 64 * 1024


class StreamCollector:
    """One output stream: the first bytes in memory, the rest spilled to an unnamed file."""

    def __init__(self, policy: ShellPolicy) -> None:
        self._policy = policy
        self._keep = policy.max_stream_bytes
        self._head = bytearray()
        self._spool: IO[bytes] | None = None
        self._spooled = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self._spool is None:
            if self.total <= self._keep:
                self._head += data
                return
            self._spool = _spool_file(self._policy)
            self._spool.write(self._head)
            self._spooled = len(self._head)
            self._head += data[: self._keep - len(self._head)]
        room = self._policy.max_log_stream_bytes - self._spooled
        if room > 0:
            piece = data[:room]
            self._spool.write(piece)
            self._spooled += len(piece)

    def text(self, limit: int) -> str:
        """The first `limit` bytes as text, never ending in a split UTF-8 character."""
        head = bytes(self._head[:limit])
        if self.total <= limit:
            return head.decode("utf-8", errors="replace")
        return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(head, final=False)

    def copy_to(self, sink: IO[bytes]) -> int:
        """Write everything kept to `sink`; the number of bytes not kept."""
        if self._spool is None:
            sink.write(self._head)
            return 0
        self._spool.flush()
        self._spool.seek(0)
        shutil.copyfileobj(self._spool, sink, READ_CHUNK)
        return self.total - self._spooled

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def _logs_location(policy: ShellPolicy) -> tuple[Path, str]:
    return beneath_workdir(policy, policy.logs_dir)


def _spool_file(policy: ShellPolicy) -> IO[bytes]:
    """A nameless spool in the logs directory, opened through a descriptor of that directory (a
    symlink on the way is refused, and none planted later is followed)."""
    root, logs = _logs_location(policy)
    try:
        dir_fd = workdir_fs.open_directory(root, logs)
        try:
            return os.fdopen(workdir_fs.anonymous_file(dir_fd), "w+b")
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ShellFailed(f"shell: cannot write the shell log: {exc}") from None


def _new_log(policy: ShellPolicy, root: Path, logs: str) -> tuple[IO[bytes], str]:
    """A fresh `shell-<stamp>.log` (never an existing file, never through a symlink)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    for attempt in range(100):
        name = f"shell-{stamp}.log" if attempt == 0 else f"shell-{stamp}-{attempt}.log"
        try:
            return workdir_fs.create_new(root, f"{logs}/{name}"), name
        except FileExistsError:
            continue
        except OSError as exc:
            raise ShellFailed(f"shell: cannot write the shell log: {exc}") from None
    raise ShellFailed(f"shell: cannot find a free log name in {str(policy.logs_dir)!r}")  # pragma: no cover


def write_log(
    policy: ShellPolicy, invocation: ShellInvocation, exit_code: int, out: StreamCollector, err: StreamCollector
) -> str:
    root, logs = _logs_location(policy)
    handle, name = _new_log(policy, root, logs)
    with handle as sink:
        header = [
            f"$ {shlex.join(invocation.argv)}",
            f"binary: {invocation.binary_path}",
            f"exit code: {exit_code}",
        ]
        sink.write(("\n".join(header) + "\n").encode("utf-8", errors="replace"))
        for label, stream in (("stdout", out), ("stderr", err)):
            sink.write(f"==> {label} ({stream.total} bytes) <==\n".encode())
            dropped = stream.copy_to(sink)
            sink.write(b"\n")
            if dropped:
                sink.write(
                    f"[murmurd: {dropped} more {label} bytes not kept; the log keeps "
                    f"{policy.max_log_stream_bytes} bytes per stream]\n".encode()
                )
    path = policy.logs_dir / name
    try:
        return path.relative_to(policy.workdir).as_posix()
    except ValueError:
        return str(path)


def format_shell_result(command: str, outcome: ShellOutcome) -> str:
    """The text the model sees for a shell tool call."""
    lines = [
        f"$ {command}",
        f"Exit code: {outcome.exit_code}",
        "Stdout:",
        _strip_one_newline(outcome.stdout),
        "Stderr:",
        _strip_one_newline(outcome.stderr),
    ]
    if outcome.truncated:
        where = outcome.full_output_path or "the shell log"
        lines.append(f"[Output was cut; the full output is in {where}]")
    return "\n".join(lines)


def _strip_one_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text
