"""What opening a context session costs (issue 29, item 1): CPU ms per open against a bare
mkdir + write of the same tree, measured in the same run.

A served capsule with a bound above 1 opens a session per context: a fresh `ses_` workdir laid
out from what staging prepared (`murmurd.staging.sessions.open_session_staging`), a `Session`
over it, and `Session.open()` (what `CapsuleDaemon._open_context_slot` does), then, at capacity,
its close. The capsule: the chaos driver, two WASM tools, a skill and two shell binaries.

Measured, per open, as CPU time of the whole process (`getrusage`: user and kernel, every
thread, the trace drain's included) over `--opens` opens after a warm-up:
- layout: `open_session_staging` alone (the workdir, its files, MURMUR.md);
- open: layout + `Session(...)` + `open()` (what a context's first task waits for);
- open+close: the above and `close()` (a context session's whole life without a task);
- baseline: `os.makedirs` + plain `open`/`write` of the very directories and files the layout
  made (same names, same bytes), which no implementation that lays the tree down can beat;
- phases: layout, `Session(...)`, `open()` and `close()` of each open+close timed apart in the
  same loop, so murmurd's own part (all but the layout) is read under the machine state the
  layout saw (kernel CPU of a `mkdir` swings several-fold with the shared machine's load).

Target: open <= 0.5 ms of CPU. Bounded; nothing leaves the machine.

    .venv/bin/python bench/context_open.py [--opens 300] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from murmurd.host import ComponentHost  # noqa: E402
from murmurd.staging.registry import FileRegistry  # noqa: E402
from murmurd.session.session import Session  # noqa: E402
from murmurd.staging.sessions import open_session_staging  # noqa: E402
from murmurd.staging.stage import StagedCapsule, stage_capsule  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"


def capsule(root: Path) -> Path:
    skill = root / "tidy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("Keep the workdir tidy: one file per result.\n" * 40)
    directory = root / "capsule"
    directory.mkdir()
    manifest = {
        "name": "context-open", "version": "1.0.0",
        "artifacts": [
            {"name": "chaos-driver", "runtime": "driver", "source": str(FIXTURES / "chaos-driver"), "local_source": True},
            {"name": "ask", "runtime": "tool", "source": str(FIXTURES / "ask"), "local_source": True},
            {"name": "echo", "runtime": "tool", "source": str(EXAMPLES / "echo"), "local_source": True},
            {"name": "tidy", "runtime": "skill", "source": str(skill), "local_source": True},
        ],
        "capabilities": {"shell": {"allow": ["sh", "git"]}},
        "inference": {"endpoint": "http://127.0.0.1:9", "model": "chaos",
                      "driver": {"artifact": "chaos-driver", "config": {}}},
    }
    (directory / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return directory


def tree_of(root: Path) -> tuple[list[str], list[tuple[str, bytes]]]:
    """The directories and files (relative, with their bytes) a laid-out workdir holds."""
    dirs: list[str] = []
    files: list[tuple[str, bytes]] = []
    for here, subdirs, names in os.walk(root):
        rel = os.path.relpath(here, root)
        dirs += [os.path.normpath(os.path.join(rel, d)) for d in sorted(subdirs)]
        files += [(os.path.normpath(os.path.join(rel, n)), (Path(here) / n).read_bytes()) for n in sorted(names)
                  if n != "trace.jsonl"]  # the trace is the session's, not the layout's
    return dirs, files


class Cpu:
    """CPU of the whole process (every thread) over a block: user and kernel ms per `count`."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> Cpu:
        self._start = resource.getrusage(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *_: object) -> None:
        end = resource.getrusage(resource.RUSAGE_SELF)
        self.user = (end.ru_utime - self._start.ru_utime) * 1000 / self.count
        self.system = (end.ru_stime - self._start.ru_stime) * 1000 / self.count


def bare(parent: Path, dirs: list[str], files: list[tuple[str, bytes]], count: int) -> Cpu:
    cpu = Cpu(count)
    with cpu:
        for i in range(count):
            root = parent / f"bare_{i}"
            root.mkdir()
            for d in dirs:
                os.makedirs(root / d, exist_ok=True)
            for rel, data in files:
                with open(root / rel, "wb") as sink:
                    sink.write(data)
    return cpu


def layouts(staged: StagedCapsule, count: int) -> Cpu:
    cpu = Cpu(count)
    with cpu:
        for _ in range(count):
            open_session_staging(staged)
    return cpu


