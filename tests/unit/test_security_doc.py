"""docs/security.md names every trust boundary with the tests that prove it: each test it names must exist.

A renamed or deleted test would otherwise leave the page promising a proof nobody runs.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.conftest import ROOT

DOC = ROOT / "docs" / "security.md"
_CODE = re.compile(r"`([^`]+)`")


@cache
def _tests_in(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))


def named_tests() -> list[tuple[str, str]]:
    """Every (test file, test name) the page names: ``file::name``, ``...::name`` (the file named last) and bare
    ``test_...`` names after a file (``file`` (``test_a``, ``test_b``))."""
    found: list[tuple[str, str]] = []
    current: str | None = None
    for token in _CODE.findall(DOC.read_text(encoding="utf-8")):
        if token.startswith("tests/") and ".py" in token:
            path, _, name = token.partition("::")
            current = path
            if name:
                found.append((path, name))
        elif token.startswith("...::") and current:
            found.append((current, token.removeprefix("...::")))
        elif re.fullmatch(r"test_\w+", token) and current:
            found.append((current, token))
    return found


def test_every_test_the_security_page_names_exists() -> None:
    named = named_tests()
    assert len(named) > 60
    missing = [f"{path}::{name}" for path, name in named if name not in _tests_in(ROOT / path)]
    assert missing == []


def test_every_boundary_names_at_least_one_test() -> None:
    sections = re.split(r"^### ", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    assert len(sections) >= 12
    assert [s.splitlines()[0] for s in sections if "tests/" not in s] == []


def test_the_metric_provenance_boundary_names_its_attacks_and_their_tests() -> None:
    """Issue 45.1: whoever can publish metrics is in the threat model, and the boundary that holds them names the
    forged-series tests through the real sweep."""
    text = DOC.read_text(encoding="utf-8")
    sections = [s for s in re.split(r"^### ", text, flags=re.MULTILINE) if s.startswith("15. A metric source")]
    assert len(sections) == 1 and "PutMetricData" in text.split("## Boundaries")[0]  # the boundary, the threat row
    section = sections[0]
    named = {name for path, name in named_tests() if path == "tests/adapters/test_metric_provenance.py"}
    assert len(named) >= 5 and all(name in section for name in named)
