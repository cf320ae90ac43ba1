"""Effective hourly rates from the Cost and Usage Report 2.0 (AWS Data Exports) in Athena, per instance.

The first source in the report's order of truth (``pricing.effective_rates: cur``): the CUR 2.0 table holds every
instance-hour with what it really cost, so one Athena query a run gives each GPU instance its own rate, Savings Plans
and Reserved Instances included. Columns, from the CUR 2.0 table dictionary
(https://docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2.html):

- ``line_item_line_item_type``: ``Usage`` (On-Demand or Spot, priced in ``line_item_net_unblended_cost``, after
  discounts; ``line_item_unblended_cost`` where the account has none), ``SavingsPlanCoveredUsage`` (what the hour
  really cost is ``savings_plan_savings_plan_effective_cost``; its ``line_item_unblended_cost`` is the On-Demand
  price, cancelled by a ``SavingsPlanNegation`` line, which is not read) and ``DiscountedUsage`` (a Reserved Instance:
  ``reservation_effective_cost``, the upfront fee amortised plus the recurring fee).
- ``line_item_usage_type`` ``...BoxUsage:<type>`` (On-Demand, Savings Plan, RI hours), ``...SpotUsage:<type>`` and
  ``...DedicatedUsage:<type>``; ``line_item_usage_amount`` the hours; ``line_item_resource_id`` the instance (only in
  an export created with "Include resource IDs"); ``product_instance_type``; ``pricing_term`` (OnDemand, Reserved,
  Spot, or empty for Savings Plan hours); ``line_item_usage_start_date`` (timestamp) and ``line_item_product_code``.
- The export lands under ``<prefix>/<export>/data/BILLING_PERIOD=YYYY-MM/`` (Data Exports' delivery layout), which a
  Glue crawler makes the ``billing_period`` partition: the query names it so Athena reads only the periods in range.

A failed query (table missing, export without resource IDs, denied, cut off by the workgroup's bytes limit) is a note
in the report and the rates come from the next source (Cost Explorer, else the price book): never a guess.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any, Protocol

from governor.domain.costs import Coverage, EffectiveRate, EffectiveRates
from governor.domain.unavailable import unavailable

NAME = "effective_rates_cur"
SOURCE = "CUR 2.0"
#: Glue reads Athena needs on the CUR table (the workgroup's own Athena and results grants come with the audit lake).
GLUE_ACTIONS = ("glue:GetDatabase", "glue:GetPartition", "glue:GetPartitions", "glue:GetTable")
S3_BUCKET_ACTIONS = ("s3:GetBucketLocation", "s3:ListBucket")
S3_OBJECT_ACTIONS = ("s3:GetObject",)
IAM_ACTIONS = frozenset((*GLUE_ACTIONS, *S3_BUCKET_ACTIONS, *S3_OBJECT_ACTIONS))
_FAMILY = re.compile(r"^[a-z]+$")

SQL = """\
SELECT
  line_item_resource_id AS instance_id,
  product_instance_type AS instance_type,
  sum(line_item_usage_amount) AS hours,
  sum(
    CASE line_item_line_item_type
      WHEN 'SavingsPlanCoveredUsage' THEN savings_plan_savings_plan_effective_cost
      WHEN 'DiscountedUsage' THEN reservation_effective_cost
      ELSE coalesce(line_item_net_unblended_cost, line_item_unblended_cost)
    END
  ) AS effective_cost,
  sum(CASE WHEN line_item_line_item_type = 'SavingsPlanCoveredUsage' THEN line_item_usage_amount ELSE 0 END)
    AS savings_plan_hours,
  sum(CASE WHEN line_item_line_item_type = 'DiscountedUsage' THEN line_item_usage_amount ELSE 0 END) AS reserved_hours,
  array_join(array_sort(array_distinct(array_agg(coalesce(nullif(pricing_term, ''), 'SavingsPlan')))), ',')
    AS pricing_terms
FROM "{database}"."{table}"
WHERE {partition}line_item_usage_start_date >= from_iso8601_timestamp(:start)
  AND line_item_usage_start_date < from_iso8601_timestamp(:end)
  AND line_item_product_code = 'AmazonEC2'
  AND line_item_line_item_type IN ('Usage', 'SavingsPlanCoveredUsage', 'DiscountedUsage')
  AND regexp_like(line_item_usage_type, '(BoxUsage|SpotUsage|DedicatedUsage)')
  AND line_item_resource_id LIKE 'i-%'{families}