async def opens(staged: StagedCapsule, host: ComponentHost, count: int, *, close: bool) -> Cpu:
    sessions = []
    cpu = Cpu(count)
    with cpu:
        for _ in range(count):
            session = Session(open_session_staging(staged), host)
            await session.open()
            if close:
                await session.close()
            else:
                sessions.append(session)
    for session in sessions:
        await session.close()
    return cpu


class Phases:
    """CPU (user + kernel ms, whole process) of each phase of an open, summed over `count` opens."""

    NAMES = ("layout", "Session(...)", "open()", "close()")

    def __init__(self, count: int) -> None:
        self.count = count
        self.ms = dict.fromkeys(self.NAMES, 0.0)

    def add(self, name: str, start: resource.struct_rusage, end: resource.struct_rusage) -> None:
        self.ms[name] += (end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime) * 1000 / self.count


async def phases(staged: StagedCapsule, host: ComponentHost, count: int) -> Phases:
    """Each phase of open+close timed apart, in the same loop: what murmurd adds (Session, open,
    close) against what the layout costs, under the same machine state."""
    result = Phases(count)
    usage = resource.getrusage
    for _ in range(count):
        a = usage(resource.RUSAGE_SELF)
        opened = open_session_staging(staged)
        b = usage(resource.RUSAGE_SELF)
        session = Session(opened, host)
        c = usage(resource.RUSAGE_SELF)
        await session.open()
        d = usage(resource.RUSAGE_SELF)
        await session.close()
        e = usage(resource.RUSAGE_SELF)
        for name, start, end in zip(Phases.NAMES, (a, b, c, d), (b, c, d, e)):
            result.add(name, start, end)
    return result


def clear(parent: Path, keep: Path) -> None:
    for child in parent.iterdir():
        if child != keep:
            shutil.rmtree(child)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="murmurd-context-open-") as tmp:
        host = ComponentHost()
        try:
            staged = stage_capsule(capsule(Path(tmp)), host=host, registry=FileRegistry(Path(tmp) / "none"), env={})
            parent = staged.workdir.root.parent
            dirs, files = tree_of(open_session_staging(staged).workdir.root)
            await opens(staged, host, 20, close=True)  # warm-up: imports, the tokenizer, first-call costs
            results: dict[str, list[Cpu]] = {"baseline": [], "layout": [], "open": [], "open+close": []}
            split: list[Phases] = []
            for _ in range(args.runs):
                results["baseline"].append(bare(parent, dirs, files, args.opens))
                clear(parent, staged.workdir.root)
                results["layout"].append(layouts(staged, args.opens))
                clear(parent, staged.workdir.root)
                results["open"].append(await opens(staged, host, args.opens, close=False))
                clear(parent, staged.workdir.root)
                results["open+close"].append(await opens(staged, host, args.opens, close=True))
                clear(parent, staged.workdir.root)
                split.append(await phases(staged, host, args.opens))
                clear(parent, staged.workdir.root)
        finally:
            host.close()
    print(f"context open: {args.opens} opens x {args.runs} runs; the tree: {len(dirs)} directories, "
          f"{len(files)} files, {sum(len(b) for _, b in files)} bytes")
    print(f"   {'what':<12} {'CPU ms/open: min / median / max':>32} {'/ baseline':>11} {'user ms':>9} {'kernel ms':>10}")
    base = statistics.median(c.user + c.system for c in results["baseline"])
    for name, cpus in results.items():
        ordered = sorted(c.user + c.system for c in cpus)
        median = statistics.median(ordered)
        print(f"   {name:<12} {ordered[0]:>12.3f} / {median:.3f} / {ordered[-1]:.3f} {median / base:>10.2f}x"
              f" {statistics.median(c.user for c in cpus):>9.3f} {statistics.median(c.system for c in cpus):>10.3f}")
    print("   each phase timed apart (CPU ms/open, median of the runs; murmurd's own part is all but the layout):")
    for name in Phases.NAMES:
        ordered = sorted(p.ms[name] for p in split)
        print(f"   {name:<12} {ordered[0]:>12.3f} / {statistics.median(ordered):.3f} / {ordered[-1]:.3f}")
    own = sorted(sum(p.ms[n] for n in Phases.NAMES[1:]) for p in split)
    print(f"   {'murmurd own':<12} {own[0]:>12.3f} / {statistics.median(own):.3f} / {own[-1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opens", type=int, default=300, help="opens per run (default 300)")
    parser.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    args = parser.parse_args()
    if not (1 <= args.opens <= 10_000 and 1 <= args.runs <= 20):
        parser.error("opens 1-10000, runs 1-20")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
