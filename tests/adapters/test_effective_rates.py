"""Savings at the price actually paid: Cost Explorer's amortised cost per running hour, on moto's Cost Explorer.

moto's GetCostAndUsage answers from a queue of results set through its documented ``/moto-api/static/ce/
cost-and-usage-results`` endpoint (moto tracks no cost itself): the queue holds the figures an account with a
Savings Plan would show, in GetCostAndUsage's response shape.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import requests
from moto import mock_aws

from governor.adapters.cost_explorer import CostExplorerRates, parse_rates
from governor.policy import parse_policy
from governor.report.build import price_book
from governor.report.sections.cost import cost_section
from tests.unit.test_costs_would_reclaim import DAY, END, PRICE, _day

#: g5.12xlarge under a Savings Plan: 720 running hours amortised at USD 3.40 (the table's on-demand is 5.672).
PLAN = {
    "ResultsByTime": [
        {
            "TimePeriod": {"Start": "2026-11-01", "End": "2026-12-01"},
            "Total": {},
            "Groups": [
                {
                    "Keys": ["g5.12xlarge"],
                    "Metrics": {
                        "AmortizedCost": {"Amount": "2448.0", "Unit": "USD"},
                        "UsageQuantity": {"Amount": "720", "Unit": "Hrs"},
                    },
                },
                {
                    "Keys": ["p5.48xlarge"],
                    "Metrics": {
                        "AmortizedCost": {"Amount": "0", "Unit": "USD"},
                        "UsageQuantity": {"Amount": "0", "Unit": "Hrs"},
                    },
                },
            ],
            "Estimated": False,
        }
    ],
    "DimensionValueAttributes": [],
}


def queue(*results: dict[str, Any]) -> None:
    answer = requests.post(
        "http://motoapi.amazonaws.com/moto-api/static/ce/cost-and-usage-results", json={"results": list(results)}
    )
    assert answer.status_code == 201


@pytest.fixture
def ce() -> Any:
    with mock_aws():
        yield boto3.client("ce", region_name="us-east-1")


def test_the_effective_rate_is_amortised_cost_over_running_hours(ce: Any) -> None:
    queue(PLAN)
    rates = CostExplorerRates(30, ce, now=DAY)
    found = rates.rate("g5.12xlarge")
    assert found is not None and found.per_hour == 3.4
    assert found.source == "Cost Explorer amortised cost, 2026-11-01 to 2026-12-01"
    assert rates.rate("p5.48xlarge") is None  # no running hours: no rate, never a division by zero
    assert rates.calls == 1  # one request a run, whatever the number of types


def test_report_savings_use_the_effective_rate_and_name_its_source(ce: Any) -> None:
    queue(PLAN)
    policy = parse_policy({"pricing": {"effective_rates": "cost_explorer"}})
    section = cost_section(_day(enforce=False), policy, DAY, END, prices=price_book(policy, "us-east-1", ce, DAY))
    assert section.would_save_usd == round(5.5 * 3.4, 2)  # not 5.5 h at the 5.672 list price
    assert section.price_sources == {"g5.12xlarge": "Cost Explorer amortised cost, 2026-11-01 to 2026-12-01"}
    assert any(n.startswith("savings priced at: g5.12xlarge Cost Explorer amortised cost") for n in section.notes)


def test_without_effective_rates_the_source_says_list_price() -> None:
    section = cost_section(_day(enforce=False), parse_policy({}), DAY, END)
    assert section.would_save_usd == round(5.5 * PRICE, 2)
    assert section.price_sources == {"g5.12xlarge": "on-demand price recorded with the usage session"}


def test_a_cost_explorer_failure_falls_back_to_list_prices_and_says_so() -> None:
    class Denied:
        def get_cost_and_usage(self, **_: Any) -> dict[str, Any]:
            raise RuntimeError("AccessDeniedException: Cost Explorer is not enabled")

    policy = parse_policy({"pricing": {"effective_rates": "cost_explorer"}})
    section = cost_section(_day(enforce=False), policy, DAY, END, prices=price_book(policy, "us-east-1", Denied()))
    assert section.would_save_usd == round(5.5 * PRICE, 2)
    assert (
        "Cost Explorer could not be read (access denied): priced at the prices recorded with each usage session, "
        "else list prices"
    ) in section.notes
    assert not any("RuntimeError" in n for n in section.notes)  # words, never the exception's text (issue 48)


def test_parse_skips_malformed_groups() -> None:
    bad = {"ResultsByTime": [{"Groups": [{"Keys": ["g5.xlarge"], "Metrics": {"AmortizedCost": {}}}]}]}
    assert parse_rates([bad], "x") == {}
