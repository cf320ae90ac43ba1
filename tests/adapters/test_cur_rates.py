"""Savings at the price each instance actually paid: the CUR 2.0 (Data Exports) table in Athena, first in the chain.

The query is checked the way the audit library's are (tests/unit/test_queries_athena.py): it parses as Trino with its
parameters only in WHERE (Athena's documented limit), it names only CUR 2.0 columns, and DuckDB runs sqlglot's
translation of it over a table shaped like the export (the CUR 2.0 table dictionary's column names and types) holding
the line items an account with a Savings Plan, a Reserved Instance, On-Demand and Spot hours has. The same SQL runs
through ``CurRates`` and the report's price book, so the figures the report shows come from the SQL Athena gets.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from governor.adapters.cur import NAME, CurRates, cur_sql
from governor.audit.engine import transpile
from governor.audit.queries import to_positional
from governor.domain.costs import EffectiveRate
from governor.policy import PolicyError, parse_policy
from governor.report.athena import AthenaResult
from governor.report.build import price_book
from governor.report.sections.cost import cost_section
from tests.unit.test_costs_would_reclaim import DAY, END, INSTANCE, _day
from tests.unit.test_queries_athena import misplaced_parameters

#: Columns of the CUR 2.0 table the query reads, as the table dictionary names and types them
#: (https://docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2.html: line item, pricing, product,
#: reservation and savings plan columns), plus the ``billing_period`` partition of the export's BILLING_PERIOD=YYYY-MM
#: folders (https://docs.aws.amazon.com/cur/latest/userguide/dataexports-export-delivery.html).
CUR2_COLUMNS = {
    "line_item_resource_id": "VARCHAR",
    "line_item_usage_type": "VARCHAR",
    "line_item_line_item_type": "VARCHAR",
    "line_item_product_code": "VARCHAR",
    "line_item_usage_start_date": "TIMESTAMPTZ",
    "line_item_usage_amount": "DOUBLE",
    "line_item_unblended_cost": "DOUBLE",
    "line_item_net_unblended_cost": "DOUBLE",
    "savings_plan_savings_plan_effective_cost": "DOUBLE",
    "reservation_effective_cost": "DOUBLE",
    "pricing_term": "VARCHAR",
    "product_instance_type": "VARCHAR",
    "billing_period": "VARCHAR",
}
SP, RI, OD, SPOT = INSTANCE.id, "i-0ri0000000000000a", "i-0od0000000000000b", "i-0sp0000000000000c"
AT = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)


def line(
    resource: str,
    instance_type: str,
    kind: str,
    usage_type: str,
    hours: float,
    unblended: float,
    *,
    net: float | None = None,
    sp: float | None = None,
    ri: float | None = None,
    term: str = "OnDemand",
    at: dt.datetime = AT,
    product: str = "AmazonEC2",
) -> tuple[Any, ...]:
    return (
        resource,
        usage_type,
        kind,
        product,
        at,
        hours,
        unblended,
        net,
        sp,
        ri,
        term,
        instance_type,
        at.strftime("%Y-%m"),
    )


#: A month of line items: the g5.12xlarge under a Savings Plan (10 h at 3.40 effective, its On-Demand 5.672 negated),
#: a p4d under an RI (5 h at 20.00), an On-Demand g5.12xlarge (4 h at 5.672), a Spot g5.xlarge (2 h at 0.42), and
#: lines the query must leave out: the negation, EBS on a GPU instance, a CPU instance, another service, a line
#: before the window.
LINES = [
    *[
        line(SP, "g5.12xlarge", "SavingsPlanCoveredUsage", "USE1-BoxUsage:g5.12xlarge", 1, 5.672, sp=3.40, term="")
        for _ in range(10)
    ],
    line(SP, "g5.12xlarge", "SavingsPlanNegation", "USE1-BoxUsage:g5.12xlarge", 0, -56.72, term=""),
    line(RI, "p4d.24xlarge", "DiscountedUsage", "USE1-BoxUsage:p4d.24xlarge", 5, 0.0, ri=100.0, term="Reserved"),
    line(OD, "g5.12xlarge", "Usage", "USE1-BoxUsage:g5.12xlarge", 4, 22.688, net=22.688),
    line(SPOT, "g5.xlarge", "Usage", "USE1-SpotUsage:g5.xlarge", 2, 0.84, term="Spot"),
    line("vol-0123456789abcdef0", "", "Usage", "USE1-EBS:VolumeUsage.gp3", 100, 8.0),
    line("i-0cpu000000000000d", "m5.large", "Usage", "USE1-BoxUsage:m5.large", 10, 0.96, net=0.96),
    line(SP, "g5.12xlarge", "Usage", "USE1-BoxUsage:g5.12xlarge", 1, 9.9, product="AmazonSageMaker"),
    line(OD, "g5.12xlarge", "Usage", "USE1-BoxUsage:g5.12xlarge", 50, 283.6, at=AT - dt.timedelta(days=60)),
]


class DuckAthena:
    """The report's Athena runner, on DuckDB: sqlglot's translation of the very SQL ``CurRates`` sends."""

    def __init__(self) -> None:
        self.con = duckdb.connect()
        self.con.execute("CREATE SCHEMA billing")
        columns = ", ".join(f"{name} {kind}" for name, kind in CUR2_COLUMNS.items())
        self.con.execute(f"CREATE TABLE billing.cur2 ({columns})")
        marks = ", ".join("?" * len(CUR2_COLUMNS))
        self.con.executemany(f"INSERT INTO billing.cur2 VALUES ({marks})", LINES)  # noqa: S608 - our placeholders
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> AthenaResult:
        self.runs.append((name, parameters))
        cursor = self.con.execute(transpile(sql), parameters)
        names = [d[0] for d in cursor.description or []]
        return AthenaResult(name, "SUCCEEDED", rows=[dict(zip(names, r, strict=True)) for r in cursor.fetchall()])


def test_the_query_is_athena_sql_over_cur2_columns_only() -> None:
    sql = cur_sql("billing", "cur2", "billing_period", ["p", "g", "trn", "inf", "dl"])
    statement, names = to_positional(sql)
    tree = sqlglot.parse_one(statement, read="trino", error_level=sqlglot.ErrorLevel.RAISE)
    assert names == ["start", "end", "start", "end"] and misplaced_parameters(sql) == []
    read = {c.name for c in tree.find_all(exp.Column)} - {"instance_id"}  # ORDER BY the output alias
    assert read <= set(CUR2_COLUMNS), read - set(CUR2_COLUMNS)
    assert "billing_period" not in cur_sql("billing", "cur2", None)  # an unpartitioned table: no partition filter
    with pytest.raises(ValueError, match="not a Glue name"):
        cur_sql("billing", "cur2; DROP TABLE x", None)
    assert "x'" not in cur_sql("billing", "cur2", None, ["g", "x') OR (1=1"])  # families are letters or left out


def test_each_instance_gets_the_rate_it_paid_from_one_query() -> None:
    athena = DuckAthena()
    rates = CurRates(athena, "billing", "cur2", families=["g", "p"], days=30, now=DAY)
    assert rates.rate("g5.12xlarge", SP) == EffectiveRate(
        3.4, f"CUR 2.0 (billing.cur2), {LABEL}, this instance (SavingsPlan)"
    )
    assert rates.rate("p4d.24xlarge", RI).per_hour == 20.0  # type: ignore[union-attr]
    assert rates.rate("g5.12xlarge", OD).per_hour == 5.672  # type: ignore[union-attr]
    assert rates.rate("g5.xlarge", SPOT).per_hour == 0.42  # type: ignore[union-attr]
    # An instance the table does not hold gets its type's average over the fleet: (34 + 22.688) / 14 h.
    average = rates.rate("g5.12xlarge", "i-0new000000000000e")
    assert average == EffectiveRate(round(56.688 / 14, 6), f"CUR 2.0 (billing.cur2), {LABEL}, g5.12xlarge average")
    assert rates.rate("m5.large", "i-0cpu000000000000d") is None  # not a GPU family: never read
    assert len(athena.runs) == 1 and athena.runs[0] == (
        NAME,
        {"start": "2026-11-01T00:00:00+00:00", "end": "2026-12-01T00:00:00+00:00"},
    )
    assert rates.notes() == []


LABEL = "2026-11-01 to 2026-12-01"


class ExplorerRates:
    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None:
        return EffectiveRate(30.0, "Cost Explorer amortised cost") if instance_type == "p5.48xlarge" else None


def test_types_the_table_lacks_and_a_failed_query_fall_back_to_cost_explorer_and_say_so() -> None:
    rates = CurRates(DuckAthena(), "billing", "cur2", now=DAY, fallback=ExplorerRates())
    assert rates.rate("p5.48xlarge", "i-0p5").source == "Cost Explorer amortised cost"  # type: ignore[union-attr]

    class Failed:
        def run(self, name: str, sql: str, parameters: dict[str, Any]) -> AthenaResult:
            return AthenaResult(name, "FAILED", reason="TABLE_NOT_FOUND: line 1:1: Table billing.cur2 does not exist")

    broken = CurRates(Failed(), "billing", "cur2", now=DAY, fallback=ExplorerRates())
    assert broken.rate("p5.48xlarge", "i-0p5").per_hour == 30.0  # type: ignore[union-attr]
    assert broken.notes() == [
        "CUR 2.0 rates unavailable (query effective_rates_cur failed: TABLE_NOT_FOUND: line 1:1: Table billing.cur2 "
        "does not exist): rates from Cost Explorer, then list prices"
    ]
    local = CurRates(None, "billing", "cur2", now=DAY)
    assert local.rate("g5.12xlarge", SP) is None and "no Athena workgroup" in local.notes()[0]


def test_the_report_prices_savings_at_the_instance_s_cur_rate_and_names_the_source() -> None:
    policy = parse_policy(
        {"pricing": {"effective_rates": "cur", "cur": {"database": "billing", "table": "cur2", "bucket": "bills"}}}
    )

    class NoExplorer:
        def get_cost_and_usage(self, **_: Any) -> dict[str, Any]:
            raise AssertionError("the CUR table priced every type: Cost Explorer is not asked")

    book = price_book(policy, "us-east-1", NoExplorer(), DAY, queries=DuckAthena())
    section = cost_section(_day(enforce=False), policy, DAY, END, prices=book)
    assert section.would_save_usd == round(5.5 * 3.4, 2)  # not 5.5 h at the 5.672 On-Demand price
    source = f"CUR 2.0 (billing.cur2), {LABEL}, this instance (SavingsPlan)"
    assert section.price_sources == {"g5.12xlarge": source}
    assert f"savings priced at: g5.12xlarge {source}" in section.notes


def test_the_policy_names_the_table_for_cur() -> None:
    with pytest.raises(PolicyError, match=r"cur must name the CUR 2\.0 table"):
        parse_policy({"pricing": {"effective_rates": "cur"}})
    with pytest.raises(PolicyError, match=r"pricing\.cur\.table"):
        parse_policy(
            {
                "pricing": {
                    "effective_rates": "cur",
                    "cur": {"database": "billing", "table": "Cur-2", "bucket": "bills"},
                }
            }
        )
