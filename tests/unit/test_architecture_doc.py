"""docs/architecture.md is drawn from the code: the registry table names exactly the fields a capability declares,
every module, file and registry method the page names exists, and the typed view of the composed policy declares
exactly the sections the registry composes (issue 47 item 6: the page named a ``remediation`` field that did not
exist and left out four that did)."""

from __future__ import annotations

import ast
import dataclasses
import re

from governor.capability import Capability, Registry
from governor.registry import REGISTRY
from tests.conftest import ROOT
from tests.imports import modules

PAGE = ROOT / "docs" / "architecture.md"
#: A backticked span of the page.
CODE = re.compile(r"`([^`\n]+)`")
#: The top-level packages whose modules the page names as dotted paths.
PACKAGES = ("governor", "governor_cli", "infra")
#: Folders whose files the page names as paths.
FOLDERS = ("lambdas/", "infra/", "cli/", "tests/", "docs/", "queries/", "bench/")


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The page's text from the heading ``title`` to the next heading."""
    text = _text()
    start = text.index(f"\n## {title}\n")
    following = text.find("\n#", start + 1)
    return text[start : following if following != -1 else len(text)]


def _defined(module: str) -> set[str]:
    """The names ``module`` defines at its top level (classes, functions, assignments, imports)."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return found


def _missing_reference(token: str) -> str | None:
    """Why a dotted ``token`` (``governor.x.y``, ``governor.x:Name``, ``governor.x.Name.attr``) names nothing, or None."""
    dotted = token.replace(":", ".")
    parts = dotted.split(".")
    known = modules()
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in known:
            rest = parts[cut:]
            if rest and rest[0] not in _defined(module):
                return f"{token}: {module} defines no {rest[0]}"
            return None
    return f"{token}: no such module"


def _tokens() -> list[str]:
    return CODE.findall(_text())


def test_the_registry_table_names_exactly_the_fields_a_capability_declares() -> None:
    rows = [line for line in _section("The registry").splitlines() if line.startswith("| `")]
    named = {name.strip("` ") for row in rows for name in row.split("|")[1].split(" / ")}
    fields = {field.name for field in dataclasses.fields(Capability)}
    assert sorted(named - fields) == [], "the page names fields a capability does not declare"
    assert sorted(fields - named) == [], "fields a capability declares that the page leaves out"


def test_every_module_and_name_the_page_gives_exists() -> None:
    dotted = [
        t
        for t in _tokens()
        if t.split(".")[0].split(":")[0] in PACKAGES
        and "." in t
        and "<" not in t
        and not t.endswith((".py", ".md", ".yaml", ".json"))
        and re.fullmatch(r"[\w.:]+", t)
    ]
    assert dotted, "the page names modules"
    assert [why for t in dotted if (why := _missing_reference(t)) is not None] == []


def test_every_file_the_page_names_exists() -> None:
    paths = [
        t.split(",")[0].strip()
        for t in _tokens()
        if t.startswith(FOLDERS) and "<" not in t and "*" not in t and " " not in t.split(",")[0].strip()
    ]
    assert paths, "the page names files"
    assert [p for p in paths if not (ROOT / p.rstrip("/")).exists()] == []


def test_every_registry_method_the_page_names_exists() -> None:
    named = set(re.findall(r"REGISTRY\.(\w+)", _text()))
    assert named, "the page names registry methods"
    assert sorted(name for name in named if not hasattr(Registry, name)) == []


def test_every_layer_the_page_lists_exists() -> None:
    rows = [line for line in _section("Layers").splitlines() if line.startswith("| ") and "`" in line]
    layers = [CODE.findall(row.split("|")[2]) for row in rows]
    assert len(layers) >= 8, "the page lists the layers"
    assert [m for found in layers for m in found if m not in modules()] == []


def test_the_typed_view_of_the_policy_declares_exactly_the_composed_sections() -> None:
    """Type checkers see each capability's section through ``Policy``'s ``if TYPE_CHECKING:`` block: it must declare
    the sections the registry composes, no more, no fewer (adding a capability adds its line there)."""
    tree = ast.parse(modules()["governor.policy"].read_text(encoding="utf-8"))
    policy = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Policy")
    block = next(n for n in policy.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = [n.target.id for n in block.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    composed = [c.section for c in REGISTRY.values() if c.section_model is not None]
    assert typed == composed
