"""Each function's dependency set comes from what its handler imports (``infra.dependencies``), never a second list: a
requirement no handler imports, or an import no requirement provides, stops the build with its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.dependencies import REQUIREMENTS, DependencyError, layer_plan, shipped_plan


def _requirements(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_a_pin_no_handler_imports_is_refused(tmp_path: Path) -> None:
    requirements = _requirements(tmp_path, REQUIREMENTS.read_text() + "duckdb==1.4.3\n")
    with pytest.raises(DependencyError, match=r"pins duckdb, which no handler imports"):
        layer_plan(requirements)


def test_an_import_no_requirement_provides_is_refused_naming_the_module(tmp_path: Path) -> None:
    without_slack = "".join(line for line in REQUIREMENTS.read_text().splitlines(True) if "slack" not in line)
    with pytest.raises(DependencyError, match=r"governor\.\S+ imports slack_sdk, which no requirement"):
        layer_plan(_requirements(tmp_path, without_slack))


def test_the_shipped_plan_keeps_the_chart_and_kubernetes_libraries_to_their_functions() -> None:
    plan = shipped_plan()
    assert plan.functions["spot"] == ("base",)
    assert plan.layer("matplotlib").functions == ("report",) and plan.layer("lightkube").functions == ("idle",)
    assert set(plan.layer("base").functions) == set(plan.functions)
