"""The A2A daemon's layers, read from the imports (issue 23): the edge imports the core, never
the reverse, and nothing below the edge reaches up into it.

    serve (assembly) -> http (the edge) -> wire (dialects) -> core (the daemon) -> stores, peers
                                                     replicas -> core, stores

The core knows nothing of replicas either (issue 23 item 3): it talks to a `Coordination`
(murmurd/a2a/core/coordination.py), and the word itself never appears in a core module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "murmurd"

# importer package -> packages it must never import (module-level, function-level and
# TYPE_CHECKING imports all count: a type a module names is a module it knows)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "murmurd.a2a.core": ("murmurd.a2a.http", "murmurd.a2a.wire", "murmurd.a2a.serve", "murmurd.a2a.replicas"),
    "murmurd.a2a.wire": ("murmurd.a2a.http", "murmurd.a2a.serve"),
    "murmurd.a2a.stores": ("murmurd.a2a.http", "murmurd.a2a.wire", "murmurd.a2a.serve", "murmurd.a2a.replicas"),
    "murmurd.a2a.replicas": ("murmurd.a2a.http", "murmurd.a2a.wire", "murmurd.a2a.serve"),
    "murmurd.a2a.peers": ("murmurd.a2a.http", "murmurd.a2a.core", "murmurd.a2a.serve"),
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, name: str) -> set[str]:
    """Every module name `path` imports, relative imports resolved, `from p import m` counted
    as importing `p.m` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(root: Path, forbidden: dict[str, tuple[str, ...]]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        for importer, banned in forbidden.items():
            if not within(name, importer):
                continue
            for target in sorted(imported_names(path, name)):
                for package in banned:
                    if within(target, package):
                        found.append(f"{name} imports {target} ({importer} must not know {package})")
    return found


def test_no_layer_imports_one_above_it() -> None:
    assert violations(PACKAGE, FORBIDDEN) == []


def test_the_layer_check_fires(tmp_path: Path) -> None:
    root = tmp_path / "murmurd"
    for sub in ("a2a/core", "a2a/http"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "a2a" / "__init__.py").write_text("")
    (root / "a2a" / "core" / "daemon.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..http import server\n")
    (root / "a2a" / "http" / "server.py").write_text("from murmurd.a2a.core import daemon\n")
    found = violations(root, {"murmurd.a2a.core": ("murmurd.a2a.http",)})
    assert found == ["murmurd.a2a.core.daemon imports murmurd.a2a.http (murmurd.a2a.core must not know murmurd.a2a.http)",
                     "murmurd.a2a.core.daemon imports murmurd.a2a.http.server (murmurd.a2a.core must not know murmurd.a2a.http)"]


def mentions(root: Path, package: str, word: str) -> list[str]:
    """`path:line` of every line of a module under `package` that holds `word` (any case):
    code, comments and docstrings alike."""
    base = root.parent / package.replace(".", "/")
    return [f"{path.relative_to(root.parent)}:{number}"
            for path in sorted(base.rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if word in line.lower()]


def test_the_core_never_says_replica() -> None:
    """A single daemon on SQLite reads no replica rules to understand how a task starts."""
    assert mentions(PACKAGE, "murmurd.a2a.core", "replica") == []


def test_the_word_check_fires(tmp_path: Path) -> None:
    core = tmp_path / "murmurd" / "a2a" / "core"
    core.mkdir(parents=True)
    (core / "daemon.py").write_text('"""Runs tasks."""\n\nRETRY = 1.0  # Replicas: tried again\n')
    assert mentions(tmp_path / "murmurd", "murmurd.a2a.core", "replica") == ["murmurd/a2a/core/daemon.py:3"]


@pytest.mark.parametrize("package", sorted({p for banned in FORBIDDEN.values() for p in banned} | set(FORBIDDEN)))
def test_every_layer_named_exists(package: str) -> None:
    """A rule about a package that was renamed away would pass for nothing."""
    path = PACKAGE.parent / package.replace(".", "/")
    assert path.is_dir() or path.with_suffix(".py").is_file(), package
