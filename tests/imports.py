"""The project's import graph, read from the source (``infra.imports``, which the layer build reads too): every module
of ``governor`` (lambdas/), ``governor_cli`` (cli/) and ``infra`` and the project modules each one imports, inside
functions too, but not under ``if TYPE_CHECKING`` (annotations only, never run)."""

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


def import_statements(name: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of module ``name`` that runs (inside functions too, not under ``if TYPE_CHECKING``)."""
    return _GRAPH.import_statements(name)


def third_party_imports(name: str) -> set[str]:
    """The top-level names ``name`` imports from outside the project and the standard library."""
    return _GRAPH.third_party_imports(name)


def imports_of(name: str) -> list[tuple[int, str]]:
    """(line, module) of each project module ``name`` imports at run time, in source order."""
    return _GRAPH.imports_of(name)


def graph() -> dict[str, frozenset[str]]:
    """Module -> the project modules it imports (itself left out)."""
    return _GRAPH.graph


def loaded_by(roots: Iterable[str]) -> set[str]:
    """Every project module importing ``roots`` can run: their imports, transitively, and each one's packages."""
    return _GRAPH.loaded_by(roots)


def cycles() -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (strongly connected, 2 or more)."""
    edges = graph()
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
