"""The project's import graph, read from the source: which modules each module imports, inside functions too, and
under ``if TYPE_CHECKING`` (annotations only, never run) only when asked (``typing=True``: what a type checker follows).
The registry's capability declarations, which it loads by name (``governor.registry.CAPABILITIES``), count as its
imports.

``from package import name`` counts as importing ``package.name`` when that is a module, else ``package``; importing
``a.b.c`` also runs ``a`` and ``a.b`` (:meth:`ImportGraph.loaded_by`). The layer build derives each function's
dependency set from it (``infra.dependencies``: what a handler can reach is what its layers must hold), and the
tests read the same graph (``tests/imports.py``), so there is one walker, not a second hand-kept list.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from functools import cache, cached_property
from pathlib import Path

from infra.settings import LAMBDAS_DIR, ROOT

#: The project's three import packages and the folder each sits in.
PROJECT = {"governor": LAMBDAS_DIR, "governor_cli": ROOT / "cli", "infra": ROOT}


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


#: The one module that imports by name: the registry loads ``governor.<name>.capability`` for each name its
#: ``CAPABILITIES`` lists, and the walk counts those as its imports.
REGISTRY_MODULE = "governor.registry"


def _declarations(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of each capability declaration :data:`REGISTRY_MODULE` loads by name."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CAPABILITIES" for t in node.targets):
            if not isinstance(node.value, ast.Tuple):
                raise TypeError(f"{REGISTRY_MODULE}.CAPABILITIES must be a tuple of package names")
            return [
                (item.lineno, f"governor.{item.value}.capability")
                for item in node.value.elts
                if isinstance(item, ast.Constant) and isinstance(item.value, str)
            ]
    raise LookupError(f"{REGISTRY_MODULE} lists no CAPABILITIES")


class ImportGraph:
    """The modules of ``packages`` (top-level name -> the folder holding it) and what each imports when it runs."""

    def __init__(self, packages: Mapping[str, Path]) -> None:
        self.packages = dict(packages)

    @cached_property
    def modules(self) -> dict[str, Path]:
        """Module name -> its file, for every module of the packages."""
        found: dict[str, Path] = {}
        for top, base in self.packages.items():
            for path in sorted((base / top).rglob("*.py")):
                parts = list(path.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                found[".".join(parts)] = path
        return found

    def tree(self, name: str) -> ast.Module:
        return ast.parse(self.modules[name].read_text(encoding="utf-8"))

    def import_statements(self, name: str, *, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
        """Every import statement of module ``name`` that runs (inside functions too, not under ``if
        TYPE_CHECKING``), and with ``typing`` those under ``if TYPE_CHECKING`` as well."""
        tree = self.tree(name)
        skipped = set() if typing else _typing_only(tree)
        return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skipped]

    def third_party_imports(self, name: str) -> set[str]:
        """The top-level names ``name`` imports from outside the project and the standard library."""
        found: set[str] = set()
        for node in self.import_statements(name):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif not node.level and node.module:
                found.add(node.module.split(".")[0])
        return found - set(sys.stdlib_module_names) - {"__future__", *PROJECT}

    def imports_of(self, name: str, *, typing: bool = False) -> list[tuple[int, str]]:
        """(line, module) of each project module ``name`` imports at run time (with ``typing``, under ``if
        TYPE_CHECKING`` too), in source order."""
        known = self.modules
        package = name if known[name].name == "__init__.py" else name.rpartition(".")[0]
        found: list[tuple[int, str]] = []
        if name == REGISTRY_MODULE:
            found += [(line, module) for line, module in _declarations(self.tree(name)) if module in known]
        for node in self.import_statements(name, typing=typing):
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
        return sorted(set(found))

    @cached_property
    def graph(self) -> dict[str, frozenset[str]]:
        """Module -> the project modules it imports (itself left out)."""
        return self.edges(typing=False)

    @cache  # noqa: B019 (a graph lives as long as the process: one per package set)
    def edges(self, *, typing: bool) -> dict[str, frozenset[str]]:
        """Module -> the project modules it imports (itself left out; with ``typing``, what a type checker follows)."""
        return {name: frozenset(m for _, m in self.imports_of(name, typing=typing)) - {name} for name in self.modules}

    def loaded_by(self, roots: Iterable[str], *, typing: bool = False) -> set[str]:
        """Every module importing ``roots`` can run: their imports, transitively, and each one's packages (with
        ``typing``, also what a type checker follows from them)."""
        edges = self.edges(typing=typing)
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


#: The deployed runtime package alone: what the functions can import.
RUNTIME = ImportGraph({"governor": LAMBDAS_DIR})
