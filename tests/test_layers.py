"""The house's layers, read from the import graph (DESIGN.md, "The house").

``linkage`` imports nothing of ours <- the ``vfl`` toolkit and vertical models <- ``transfer``
and ``horizontal`` (which never import each other) <- the application, ``vfl.app`` (which
nothing below imports, and which finds the families through :mod:`vfl.registry`, importing
neither by name). No module imports another module's private (underscore) name or another
package's private module; no import cycle between modules, not even inside a function. Every
``import`` counts, at any depth of the file, except those under ``if TYPE_CHECKING:``; so does
every lazy export (``lazy_exports(__name__, globals(), {"Name": "pkg.module"})``, an import on
first use). An import of a name from a package counts as an import of the module the package
re-exports it from, so that a cycle through a package's ``__init__`` is seen. Library code
names no module of a higher layer in a string either (``importlib.import_module("horizontal.x")``,
``"transfer.jobs:register"``): the entry points declared in ``pyproject.toml`` are how a lower
layer finds a higher one.
"""

from __future__ import annotations

import ast
import functools
import re
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
    """``importer`` imports ``target`` (a module of ours) at ``line``, naming ``names``; for a
    plain ``import target``, ``used`` are the attributes the importer reads from it; ``lazy``:
    a lazy export of the importer's, loaded when someone reads the name."""

    importer: str
    target: str
    line: int
    names: tuple[str, ...] = ()
    used: tuple[str, ...] = ()
    lazy: bool = False

    def __str__(self) -> str:
        what = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.importer}:{self.line} -> {self.target}{what}"


@dataclass(frozen=True)
class Graph:
    modules: frozenset[str]
    packages: frozenset[str]
    """The modules that are a package's ``__init__``."""
    edges: tuple[Edge, ...]
    exports: dict[str, dict[str, str]]
    """``{package: {name: module}}``: what each package's ``__init__`` re-exports, and from
    where (its module-level ``from m import name``, and its lazy exports)."""

    def resolve(self, package: str, name: str) -> str:
        """The module that ``from package import name`` loads ``name`` from, through the
        package's re-exports (and those of a package it re-exports from); ``package`` itself
        when the name is its own."""
        seen = set()
        while package in self.packages and (package, name) not in seen:
            seen.add((package, name))
            module = self.exports.get(package, {}).get(name)
            if module is None and f"{package}.{name}" in self.modules:
                module = f"{package}.{name}"  # a submodule read as an attribute
            if module is None or module == package:
                break
            package = module
        return package


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


