"""A CLI's stdin fed by `CliProcess.feed_stdin` (the claude dialect's task) never outlives the
kill: a real child that leaves the CLI's process group (`setsid`) with stdin inherited and never
read holds the pipe open, and with no pids cgroup to end it (`group` None, as on a host without
one) the write blocked on the full pipe used to hold the kill's close of stdin, and the session's
teardown behind it, for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from murmurd.session.process.spawn import CliProcess

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


def test_a_stdin_feed_blocked_by_a_setsid_child_ends_with_the_kill() -> None:
    proc = subprocess.Popen([sys.executable, "-c", LEAVES_A_READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    reader = int(proc.stdout.readline())
    try:
        cli = CliProcess(proc, None)
        fed = threading.Thread(target=cli.feed_stdin, args=(b"x" * (4 << 20),))  # far past a pipe's buffer
        fed.start()
        assert proc.wait(timeout=60) == 0  # the CLI is gone; its setsid child still holds stdin unread
        fed.join(timeout=0.5)
        assert fed.is_alive()  # the feed waits on the full pipe...
        killed = threading.Thread(target=cli.kill)
        killed.start()
        killed.join(timeout=60)
        fed.join(timeout=60)
        assert not killed.is_alive() and not fed.is_alive()  # ...and ends with the kill, which ends too
        assert proc.stdin is None and proc.stdout is None
        os.kill(reader, 0)  # the setsid child is no part of the CLI's group: only a pids cgroup ends it
    finally:
        os.kill(reader, signal.SIGKILL)


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
