"""Effective hourly rates from Cost Explorer: amortised cost per instance-hour, by instance type.

What an account with Savings Plans, Reserved Instances or Capacity Blocks actually pays for an hour of a type is its
amortised cost (upfront fees and commitments spread over the hours they cover) divided by its running hours, over the
last ``pricing.effective_rate_days``. One GetCostAndUsage call (paginated) serves every type; Cost Explorer's
endpoint is us-east-1 for every region, and each request is billed (USD 0.01), so the report makes one a run.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.adapters.aws import client
from governor.domain.costs import Coverage, EffectiveRate

IAM_ACTIONS = frozenset({"ce:GetCostAndUsage", "ce:GetSavingsPlansCoverage", "ce:GetReservationCoverage"})
ENDPOINT_REGION = "us-east-1"
#: EC2 instance-hours only (not EBS, data transfer or other EC2 line items).
FILTER = {
    "And": [
        {"Dimensions": {"Key": "SERVICE", "Values": ["Amazon Elastic Compute Cloud - Compute"]}},
        {"Dimensions": {"Key": "USAGE_TYPE_GROUP", "Values": ["EC2: Running Hours"]}},
    ]
}
SOURCE = "Cost Explorer amortised cost"


def parse_rates(pages: list[dict[str, Any]], label: str) -> dict[str, EffectiveRate]:
    """Amortised USD over running hours, per instance type, summed over every period of every page."""
    cost: dict[str, float] = {}
    hours: dict[str, float] = {}
    for page in pages:
        for period in page.get("ResultsByTime", []):
            for group in period.get("Groups", []):
                instance_type = (group.get("Keys") or [""])[0]
                metrics = group.get("Metrics") or {}
                try:
                    cost[instance_type] = cost.get(instance_type, 0.0) + float(metrics["AmortizedCost"]["Amount"])
                    hours[instance_type] = hours.get(instance_type, 0.0) + float(metrics["UsageQuantity"]["Amount"])
                except (KeyError, TypeError, ValueError):
                    continue
    return {
        t: EffectiveRate(round(cost[t] / hours[t], 6), label)
        for t in cost
        if t and hours.get(t, 0.0) > 0 and cost[t] >= 0
    }


class CostExplorerRates:
    """Implements ``domain.costs.EffectiveRates``: read once per run, then looked up per type."""

    #: How a report names this source in a sentence ("Cost Explorer could not be read ...").
    LABEL = "Cost Explorer"

    def __init__(self, days: int = 30, ce: Any = None, *, now: dt.datetime | None = None) -> None:
        self._ce = ce or client("ce", ENDPOINT_REGION)
        self._days = days
        self._now = now
        self._rates: dict[str, EffectiveRate] | None = None
        self.calls = 0

    def _read(self) -> dict[str, EffectiveRate]:
        end = (self._now or dt.datetime.now(dt.UTC)).date()
        start = end - dt.timedelta(days=self._days)
        period = {"Start": start.isoformat(), "End": end.isoformat()}
        pages: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            extra = {"NextPageToken": token} if token else {}
            page = self._ce.get_cost_and_usage(
                TimePeriod=period,
                Granularity="MONTHLY",
                Metrics=["AmortizedCost", "UsageQuantity"],
                GroupBy=[{"Type": "DIMENSION", "Key": "INSTANCE_TYPE"}],
                Filter=FILTER,
                **extra,
            )
            self.calls += 1
            pages.append(page)
            token = page.get("NextPageToken")
            if not token:
                break
        return parse_rates(pages, f"{SOURCE}, {period['Start']} to {period['End']}")

    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None:
        """By type only: Cost Explorer has no per-instance amortised cost without resource-level data."""
        if self._rates is None:
            self._rates = self._read()
        return self._rates.get(instance_type)

    def _paged(self, call: Any, **kwargs: Any) -> list[dict[str, Any]]:
        pages: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = call(**kwargs, **({"NextToken": token} if token else {}))
            self.calls += 1
            pages.append(page)
            token = page.get("NextToken")
            if not token:
                return pages

    def coverage(self, is_gpu: Any) -> Coverage:
        """How much of the GPU fleet's EC2 use Savings Plans and Reserved Instances covered over the same window:
        Savings Plans by spend (GetSavingsPlansCoverage grouped by INSTANCE_FAMILY), RIs by running hours
        (GetReservationCoverage grouped by INSTANCE_TYPE); only families / types ``is_gpu`` accepts count."""
        end = (self._now or dt.datetime.now(dt.UTC)).date()
        start = end - dt.timedelta(days=self._days)
        period = {"Start": start.isoformat(), "End": end.isoformat()}
        compute = {"Dimensions": {"Key": "SERVICE", "Values": ["Amazon Elastic Compute Cloud - Compute"]}}
        covered = total = 0.0
        for page in self._paged(
            self._ce.get_savings_plans_coverage,
            TimePeriod=period,
            Granularity="MONTHLY",
            GroupBy=[{"Type": "DIMENSION", "Key": "INSTANCE_FAMILY"}],
            Filter=compute,
        ):
            for row in page.get("SavingsPlansCoverages", []):
                family = next(iter((row.get("Attributes") or {}).values()), "")
                if not is_gpu(f"{family}.x"):
                    continue
                found = row.get("Coverage") or {}
                covered += float(found.get("SpendCoveredBySavingsPlans") or 0)
                total += float(found.get("TotalCost") or 0)
        reserved = running = 0.0
        for page in self._paged(
            self._ce.get_reservation_coverage,
            TimePeriod=period,
            Granularity="MONTHLY",
            GroupBy=[{"Type": "DIMENSION", "Key": "INSTANCE_TYPE"}],
            Filter=compute,
        ):
            for period_row in page.get("CoveragesByTime", []):
                for group in period_row.get("Groups", []):
                    if not is_gpu(next(iter((group.get("Attributes") or {}).values()), "")):
                        continue
                    hours = (group.get("Coverage") or {}).get("CoverageHours") or {}
                    reserved += float(hours.get("ReservedHours") or 0)
                    running += float(hours.get("TotalRunningHours") or 0)
        return Coverage(
            savings_plans_pct=round(100 * covered / total, 1) if total > 0 else None,
            reserved_hours_pct=round(100 * reserved / running, 1) if running > 0 else None,
            period=f"{period['Start']} to {period['End']}",
        )
