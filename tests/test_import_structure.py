"""The package's import structure: no circles, and the layers import one way (issue 23).

The graph is read from the source with `ast`, not by importing anything: every `import` and
`from ... import` statement anywhere in a module counts (module level, inside a function, under
`if TYPE_CHECKING:`), because a function-level import is still an arrow a reader must follow and a
circle drawn through one is still a circle. Relative imports are resolved against the importing
module's package; `from pkg import name` counts as importing `pkg.name` when that is a module of
the package, and `pkg` itself otherwise. Only arrows between modules of the package are kept.
The bundled guests (murmurd/bundled) are separate programs compiled to WASM and are not read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "murmurd"
PACKAGE = "murmurd"
# Not part of the daemon's import graph: the guest sources built into WASM components.
EXCLUDED_DIRS = ("bundled",)

# Circles whose every module sits under one of these prefixes are not asserted on. None: the
# test covers the whole package.
EXCLUDED_FROM_CYCLES: tuple[str, ...] = ()

# (importer prefix, forbidden prefix): no module under the first imports one under the second.
# The A2A core (daemon, scheduler, sessions) never reaches into the HTTP edge that serves it;
# the edge imports the core, never the reverse. Vacuous while murmurd/a2a/core/ does not exist.
FORBIDDEN_IMPORTS: tuple[tuple[str, str], ...] = (("murmurd.a2a.core", "murmurd.a2a.http"),)


def module_files(root: Path, package: str, excluded_dirs: Iterable[str] = ()) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package is its __init__)."""
    excluded = set(excluded_dirs)
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts and parts[0] in excluded:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def _base_package(module: str, is_package: bool, level: int) -> str:
    """The package a relative import of `level` dots in `module` starts from."""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts)


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of dotted `name` that is a module of the package, if any."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of the package that `module` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _base_package(module, is_package, node.level)
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in modules else _known(source, modules)
                if target is not None:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(root: Path, package: str, excluded_dirs: Iterable[str] = ()) -> dict[str, set[str]]:
    modules = module_files(root, package, excluded_dirs)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, larger than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def import_cycles(graph: Mapping[str, set[str]], excluded: Iterable[str] = ()) -> list[list[str]]:
    """Every circle, less those lying wholly under an excluded prefix."""
    prefixes = tuple(excluded)
    return [
        component
        for component in strongly_connected(graph)
        if not all(any(_under(m, p) for p in prefixes) for m in component)
    ]


def forbidden_imports(
    graph: Mapping[str, set[str]], rules: Iterable[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Every (importer, imported) arrow that breaks a layer rule."""
    broken = []
    for importer_prefix, forbidden_prefix in rules:
        for module, targets in graph.items():
            if not _under(module, importer_prefix):
                continue
            broken.extend(
                (module, target) for target in sorted(targets) if _under(target, forbidden_prefix)
            )
    return sorted(broken)


def _describe_cycle(component: list[str], graph: Mapping[str, set[str]]) -> str:
    members = set(component)
    arrows = [
        f"    {m} -> {t}" for m in component for t in sorted(graph[m]) if t in members
    ]
    return f"  circle of {len(component)}: {', '.join(component)}\n" + "\n".join(arrows)


@pytest.fixture(scope="module")
def package_graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE_ROOT, PACKAGE, EXCLUDED_DIRS)


def test_the_package_has_no_import_circles(package_graph: dict[str, set[str]]) -> None:
    cycles = import_cycles(package_graph, EXCLUDED_FROM_CYCLES)
    assert not cycles, "import circles in murmurd:\n" + "\n".join(
        _describe_cycle(c, package_graph) for c in cycles
    )


def test_the_a2a_core_never_imports_the_http_edge(package_graph: dict[str, set[str]]) -> None:
    broken = forbidden_imports(package_graph, FORBIDDEN_IMPORTS)
    assert not broken, "layer rule broken:\n" + "\n".join(f"  {a} -> {b}" for a, b in broken)


def test_the_graph_is_read_from_the_real_package(package_graph: dict[str, set[str]]) -> None:
    # Guards against a checker that passes because it read nothing.
    assert "murmurd.host.host" in package_graph
    assert "murmurd.bundled" not in package_graph
    assert not any(m.startswith("murmurd.bundled.") for m in package_graph)
    assert "murmurd.manifest.capsule" in package_graph["murmurd.staging.stage"]
    assert sum(len(t) for t in package_graph.values()) > 300


def _write(root: Path, relative: str, source: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")


def test_the_checker_finds_circles_and_forbidden_imports(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _write(root, "__init__.py", "")
    _write(root, "top.py", "import os\nfrom pkg.sub import leaf\n")
    _write(root, "sub/__init__.py", "")
    # a -> b at module level, b -> a only inside a function, through a relative import
    _write(root, "sub/a.py", "from .b import thing\n")
    _write(root, "sub/b.py", "thing = 1\ndef late():\n    from . import a\n    return a\n")
    _write(root, "sub/leaf.py", "")
    # a three-module circle through `import x.y` and `from ..x import y` forms
    _write(root, "ring/__init__.py", "")
    _write(root, "ring/one.py", "import pkg.ring.two\n")
    _write(root, "ring/two.py", "from ..ring import three\n")
    _write(root, "ring/three.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
           "    from pkg.ring.one import X\n")
    # the layer rule: core reaches into the edge
    _write(root, "a2a/__init__.py", "")
    _write(root, "a2a/core/__init__.py", "")
    _write(root, "a2a/core/daemon.py", "from pkg.a2a.http.routes import Router\n")
    _write(root, "a2a/http/__init__.py", "")
    _write(root, "a2a/http/routes.py", "from pkg.a2a.core import daemon\nRouter = object\n")
    # an excluded directory is never read
    _write(root, "bundled/guest.py", "import pkg.top\n")

    graph = import_graph(root, "pkg", ("bundled",))
    assert "pkg.bundled.guest" not in graph
    assert graph["pkg.top"] == {"pkg.sub.leaf"}
    assert graph["pkg.sub.b"] == {"pkg.sub.a"}

    cycles = import_cycles(graph)
    assert ["pkg.sub.a", "pkg.sub.b"] in cycles
    assert ["pkg.ring.one", "pkg.ring.three", "pkg.ring.two"] in cycles
    assert ["pkg.a2a.core.daemon", "pkg.a2a.http.routes"] in cycles
    assert len(cycles) == 3
    # an excluded prefix hides only the circles wholly inside it
    assert import_cycles(graph, ("pkg.a2a",)) == [
        ["pkg.ring.one", "pkg.ring.three", "pkg.ring.two"],
        ["pkg.sub.a", "pkg.sub.b"],
    ]
    assert import_cycles(graph, ("pkg.a2a.core",)) == cycles

    assert forbidden_imports(graph, (("pkg.a2a.core", "pkg.a2a.http"),)) == [
        ("pkg.a2a.core.daemon", "pkg.a2a.http.routes")
    ]
    # the reverse arrow (edge imports core) is allowed
    assert forbidden_imports(graph, (("pkg.a2a.http", "pkg.a2a.http.nothing"),)) == []
    # a rule over directories that do not exist passes vacuously
    assert forbidden_imports(graph, (("pkg.missing", "pkg.a2a.http"),)) == []
