"""The report package stays split by layer (docs/architecture.md): model <- sections <- build, model <- render, each
layer importing only the layers under it (read from the source, imports inside functions included). Its module sizes
and complexity are held with the whole runtime's, in ``tests/unit/test_rooms.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.imports import imports_of

REPORT = ROOT / "lambdas" / "governor" / "report"
#: What each layer may import of the report package (besides itself and ``words``, the shared wording).
LAYERS = {
    "domain": set(),
    "model": {"charts"},
    "sections": {"model"},
    "build": {"model", "sections", "charts"},
    "render": {"model", "charts"},
}


def _modules() -> list[Path]:
    return sorted(REPORT.rglob("*.py"))


def _layer(path: Path) -> str:
    return path.relative_to(REPORT).parts[0].removesuffix(".py")


def _report_imports(path: Path) -> set[str]:
    """The report modules ``path`` imports at run time (not under ``if TYPE_CHECKING``), inside functions too."""
    name = ".".join(path.relative_to(ROOT / "lambdas").with_suffix("").parts).removesuffix(".__init__")
    return {
        target.split(".")[2]
        for _, target in imports_of(name)
        if target.startswith("governor.report.") and target.count(".") >= 2
    }


def test_the_report_is_split_into_its_layers() -> None:
    layers = {_layer(path) for path in _modules()}
    assert set(LAYERS) <= layers
    assert {p.stem for p in (REPORT / "sections").glob("*.py")} >= {
        "security",
        "cost",
        "accounts",
        "findings",
        "budgets",
    }
    assert {p.stem for p in (REPORT / "render").glob("*.py")} >= {"format", "csv_files", "html_page", "slack"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPORT)))
def test_each_layer_imports_only_the_layers_under_it(path: Path) -> None:
    layer = _layer(path)
    if layer not in LAYERS:
        return  # the handler and the adapters use every layer
    allowed = LAYERS[layer] | {layer, "words"}
    assert _report_imports(path) <= allowed, path.relative_to(ROOT)


def test_a_caller_loads_only_the_layers_it_uses() -> None:
    """``governor explain`` imports each capability's ``domain`` and ``governor audit --csv`` the CSV writer: neither
    loads the report's sections, assembly or the other renderings."""
    code = (
        "import json, sys\n"
        "import governor.report.domain\n"
        "explain = sorted(m for m in sys.modules if m.startswith('governor.report.'))\n"
        "import governor.report.render.csv_files\n"
        "csv = sorted(m for m in sys.modules if m.startswith('governor.report.'))\n"
        "print(json.dumps([explain, csv]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "lambdas")},
    )
    explain, csv = json.loads(done.stdout)
    assert explain == ["governor.report.domain"]
    assert not [m for m in csv if m.startswith(("governor.report.sections", "governor.report.build"))]
    assert not {"governor.report.render.html_page", "governor.report.render.slack"} & set(csv)