GROUP BY line_item_resource_id, product_instance_type
ORDER BY instance_id
"""
_PARTITION = (
    "{column} BETWEEN date_format(from_iso8601_timestamp(:start), '%Y-%m') "
    "AND date_format(from_iso8601_timestamp(:end), '%Y-%m')\n  AND "
)


def cur_sql(database: str, table: str, partition: str | None = "billing_period", families: Sequence[str] = ()) -> str:
    """The query for one CUR 2.0 table. Names come from the validated policy (``[a-z0-9_]``); families that are not
    plain letters are left out of the filter rather than spliced into SQL."""
    for name in (database, table, partition or "x"):
        if not re.fullmatch(r"[a-z0-9_]{1,255}", name):
            raise ValueError(f"not a Glue name: {name!r}")
    plain = [f for f in families if _FAMILY.match(f)]
    family_filter = f"\n  AND regexp_like(product_instance_type, '^({'|'.join(sorted(plain))})[0-9]')" if plain else ""
    return SQL.format(
        database=database,
        table=table,
        partition=_PARTITION.format(column=partition) if partition else "",
        families=family_filter,
    )


class Queries(Protocol):
    """The report's Athena runner (``report/athena.py`` ``AthenaQueries``): runs SQL with ``:start`` / ``:end``."""

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> Any: ...


def parse_rows(rows: Sequence[dict[str, Any]], label: str) -> tuple[dict[str, EffectiveRate], dict[str, EffectiveRate]]:
    """Per instance and per type: effective cost over hours. Rows with no hours or a negative cost are skipped (a
    refund or a credit line is not a rate)."""
    by_instance: dict[str, EffectiveRate] = {}
    cost: dict[str, float] = {}
    hours: dict[str, float] = {}
    for row in rows:
        try:
            used = float(row.get("hours") or 0)
            paid = float(row.get("effective_cost") or 0)
        except (TypeError, ValueError):
            continue
        instance_id, instance_type = str(row.get("instance_id") or ""), str(row.get("instance_type") or "")
        if used <= 0 or paid < 0 or not instance_id:
            continue
        terms = str(row.get("pricing_terms") or "")
        by_instance[instance_id] = EffectiveRate(
            round(paid / used, 6), f"{label}, this instance ({terms})" if terms else f"{label}, this instance"
        )
        if instance_type:
            cost[instance_type] = cost.get(instance_type, 0.0) + paid
            hours[instance_type] = hours.get(instance_type, 0.0) + used
    by_type = {t: EffectiveRate(round(cost[t] / hours[t], 6), f"{label}, {t} average") for t in cost if hours[t] > 0}
    return by_instance, by_type


class CurRates:
    """Implements ``domain.costs.EffectiveRates`` from the CUR 2.0 table: one query per run, then looked up per
    instance (its own rate), else per type (the fleet's average for the type), else ``fallback`` (Cost Explorer)."""

    #: How a report names this source in a sentence.
    LABEL = "the CUR 2.0 table"

    def __init__(
        self,
        queries: Queries | None,
        database: str,
        table: str,
        *,
        partition: str | None = "billing_period",
        families: Sequence[str] = (),
        days: int = 30,
        now: dt.datetime | None = None,
        fallback: EffectiveRates | None = None,
    ) -> None:
        self._queries = queries
        self._sql = cur_sql(database, table, partition, families)
        self._table = f"{database}.{table}"
        self._days = days
        self._now = now
        self._fallback = fallback
        self._read_done = False
        self._instances: dict[str, EffectiveRate] = {}
        self._types: dict[str, EffectiveRate] = {}
        #: Why the table gave nothing, for the report's notes (rates then come from the fallback).
        self.error: str | None = None
        self.queries_run = 0

    @property
    def sql(self) -> str:
        return self._sql

    def _read(self) -> None:
        self._read_done = True
        end = (self._now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
        start = end - dt.timedelta(days=self._days)
        label = f"{SOURCE} ({self._table}), {start.date().isoformat()} to {end.date().isoformat()}"
        if self._queries is None:
            self.error = "no Athena workgroup to run the query in (a local report)"
            return
        self.queries_run += 1
        try:
            result = self._queries.run(NAME, self._sql, {"start": start.isoformat(), "end": end.isoformat()})
        except Exception as error:  # no Athena in this stack, or the runner failed: the next source, and say so
            self.error = unavailable(error)
            return
        problem = result.problem() if hasattr(result, "problem") else None
        if problem:
            self.error = problem
            return
        rows = result.rows if hasattr(result, "rows") else list(result.get("rows", []))
        self._instances, self._types = parse_rows(rows, label)
        if not rows:
            self.error = f"no GPU instance-hours in {self._table} for the window (an export without resource IDs?)"

    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None:
        if not self._read_done:
            self._read()
        if instance_id and instance_id in self._instances:
            return self._instances[instance_id]
        if instance_type in self._types:
            return self._types[instance_type]
        if self._fallback is not None:
            return self._fallback.rate(instance_type)
        return None

    def coverage(self, is_gpu: Any) -> Coverage | None:
        """Savings Plans / RI coverage comes from the fallback (Cost Explorer's coverage APIs) when there is one."""
        read = getattr(self._fallback, "coverage", None)
        return read(is_gpu) if read is not None else None

    def notes(self) -> list[str]:
        if self.error is None:
            return []
        then = "Cost Explorer, then list prices" if self._fallback is not None else "list prices"
        return [f"CUR 2.0 rates unavailable ({self.error}): rates from {then}"]
