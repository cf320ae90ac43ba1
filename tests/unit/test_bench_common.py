"""The helpers every benchmark figure goes through: a wrong percentile or ratio would misstate every table row."""

from __future__ import annotations

import pytest

from bench.common import Figure, median, percentile, ratio
from bench.run import render


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 50) == 50
    assert percentile(samples, 99) == 99
    assert percentile(samples, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)


def test_median_and_ratio() -> None:
    assert median([3.0, 1.0, 10.0]) == 3.0
    assert ratio(200, 1) == "200x"
    assert ratio(3, 2) == "1.5x"
    assert ratio(1, 0) == "n/a"


def test_render_puts_each_figure_with_its_command_and_escapes_pipes() -> None:
    rows = [Figure("4. Audit engine", "load | queries", "1.0 s", "python -m bench.audit_engine --records 10", "n")]
    text = render(rows, {"Date": "2026-12-02", "Machine": "2 cores"})
    assert "| Machine | 2 cores |" in text
    assert "## 4. Audit engine" in text
    assert "| load \\| queries | 1.0 s | `python -m bench.audit_engine --records 10` | n |" in text