def _attributes(tree: ast.AST) -> dict[str, set[str]]:
    """The attributes read from each dotted name in the file (``vfl.__version__``:
    ``{"vfl": {"__version__"}}``)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            found.setdefault(ast.unparse(node.value), set()).add(node.attr)
    return found


def _imports(
    tree: ast.AST, module: str, is_package: bool
) -> Iterator[tuple[str, tuple[str, ...], int, tuple[str, ...]]]:
    """``(imported module, names taken from it, line, attributes read from it)`` for every
    import of the file (the attributes for a plain ``import``, the names for a ``from``)."""
    skipped = _type_checking_only(tree)
    reads = _attributes(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                used = reads.get(alias.asname or alias.name, set())
                yield alias.name, (), node.lineno, tuple(sorted(used))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source, tuple(a.name for a in node.names), node.lineno, ()


def _strings(node: ast.AST | None) -> list[str] | None:
    """The strings of a literal tuple or list of strings, else None."""
    if isinstance(node, (ast.Tuple, ast.List)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _mapping(node: ast.AST | None, assigned: dict[str, ast.AST]) -> dict[str, str]:
    """``{name: module}`` of a lazy-export map: a dict literal, a module-level name bound to
    one, or ``{name: "module" for name in ("A", "B")}``."""
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    if isinstance(node, ast.Dict):
        return {
            k.value: v.value
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
        }
    if isinstance(node, ast.DictComp) and isinstance(node.value, ast.Constant):
        names = _strings(node.generators[0].iter)
        return dict.fromkeys(names or [], node.value.value)
    return {}


def _lazy_exports(tree: ast.Module, package: str) -> Iterator[tuple[str, str, int, bool]]:
    """``(name, module, line, is the submodule itself)`` for every lazy export of the file: the
    mapping passed to a ``lazy_exports(...)`` call, and its literal ``submodules``."""
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or "lazy_exports" not in ast.unparse(node.func):
            continue
        arguments = dict(enumerate(node.args)) | {k.arg: k.value for k in node.keywords}
        for name, module in _mapping(arguments.get(2, arguments.get("exports")), assigned).items():
            yield name, module, node.lineno, False
        for name in _strings(arguments.get(3, arguments.get("submodules"))) or []:
            yield name, f"{package}.{name}", node.lineno, True


def build_graph(root: Path, packages: Sequence[str]) -> Graph:
    """The import graph of ``packages`` under ``root``: an edge per imported module of ours
    (``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``), and per
    lazy export; with what each package's ``__init__`` re-exports."""
    files: dict[str, tuple[Path, bool]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name, is_package = _module_name(path, root)
            files[name] = (path, is_package)
    edges: list[Edge] = []
    exports: dict[str, dict[str, str]] = {}
    for name, (path, is_package) in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for source, names, line, used in _imports(tree, name, is_package):
            if source.split(".")[0] not in packages:
                continue
            if not names:  # import a.b.c
                edges.append(Edge(name, source, line, used=used))
                continue
            plain = tuple(n for n in names if f"{source}.{n}" not in files)
            for n in names:
                if f"{source}.{n}" in files:  # from a import b: the module a.b
                    edges.append(Edge(name, f"{source}.{n}", line))
            if plain:
                edges.append(Edge(name, source, line, plain))
        if is_package:  # its re-exports: module-level ``from m import x``, and lazy ones
            found = exports.setdefault(name, {})
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    for source, names, _, _ in _imports(node, name, is_package):
                        for n in names:
                            module = f"{source}.{n}"
                            found[n] = module if module in files else source
        for export, module, line, itself in _lazy_exports(tree, name):
            if module.split(".")[0] in packages:
                edges.append(Edge(name, module, line, () if itself else (export,), lazy=True))
                if is_package:
                    exports.setdefault(name, {})[export] = module
    modules = frozenset(files)
    packages_ = frozenset(m for m, (_, p) in files.items() if p)
    return Graph(modules, packages_, tuple(edges), exports)


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


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_][\w.]*)?")
_IMPORTERS = ("import_module", "__import__", "find_spec")


def _named_modules(tree: ast.AST) -> Iterator[tuple[str, int, bool]]:
    """``(dotted name, line, passed to an import function)`` for every string of the file that
    could name a module (``"a.b"``, ``"a.b:attr"``, the leading constant of an f-string given
    to ``importlib.import_module``)."""
    called: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and ast.unparse(node.func).split(".")[-1] in _IMPORTERS
        ):
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values:
                first = first.values[0]  # f"horizontal.{name}": its leading part
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield first.value.rstrip("."), node.lineno, True
            called.add(id(first))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _DOTTED.fullmatch(node.value)
        ):
            yield node.value.split(":")[0], node.lineno, id(node) in called


def string_references(root: Path, packages: Sequence[str], graph: Graph) -> list[str]:
    """Library code naming a module of a higher layer (or of the other family) in a string:
    a dotted name of one of ``graph``'s modules (``"horizontal.attacks"``,
    ``"transfer.jobs:register"``), or any name of ours given to an import function (a bare
    ``import_module("horizontal")``). A bare word (``"transfer"``, a family's label) and a
    dotted name that is no module (``"transfer.EncoderArtifact"``, a file's kind) are not."""
    found = []
    for module in sorted(graph.modules):
        parts = module.split(".")
        path = root.joinpath(*parts, "__init__.py") if module in graph.packages else None
        path = path or root.joinpath(*parts[:-1], f"{parts[-1]}.py")
        for name, line, imported in _named_modules(ast.parse(path.read_text())):
            top = name.split(".")[0]
            if top not in packages or not (imported or ("." in name and name in graph.modules)):
                continue
            mine, other = module.split(".")[0], top
            if layer(name) > layer(module):
                found.append(
                    f"{module}:{line} names {name!r} (layer {layer(module)} names layer "
                    f"{layer(name)})"
                )
            elif mine in FAMILIES and other in FAMILIES and mine != other:
                found.append(f"{module}:{line} names {name!r} ({mine} and {other} are apart)")
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


