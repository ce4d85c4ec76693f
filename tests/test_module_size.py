"""No package module past 600 lines (issue 23, item 4): a module that grows past it is split along
a real seam (validation by manifest section, the CLI by command group, the shell runner apart from
its environment and output capture). The bundled guests (`murmurd/bundled/`, compiled into
components) are not package modules and are not counted."""

from __future__ import annotations

from pathlib import Path

import pytest

LIMIT = 600
PACKAGE = Path(__file__).resolve().parent.parent / "murmurd"
EXCLUDED = frozenset({"bundled"})  # top-level directories of the package that are not counted

# Modules excused while they are being split: none. A name here must still be past the limit
# (test_pending_modules_are_still_too_long), so the set can only shrink.
PENDING: frozenset[str] = frozenset()


def line_counts(package: Path) -> dict[str, int]:
    """Every counted module of `package` (path relative to its parent, as `murmurd/x.py`) and its lines."""
    counts: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] in EXCLUDED:
            continue
        counts[path.relative_to(package.parent).as_posix()] = len(path.read_text(encoding="utf-8").splitlines())
    return counts


def too_long(package: Path, pending: frozenset[str] = frozenset(), limit: int = LIMIT) -> dict[str, int]:
    """The modules past `limit` lines that `pending` does not name."""
    return {path: lines for path, lines in line_counts(package).items() if lines > limit and path not in pending}


def listing(found: dict[str, int]) -> str:
    return "\n".join(f"  {path}: {lines} lines" for path, lines in sorted(found.items()))


def check(package: Path, pending: frozenset[str]) -> None:
    """Fail, naming each module and its line count, when a module `pending` does not name is too long."""
    found = too_long(package, pending)
    assert not found, f"modules past {LIMIT} lines; split each along a real seam:\n{listing(found)}"


def test_no_package_module_passes_600_lines() -> None:
    check(PACKAGE, PENDING)


def test_pending_modules_are_still_too_long() -> None:
    """The allowlist only shrinks: an entry whose module was split (or moved) must leave it."""
    counts = line_counts(PACKAGE)
    stale = sorted(path for path in PENDING if counts.get(path, 0) <= LIMIT)
    assert not stale, f"no longer past {LIMIT} lines (or gone): remove from PENDING: {', '.join(stale)}"


def _module(path: Path, lines: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"x_{i} = {i}\n" for i in range(lines)), encoding="utf-8")


def test_the_check_fires_on_any_module_past_the_limit(tmp_path: Path) -> None:
    package = tmp_path / "murmurd"
    _module(package / "at_the_limit.py", LIMIT)
    _module(package / "one_past.py", LIMIT + 1)
    _module(package / "sub" / "deep.py", 932)
    _module(package / "bundled" / "murmur-tool-x" / "app.py", 2000)  # a guest: not counted
    _module(package / "a2a" / "core" / "daemon.py", 1001)

    assert too_long(package) == {"murmurd/one_past.py": 601, "murmurd/sub/deep.py": 932, "murmurd/a2a/core/daemon.py": 1001}
    # an excused set excuses exactly the modules it names, no other
    excused = frozenset({"murmurd/a2a/core/daemon.py"})
    assert too_long(package, excused) == {"murmurd/one_past.py": 601, "murmurd/sub/deep.py": 932}
    assert listing(too_long(package, excused)) == "  murmurd/one_past.py: 601 lines\n  murmurd/sub/deep.py: 932 lines"

    with pytest.raises(AssertionError, match=r"(?s)murmurd/one_past\.py: 601 lines.*murmurd/sub/deep\.py: 932 lines"):
        check(package, excused)
    (package / "one_past.py").unlink()
    (package / "sub" / "deep.py").unlink()
    check(package, excused)  # only the pending module is left past the limit: it passes
