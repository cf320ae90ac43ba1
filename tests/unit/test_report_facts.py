"""Issue 48 on the report: one fact told once — unmonitored time is its own band, every cost finding has its money
at stake in one format, "Needs attention" is ordered critical first then by money."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governor.policy import Policy
from governor.report.build import build_report
from tests.unit.test_report import DAY, NEXT_DAY, _idle, _session, at


def report_over(items: list[dict[str, Any]], policy: Policy | None = None) -> Any:
    return build_report(
        kind="daily",
        start=DAY,
        end=NEXT_DAY,
        policy=policy or Policy(),
        audit={},
        ledger_items=items,
        now=NEXT_DAY,
    )


def test_an_instance_without_metrics_is_charted_unmonitored_never_busy() -> None:
    """Two GPU instances the sweep judged every hour as "unmonitored" (no usable data): all their GPU-hours are the
    unmonitored band, in the chart and in report.json; main counted each such decision as a sample, so drew them busy."""
    items: list[dict[str, Any]] = [
        _session("i-dark1", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=None),
        _session("i-dark2", "g5.xlarge", 1, 1.006, "vision", "bo", start=at(0), end=None),
        _session("i-lit", "g5.xlarge", 1, 1.006, "speech", "cy", start=at(0), end=None),
    ]
    for hour in range(24):
        items.append(_idle("i-dark1", at(hour + 0.1), "unmonitored", None))  # type: ignore[arg-type]
        items.append(_idle("i-dark2", at(hour + 0.1), "unmonitored", None))  # type: ignore[arg-type]
        items.append(_idle("i-lit", at(hour + 0.1), "busy", 80.0))
        items.append(_idle("i-lit", at(hour + 0.6), "busy", 80.0))
    report = report_over(items)
    usage = json.loads(report.model_dump_json())["charts"]["usage"]
    assert sum(b["unmonitored"] for b in usage) == pytest.approx(24 * 5, abs=0.01)
    assert sum(b["busy"] for b in usage) == pytest.approx(24, abs=0.01)
    assert all(b["unmonitored"] == pytest.approx(2.5, abs=0.01) for b in usage)  # every bucket, not only the first