def _targets(graph: Graph, edge: Edge) -> set[str]:
    """The modules ``edge`` loads: for names taken (or attributes read) from a package, the
    modules the package re-exports them from (:meth:`Graph.resolve`); else its target."""
    names = edge.names or edge.used
    if edge.target in graph.packages and names:
        return {graph.resolve(edge.target, name) for name in names}
    return {edge.target}


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module. A name imported from a
    package (or read from a plainly imported one) counts as imported from the module the
    package re-exports it from; a lazy export is an edge of whoever reads the name, not of the
    package's ``__init__``, which loads it only then."""
    adjacent: dict[str, set[str]] = {m: set() for m in graph.modules}
    for edge in graph.edges:
        if edge.lazy:
            continue
        for target in _targets(graph, edge):
            if target in adjacent and target != edge.importer:
                adjacent[edge.importer].add(target)
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


def test_library_code_names_no_higher_layer_in_a_string() -> None:
    found = string_references(ROOT, PACKAGES, house())
    assert not found, (
        "modules of a higher layer named in strings (declare an entry point in "
        "pyproject.toml instead):\n" + "\n".join(found)
    )


# -- the checks themselves, on a made-up house ---------------------------------------------------


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    files = {
        "linkage/__init__.py": "",
        "linkage/a.py": "def f():\n    import vfl.b\n",  # upward, inside a function
        "vfl/__init__.py": (
            "from vfl.b import g\n"  # a re-export: no cycle through it
            "from linkage.lazy import lazy_exports\n"
            "EXPORTS = {'h': 'vfl.e', 'job': 'vfl.app.run'}\n"  # the second is upward
            "__getattr__, __dir__ = lazy_exports(__name__, globals(), EXPORTS)\n"
        ),
        # a cycle through the package, inside functions: d takes h, which vfl lazily exports
        # from e; e reads the submodule d as an attribute of vfl
        "vfl/d.py": "def f():\n    from vfl import h\n",
        "vfl/e.py": "import vfl\nh = 1\ndef k():\n    return vfl.d.f\n",
        "vfl/loader.py": (
            "import importlib\n"
            "KIND = 'transfer.Thing'\n"  # no module: a file's kind
            "FAMILY = 'transfer'\n"  # a bare word: a label
            "def load(name):\n"
            "    importlib.import_module('horizontal')\n"  # any name given to an importer
            "    return importlib.import_module(f'horizontal.{name}')\n"
        ),
        "linkage/plugins.py": "PLUGIN = 'transfer.t:run'\n",  # a module:attribute string
        "vfl/app/families.py": "BUILTIN = {'transfer': 'transfer.t:run'}\n",  # the app may
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
        "horizontal/h.py": "from transfer import t\nNEIGHBOUR = 'transfer.t'\n",  # apart
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
    assert any(s.startswith("vfl:4 -> vfl.app.run (job)") for s in found)  # a lazy export
    assert cycles(graph) == [
        ["vfl.app.run", "vfl.b", "vfl.c"],  # b -> c -> app.run -> b
        ["vfl.d", "vfl.e"],  # through the package's __init__, by the names it re-exports
    ]
    assert graph.resolve("vfl", "h") == "vfl.e" and graph.resolve("vfl", "g") == "vfl.b"
    named = string_references(toy, PACKAGES, graph)
    assert sorted(named) == [
        "horizontal.h:2 names 'transfer.t' (horizontal and transfer are apart)",
        "linkage.plugins:1 names 'transfer.t' (layer 0 names layer 2)",
        "vfl.loader:5 names 'horizontal' (layer 1 names layer 2)",
        "vfl.loader:6 names 'horizontal' (layer 1 names layer 2)",
        "vfl:3 names 'vfl.app.run' (layer 1 names layer 3)",  # the lazy export's string
    ]
