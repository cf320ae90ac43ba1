"""The report's EKS GPU-hours by namespace: the idle sweeps' ``idle.gpu-hours`` records summed per cluster and
namespace over the period, allocated-but-idle namespaces flagged, shown in the page and attached as CSV."""

from __future__ import annotations

import datetime as dt

from governor.policy import Policy
from governor.report.build import build_report
from governor.report.render.csv_files import csv_files
from governor.report.render.html_page import render_html

DAY = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)


def _record(at: dt.datetime, research_idle: float) -> dict:  # type: ignore[type-arg]
    return {
        "kind": "decision",
        "policy": "idle",
        "rule": "idle.gpu-hours",
        "resource": "eks:gpu-prod",
        "at": at.isoformat(),
        "evidence": {
            "cluster": "gpu-prod",
            "namespaces": [
                {
                    "namespace": "research",
                    "team": "vision",
                    "gpu_hours": 0.5,
                    "idle_gpu_hours": research_idle,
                    "allocated_but_idle": research_idle >= 0.5,
                    "pods": ["research/notebook-0"],
                },
                {"namespace": None, "team": None, "gpu_hours": 1.75, "idle_gpu_hours": 1.75, "pods": []},
            ],
        },
    }


def test_gpu_hours_by_namespace_add_up_over_the_sweeps_and_flag_allocated_but_idle() -> None:
    items = [_record(DAY + dt.timedelta(minutes=15 * k), 0.5) for k in range(8)]
    items.append(_record(DAY - dt.timedelta(hours=1), 0.0))  # before the period: not counted
    report = build_report(
        kind="daily", start=DAY, end=DAY + dt.timedelta(days=1), policy=Policy(), audit={}, ledger_items=items
    )
    table = report.cost.by_namespace
    assert table is not None
    rows = {r["namespace"]: r for r in table.rows}
    assert rows["research"]["gpu_hours"] == 4.0 and rows["research"]["allocated_but_idle"] is True
    assert rows["research"]["team"] == "vision" and rows["research"]["pods"] == "research/notebook-0"
    assert rows["(no pod)"]["gpu_hours"] == 14.0 and rows["(no pod)"]["allocated_but_idle"] is False
    page = render_html(report)
    assert "EKS GPU-hours by namespace" in page and "research/notebook-0" in page
    assert "gpu_hours_by_namespace.csv" in csv_files(report)


def test_no_cluster_records_no_table() -> None:
    report = build_report(kind="daily", start=DAY, end=DAY + dt.timedelta(days=1), policy=Policy(), audit={})
    assert report.cost.by_namespace is None
