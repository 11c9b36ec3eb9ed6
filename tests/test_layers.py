"""The house's layers, read from the import graph (DESIGN.md, "The house").

``linkage`` imports nothing of ours <- the ``vfl`` toolkit and vertical models <- ``transfer``
and ``horizontal`` (which never import each other) <- the application, ``vfl.app`` (which
nothing below imports, and which finds the families through :mod:`vfl.registry`, importing
neither by name). No module imports another module's private (underscore) name or another
package's private module; no import cycle between modules, not even inside a function. Every
``import`` counts, at any depth of the file, except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("linkage", "vfl", "transfer", "horizontal")
APP = "vfl.app"
FAMILIES = ("transfer", "horizontal")


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``target`` (a module of ours) at ``line``, naming ``names``."""

    importer: str
    target: str
    line: int
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        what = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.importer}:{self.line} -> {self.target}{what}"


@dataclass(frozen=True)
class Graph:
    modules: frozenset[str]
    packages: frozenset[str]
    """The modules that are a package's ``__init__``."""
    edges: tuple[Edge, ...]


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside the body of an ``if TYPE_CHECKING:`` (not its ``else``)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(id(n) for n in ast.walk(statement))
    return skipped


def _imports(
    tree: ast.AST, module: str, is_package: bool
) -> Iterator[tuple[str, tuple[str, ...], int]]:
    """``(imported module, names taken from it, line)`` for every import of the file."""
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source, tuple(a.name for a in node.names), node.lineno


