"""The project's import graph, read from the source (``infra.imports``, which the layer build reads too): every module
of ``governor`` (lambdas/), ``governor_cli`` (cli/) and ``infra`` and the project modules each one imports, inside
functions too, and under ``if TYPE_CHECKING`` (annotations only, never run) only when asked (``typing=True``). The
registry's capability declarations, which it loads by name, count as its imports."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from infra.imports import PROJECT, ImportGraph

#: Where each top-level package's folder sits.
PACKAGES = PROJECT
_GRAPH = ImportGraph(PACKAGES)


def modules() -> dict[str, Path]:
    """Module name -> its file, for every module of the three packages."""
    return _GRAPH.modules


def import_statements(name: str, *, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of module ``name`` that runs (inside functions too, not under ``if TYPE_CHECKING``),
    and with ``typing`` those under ``if TYPE_CHECKING`` as well (what a type checker follows)."""
    return _GRAPH.import_statements(name, typing=typing)


def third_party_imports(name: str) -> set[str]:
    """The top-level names ``name`` imports from outside the project and the standard library."""
    return _GRAPH.third_party_imports(name)


def imports_of(name: str, *, typing: bool = False) -> list[tuple[int, str]]:
    """(line, module) of each project module ``name`` imports at run time (with ``typing``, under ``if
    TYPE_CHECKING`` too), in source order."""
    return _GRAPH.imports_of(name, typing=typing)


def graph(*, typing: bool = False) -> dict[str, frozenset[str]]:
    """Module -> the project modules it imports (itself left out; with ``typing``, what a type checker follows too)."""
    return _GRAPH.edges(typing=typing)


def loaded_by(roots: Iterable[str], *, typing: bool = False) -> set[str]:
    """Every project module importing ``roots`` can run: their imports, transitively, and each one's packages (with
    ``typing``, also what a type checker follows from them)."""
    return _GRAPH.loaded_by(roots, typing=typing)


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
