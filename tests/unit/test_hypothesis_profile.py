"""Issue 46.8: a randomized test in CI is a lottery for every landing. Under the suite's default profile (tests/
conftest.py) every property-based test runs the same examples on every run, with no timing check that a loaded
runner can fail, and prints what it needs to reproduce a failure; exploration is a profile of its own."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

from tests.conftest import ROOT


def _property_tests() -> Iterator[tuple[str, Any]]:
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "@given" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for name, value in vars(module).items():
            if name.startswith("test_") and hasattr(value, "hypothesis"):
                yield f"{path.name}::{name}", value


def test_every_property_test_is_derandomized_untimed_and_prints_its_reproduction() -> None:
    found = dict(_property_tests())
    assert len(found) >= 10
    for name, test in found.items():
        chosen = test._hypothesis_internal_use_settings
        assert chosen.derandomize and chosen.database is None, name
        assert chosen.deadline is None and HealthCheck.too_slow in chosen.suppress_health_check, name
        assert chosen.print_blob, name


def test_exploration_is_random_and_keeps_its_example_database() -> None:
    try:
        exploration: settings | None = settings.get_profile("exploration")
    except InvalidArgument:  # not registered
        exploration = None
    assert exploration is not None and not exploration.derandomize
    assert ".hypothesis" in str(exploration.database)
