"""The project's import graph, read from the source: every module of ``governor`` (lambdas/), ``governor_cli`` (cli/)
and ``infra`` and the project modules each one imports, inside functions too, and under ``if TYPE_CHECKING``
(annotations only, never run) only when asked (``typing=True``). ``from package import name`` counts as importing
``package.name`` when that is a module, else ``package``; importing ``a.b.c`` also runs ``a`` and ``a.b``
(:func:`loaded_by`). The registry's capability declarations, which it loads by name, count as its imports."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from tests.conftest import ROOT

#: Where each top-level package's folder sits.
PACKAGES = {"governor": ROOT / "lambdas", "governor_cli": ROOT / "cli", "infra": ROOT}


@cache
def modules() -> dict[str, Path]:
    """Module name -> its file, for every module of the three packages."""
    found: dict[str, Path] = {}
    for top, base in PACKAGES.items():
        for path in sorted((base / top).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _typing_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    skipped: set[int] = set()
    for block in ast.walk(tree):
        if not isinstance(block, ast.If):
            continue
        test = block.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
        if name == "TYPE_CHECKING":
            skipped |= {id(node) for statement in block.body for node in ast.walk(statement)}
    return skipped


def import_statements(name: str, *, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of module ``name`` that runs (inside functions too, not under ``if TYPE_CHECKING``),
    and with ``typing`` those under ``if TYPE_CHECKING`` as well (what a type checker follows)."""
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    skipped = set() if typing else _typing_only(tree)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped]


def third_party_imports(name: str) -> set[str]:
    """The top-level names ``name`` imports from outside the project and the standard library."""
    found: set[str] = set()
    for node in import_statements(name):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", *PACKAGES}


def imports_of(name: str, *, typing: bool = False) -> list[tuple[int, str]]:
    """(line, module) of each project module ``name`` imports at run time (with ``typing``, under ``if
    TYPE_CHECKING`` too), in source order."""
    known = modules()
    path = known[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in import_statements(name, typing=typing):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in known]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if target in known:
                    found.append((node.lineno, target))
                elif source in known:
                    found.append((node.lineno, source))
    return sorted(set(found) | set(_declarations(name, tree=None)))


#: The one module that imports by name: the registry loads ``governor.<name>.capability`` for each name its
#: ``CAPABILITIES`` lists, and the walk counts those as its imports.
REGISTRY_MODULE = "governor.registry"


def _declarations(name: str, tree: ast.Module | None) -> list[tuple[int, str]]:
    """(line, module) of each capability declaration :data:`REGISTRY_MODULE` loads by name."""
    if name != REGISTRY_MODULE:
        return []
    tree = tree or ast.parse(modules()[name].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CAPABILITIES" for t in node.targets):
            assert isinstance(node.value, ast.Tuple)
            return [
                (item.lineno, f"governor.{item.value}.capability")
                for item in node.value.elts
                if isinstance(item, ast.Constant) and isinstance(item.value, str)
            ]
    raise AssertionError(f"{name} lists no CAPABILITIES")


@cache
def graph(*, typing: bool = False) -> dict[str, frozenset[str]]:
    """Module -> the project modules it imports (itself left out; with ``typing``, what a type checker follows too)."""
    return {name: frozenset(m for _, m in imports_of(name, typing=typing)) - {name} for name in modules()}


def cycles(*, typing: bool = False) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (strongly connected, 2 or more);
    with ``typing``, counting the imports under ``if TYPE_CHECKING`` too (what a type checker must untangle)."""
    edges = graph(typing=typing)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        # Tarjan's algorithm, iteratively: (module, the edges still to follow)
        work: list[tuple[str, list[str]]] = [(root, sorted(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(edges[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def loaded_by(roots: Iterable[str], *, typing: bool = False) -> set[str]:
    """Every project module importing ``roots`` can run: their imports, transitively, and each one's packages (with
    ``typing``, also what a type checker follows from them)."""
    edges = graph(typing=typing)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]
        todo += edges.get(name, ())
    return seen