def build_graph(root: Path, packages: Sequence[str]) -> Graph:
    """The import graph of ``packages`` under ``root``: an edge per imported module of ours
    (``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``)."""
    files: dict[str, tuple[Path, bool]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name, is_package = _module_name(path, root)
            files[name] = (path, is_package)
    edges: list[Edge] = []
    for name, (path, is_package) in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for source, names, line in _imports(tree, name, is_package):
            if source.split(".")[0] not in packages:
                continue
            if not names:  # import a.b.c
                edges.append(Edge(name, source, line))
                continue
            plain = tuple(n for n in names if f"{source}.{n}" not in files)
            for n in names:
                if f"{source}.{n}" in files:  # from a import b: the module a.b
                    edges.append(Edge(name, f"{source}.{n}", line))
            if plain:
                edges.append(Edge(name, source, line, plain))
    modules = frozenset(files)
    return Graph(modules, frozenset(m for m, (_, p) in files.items() if p), tuple(edges))


def layer(module: str) -> int:
    """0 ``linkage``, 1 the ``vfl`` toolkit, 2 ``transfer`` and ``horizontal``, 3 the app."""
    if module == APP or module.startswith(f"{APP}."):
        return 3
    return {"linkage": 0, "vfl": 1, "transfer": 2, "horizontal": 2}[module.split(".")[0]]


def upward(graph: Graph) -> list[str]:
    """Imports of a higher layer, and between ``transfer`` and ``horizontal``."""
    found = []
    for edge in graph.edges:
        top, other = edge.importer.split(".")[0], edge.target.split(".")[0]
        if layer(edge.target) > layer(edge.importer):
            found.append(
                f"{edge} (layer {layer(edge.importer)} imports layer {layer(edge.target)})"
            )
        elif top in FAMILIES and other in FAMILIES and top != other:
            found.append(f"{edge} ({top} and {other} must not import each other)")
    return found


def family_imports_of_the_app(graph: Graph) -> list[str]:
    """The application naming a family it should find through the registry."""
    return [
        str(e) for e in graph.edges if layer(e.importer) == 3 and e.target.split(".")[0] in FAMILIES
    ]


def _private_module(module: str) -> str | None:
    """The package that owns ``module`` if a part of its name is private (``vfl.privacy`` for
    ``vfl.privacy._checks``), else None."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:k])
    return None


def private_imports(graph: Graph) -> list[str]:
    """Another module's private name (``from a import _b``), and another package's private
    module (``vfl._lazy`` outside ``vfl``, ``vfl.privacy._checks`` outside ``vfl.privacy``)."""
    found = []
    for edge in graph.edges:
        hidden = [n for n in edge.names if n.startswith("_") and not n.startswith("__")]
        if hidden and edge.target != edge.importer:
            found.append(f"{edge.importer}:{edge.line} imports {edge.target}.{', '.join(hidden)}")
        owner = _private_module(edge.target)
        if owner is not None and not (
            edge.importer == owner or edge.importer.startswith(f"{owner}.")
        ):
            found.append(f"{edge} (a private module of {owner})")
    return found


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module, a package's ``__init__``
    (its re-exports) left out."""
    adjacent: dict[str, set[str]] = {m: set() for m in graph.modules}
    for edge in graph.edges:
        if edge.importer in graph.packages or edge.target in graph.packages:
            continue
        if edge.target in adjacent and edge.target != edge.importer:
            adjacent[edge.importer].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(adjacent[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(adjacent[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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

    for module in sorted(adjacent):
        if module not in index:
            visit(module)
    return components


@functools.lru_cache(maxsize=1)
def house() -> Graph:
    return build_graph(ROOT, PACKAGES)


# -- the house ---------------------------------------------------------------------------------


def test_the_graph_sees_the_house() -> None:
    graph = house()
    targets = {(e.importer, e.target) for e in graph.edges}
    assert ("vfl.app.party", "vfl.app.plan") in targets  # a module-level import
    assert ("vfl.app.plan", "linkage") in targets  # an import inside a function
    assert "vfl.app" in graph.packages and "vfl.app.cli" in graph.modules


def test_imports_flow_one_way_and_the_families_stay_apart() -> None:
    found = upward(house())
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_the_app_finds_the_families_through_the_registry() -> None:
    found = family_imports_of_the_app(house())
    assert not found, "the application imports a family by name:\n" + "\n".join(found)


def test_no_module_imports_another_modules_private_name() -> None:
    found = private_imports(house())
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_no_import_cycle_between_modules() -> None:
    found = cycles(house())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# -- the checks themselves, on a made-up house ---------------------------------------------------


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    files = {
        "linkage/__init__.py": "",
        "linkage/a.py": "def f():\n    import vfl.b\n",  # upward, inside a function
        "vfl/__init__.py": "from vfl.b import g\n",  # a re-export: no cycle through it
        "vfl/_hidden.py": "",
        "vfl/b.py": "from vfl import c\ndef g(): ...\n",
        "vfl/c.py": "from vfl.b import g\nfrom vfl.app import run\n",  # a cycle; upward
        "vfl/app/__init__.py": "from transfer.t import _secret\n",
        "vfl/app/run.py": "import vfl.b\n",
        "transfer/__init__.py": "",
        "transfer/t.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    import horizontal.h\n"  # not counted
            "from vfl._hidden import x\n_secret = 1\n"
        ),
        "horizontal/__init__.py": "",
        "horizontal/h.py": "from transfer import t\n",  # families apart
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_each_check_reports_what_breaks_it(toy: Path) -> None:
    graph = build_graph(toy, PACKAGES)
    found = upward(graph)
    assert any(s.startswith("linkage.a:2 -> vfl.b") for s in found)
    assert any(s.startswith("vfl.c:2 -> vfl.app.run") for s in found)
    assert any("horizontal.h:1 -> transfer.t" in s and "each other" in s for s in found)
    assert not any(s.startswith("transfer.t") for s in found)  # TYPE_CHECKING is not counted
    assert family_imports_of_the_app(graph) == ["vfl.app:1 -> transfer.t (_secret)"]
    private = private_imports(graph)
    assert "vfl.app:1 imports transfer.t._secret" in private
    assert any("vfl._hidden" in s and "private module of vfl" in s for s in private)
    assert cycles(graph) == [["vfl.app.run", "vfl.b", "vfl.c"]]  # b -> c -> app.run -> b
