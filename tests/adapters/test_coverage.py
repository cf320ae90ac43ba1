"""Savings Plans and RI coverage of the GPU fleet (issue 38, item 3): read from Cost Explorer with the effective
rates, only GPU families / types counted, and said in the report's notes. moto implements neither call, so botocore's
Stubber answers (it validates each response against the ce service model: the documented shapes)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
from botocore.stub import Stubber

from governor.adapters.cost_explorer import CostExplorerRates
from governor.domain.costs import PriceBook
from governor.policy import parse_policy
from governor.report.build import build_report
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text, slack_messages
from governor.report.sections.cost import cost_section

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
PERIOD = {"Start": "2026-11-01", "End": "2026-12-01"}


def _ce() -> tuple[Any, Stubber]:
    ce = boto3.client("ce", region_name="us-east-1")
    stub = Stubber(ce)
    stub.add_response(
        "get_savings_plans_coverage",
        {
            "SavingsPlansCoverages": [
                {
                    "Attributes": {"INSTANCE_FAMILY": "p5"},
                    "Coverage": {"SpendCoveredBySavingsPlans": "720", "OnDemandCost": "280", "TotalCost": "1000"},
                    "TimePeriod": PERIOD,
                },
                {
                    "Attributes": {"INSTANCE_FAMILY": "m5"},  # not a GPU family: not counted
                    "Coverage": {"SpendCoveredBySavingsPlans": "0", "OnDemandCost": "500", "TotalCost": "500"},
                    "TimePeriod": PERIOD,
                },
            ]
        },
    )
    stub.add_response(
        "get_reservation_coverage",
        {
            "CoveragesByTime": [
                {
                    "TimePeriod": PERIOD,
                    "Groups": [
                        {
                            "Attributes": {"instanceType": "g5.12xlarge"},
                            "Coverage": {
                                "CoverageHours": {
                                    "OnDemandHours": "75",
                                    "ReservedHours": "25",
                                    "TotalRunningHours": "100",
                                    "CoverageHoursPercentage": "25",
                                }
                            },
                        },
                        {
                            "Attributes": {"instanceType": "c5.large"},
                            "Coverage": {"CoverageHours": {"ReservedHours": "100", "TotalRunningHours": "100"}},
                        },
                    ],
                }
            ]
        },
    )
    stub.activate()
    return ce, stub


def test_gpu_fleet_coverage_is_read_and_reported() -> None:
    ce, stub = _ce()
    rates = CostExplorerRates(30, ce, now=NOW)
    policy = parse_policy({"fleet": {"gpu_families": ["p", "g"]}, "pricing": {"effective_rates": "cost_explorer"}})
    coverage = rates.coverage(policy.fleet.is_gpu_type)
    assert (coverage.savings_plans_pct, coverage.reserved_hours_pct) == (72.0, 25.0)
    assert rates.calls == 2
    stub.assert_no_pending_responses()

    ce, _ = _ce()
    book = PriceBook(policy.pricing, effective=CostExplorerRates(30, ce, now=NOW))
    section = cost_section([], policy, NOW - dt.timedelta(days=1), NOW, prices=book)
    assert section.savings_plans_coverage_pct == 72.0 and section.reserved_coverage_pct == 25.0
    said = (
        "Savings Plans covered 72.0% of GPU spend, Reserved Instances 25.0% of GPU running hours "
        "(Cost Explorer, 2026-11-01 to 2026-12-01)"
    )
    report = build_report(
        kind="daily",
        start=NOW - dt.timedelta(days=1),
        end=NOW,
        policy=policy,
        audit={},
        now=NOW,
        prices=PriceBook(policy.pricing, effective=CostExplorerRates(30, _ce()[0], now=NOW)),
    )
    page = render_html(report)
    assert "<h3>Savings Plans and RI coverage of the GPU fleet</h3>" in page and f"<p>{said}.</p>" in page
    assert (
        "<td data-label='Commitment'>Reserved Instances</td><td data-label='Coverage'>25.0%</td>"
        "<td data-label='Measured by'>hours</td>"
    ) in page
    slack = json.dumps(slack_messages(report))
    assert f"{said}." in slack
    assert f"  {said}" in render_text(report)  # the email's text part


def test_a_failed_coverage_read_is_said_not_hidden() -> None:
    ce = boto3.client("ce", region_name="us-east-1")
    stub = Stubber(ce)
    stub.add_client_error("get_savings_plans_coverage", "AccessDeniedException", "not authorised")
    stub.activate()
    policy = parse_policy({"pricing": {"effective_rates": "cost_explorer"}})
    book = PriceBook(policy.pricing, effective=CostExplorerRates(30, ce, now=NOW))
    section = cost_section([], policy, NOW - dt.timedelta(days=1), NOW, prices=book)
    assert section.savings_plans_coverage_pct is None and section.coverage_source is None
    # said in words, never as the exception's text (issue 48: a 500's HTML page reached the report)
    assert "Savings Plans / RI coverage not shown: Cost Explorer could not be read (access denied)" in section.notes
    assert not any("ClientError" in n or "not authorised" in n for n in section.notes)
