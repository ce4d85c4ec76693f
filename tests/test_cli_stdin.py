"""A CLI's stdin fed by `CliProcess.feed_stdin` (the claude dialect's task) never outlives the
CLI: a real child that leaves the CLI's process group (`setsid`) with stdin inherited and never
read holds the pipe open, and with no pids cgroup to end it (`group` None, as on a host without
one) the write blocked on the full pipe used to wait for the run's timeout, and then held the
kill's close of stdin, and the session's teardown behind it, for good. Now the feed ends when the
CLI exits (a pidfd) or is killed (a stop pipe)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from murmurd.session.process.spawn import CliProcess, _write_until_stopped

# The CLI: a child that calls setsid, keeps stdin (inherited) and waits on a pipe no one writes;
# it prints that child's pid and exits without reading its own stdin.
LEAVES_A_READER = """
import os
child = os.fork()
if child == 0:
    os.setsid()
    wait, _ = os.pipe()
    os.read(wait, 1)
    os._exit(0)
print(child, flush=True)
"""


def test_a_stdin_feed_ends_when_the_cli_exits_though_a_setsid_child_holds_stdin() -> None:
    proc = subprocess.Popen([sys.executable, "-c", LEAVES_A_READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    reader = int(proc.stdout.readline())
    try:
        cli = CliProcess(proc, None)
        fed = threading.Thread(target=cli.feed_stdin, args=(b"x" * (4 << 20),))  # far past a pipe's buffer
        fed.start()
        fed.join(timeout=60)  # the CLI exits at once; its setsid child holds stdin, unread
        assert not fed.is_alive()  # the feed ended with the CLI, not at the run's timeout
        killed = threading.Thread(target=cli.kill)
        killed.start()
        killed.join(timeout=60)
        assert not killed.is_alive()
        assert proc.stdin is None and proc.stdout is None
        os.kill(reader, 0)  # the setsid child is no part of the CLI's group: only a pids cgroup ends it
    finally:
        os.kill(reader, signal.SIGKILL)


def test_the_kill_ends_a_feed_blocked_on_a_cli_that_never_reads() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import os; print(flush=True); os.read(os.pipe()[0], 1)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"\n"  # it runs, and will never read stdin
    cli = CliProcess(proc, None)
    fed = threading.Thread(target=cli.feed_stdin, args=(b"x" * (4 << 20),))
    fed.start()
    fed.join(timeout=0.5)
    assert fed.is_alive()  # blocked on the full pipe (4 MiB cannot fit): it can only end with the kill
    killed = threading.Thread(target=cli.kill)
    killed.start()
    killed.join(timeout=60)
    fed.join(timeout=60)
    assert not killed.is_alive() and not fed.is_alive()
    assert proc.returncode == -signal.SIGKILL


def test_the_stop_pipe_ends_a_blocked_write_where_no_exit_can_be_watched() -> None:
    """The kill's own way to end a feed (a kernel without pidfds: only the stop pipe)."""
    read_end, write_end = os.pipe()
    stop_read, stop_write = os.pipe()
    try:
        writer = threading.Thread(target=_write_until_stopped, args=(write_end, b"z" * (4 << 20), (stop_read,)))
        writer.start()
        writer.join(timeout=0.5)
        assert writer.is_alive()  # the reader is open and reads nothing: the write waits
        os.write(stop_write, b"\0")
        writer.join(timeout=60)
        assert not writer.is_alive()
    finally:
        for fd in (read_end, write_end, stop_read, stop_write):
            os.close(fd)


def test_a_stdin_feed_the_cli_reads_is_written_whole_and_closed() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print(len(sys.stdin.buffer.read()))"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    cli = CliProcess(proc, None)
    try:
        cli.feed_stdin(b"y" * (1 << 20))
        assert proc.stdout is not None and int(proc.stdout.readline()) == 1 << 20  # all of it, then EOF
        assert proc.wait(timeout=60) == 0
    finally:
        cli.kill()
