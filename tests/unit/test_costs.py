"""Prices, GPU-hours and dollars per team / owner / type, idle hours detected and reclaimed, and savings."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from governor.domain.actions import Stop
from governor.domain.costs import PriceBook, gpu_hours_and_cost, session_usage
from governor.domain.decision import Decision
from governor.idle.costs import idle_hours, savings
from governor.policy import parse_policy

POLICY = parse_policy({})
DAY = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
NEXT = DAY + dt.timedelta(days=1)


def at(hour: float) -> str:
    return (DAY + dt.timedelta(hours=hour)).isoformat()


def session(instance_id: str, instance_type: str, start: float, end: float | None, **extra: Any) -> dict[str, Any]:
    price = PriceBook(POLICY.pricing).price(instance_type, extra.get("lifecycle", "on-demand"))
    return {
        "kind": "session",
        "instance_id": instance_id,
        "instance_type": instance_type,
        "gpus": price.gpus,
        "lifecycle": "on-demand",
        "team": "vision",
        "owner": "ana",
        "start": at(start),
        "end": at(end) if end is not None else None,
        "price_per_hour": price.per_hour,
        "on_demand_per_hour": price.on_demand,
        **extra,
    }


def ledger_decision(decision: Decision, when: float) -> dict[str, Any]:
    """An item exactly as ``DynamoLedger.record`` stores a decision."""
    return {"kind": "decision", "at": at(when), "event_id": "sweep", **decision.model_dump(mode="json")}


def idle_decision(
    instance_id: str, when: float, status: str, *, enforced: bool = False, window: int = 120
) -> dict[str, Any]:
    actions = [Stop(enforced=enforced)] if status == "acted" else []
    evidence: dict[str, Any] = {
        "status": status,
        "window_start": at(when - window / 60),
        "window_end": at(when),
        "max_gpu_utilization": 0.4,
    }
    verdict = "act" if status in ("warned", "acted") else "ok"
    return ledger_decision(
        Decision(policy="idle", verdict=verdict, resource=instance_id, actions=actions, evidence=evidence), when
    )


def test_price_book_table_spot_and_unpriced() -> None:
    book = PriceBook(POLICY.pricing)
    on_demand = book.price("p4d.24xlarge")
    assert (on_demand.per_hour, on_demand.gpus, on_demand.basis, on_demand.as_of) == (
        32.7726,
        8,
        "table on-demand",
        "2026-11-01",
    )
    spot = book.price("p4d.24xlarge", "spot")
    assert (spot.per_hour, spot.on_demand) == (11.57, 32.7726)
    unknown = book.price("g7.mystery")
    assert not unknown.priced and unknown.gpus == 1 and "unpriced" in unknown.basis


class FakePriceList:
    def __init__(self) -> None:
        self.calls = 0

    def on_demand(self, instance_type: str, region: str) -> tuple[float, int | None] | None:
        self.calls += 1
        return {"g5.xlarge": (1.1, 1), "g6e.12xlarge": (10.49, 4)}.get(instance_type)


def test_price_list_overrides_on_demand_only_when_enabled() -> None:
    listed = FakePriceList()
    off = PriceBook(POLICY.pricing, price_list=listed)
    assert off.price("g5.xlarge").per_hour == 1.006 and listed.calls == 0
    on = PriceBook(parse_policy({"pricing": {"use_price_list_api": True}}).pricing, price_list=listed)
    assert on.price("g5.xlarge").per_hour == 1.1 and on.price("g5.xlarge").basis == "price list on-demand"
    assert on.price("g5.xlarge", "spot").per_hour == 0.42  # Spot has no list price: the table's
    new_type = on.price("g6e.12xlarge")
    assert (new_type.per_hour, new_type.gpus) == (10.49, 4)
    assert on.price("g6e.12xlarge", "spot").per_hour == 10.49  # no spot price known: on-demand, an upper bound
    assert on.price("p5.48xlarge").per_hour == 55.04  # not listed: the table
    assert listed.calls == 3  # cached per type


def test_session_usage_is_clipped_to_the_period() -> None:
    item = session("i-1", "g5.12xlarge", -2, 3)  # started the day before
    usage = session_usage(item, DAY, NEXT)
    assert (usage.hours, usage.gpu_hours, round(usage.cost_usd or 0, 3)) == (3.0, 12.0, round(3 * 5.672, 3))
    open_item = session("i-2", "g5.xlarge", 20, None)
    assert session_usage(open_item, DAY, NEXT).hours == 4.0  # open sessions count up to the end of the period
    assert session_usage(session("i-3", "g5.xlarge", 30, 31), DAY, NEXT).hours == 0.0


def test_cost_table_by_team_owner_and_type() -> None:
    items = [
        session("i-1", "p4d.24xlarge", 0, 10, team="llm", owner="bo"),
        session("i-2", "g5.xlarge", 0, 24, team="vision", owner="ana"),
        session("i-3", "g5.xlarge", 12, None, team="vision", owner="cy", lifecycle="spot", price_per_hour=0.42),
        session("i-4", "g9.huge", 0, 5, team="", owner="dee", price_per_hour=None, gpus=None),
        {"kind": "decision", "policy": "idle"},
    ]
    by_team = gpu_hours_and_cost(items, DAY, NEXT, by="team")
    assert [(r.key, r.gpu_hours, r.cost_usd) for r in by_team] == [
        ("llm", 80.0, 327.73),
        ("vision", 36.0, round(24 * 1.006 + 12 * 0.42, 2)),
        ("unknown", 5.0, 0.0),
    ]
    assert by_team[2].unpriced_sessions == 1
    by_type = {r.key: r for r in gpu_hours_and_cost(items, DAY, NEXT, by="instance_type")}
    assert by_type["g5.xlarge"].sessions == 2 and by_type["g5.xlarge"].instance_hours == 36.0
    assert {r.key for r in gpu_hours_and_cost(items, DAY, NEXT, by="owner")} == {"ana", "bo", "cy", "dee"}
    with pytest.raises(ValueError, match="cannot group by"):
        gpu_hours_and_cost(items, DAY, NEXT, by="zone")  # type: ignore[arg-type]


def test_unpriced_session_is_priced_from_the_book_when_given() -> None:
    item = session("i-1", "g5.xlarge", 0, 2, price_per_hour=None, gpus=None)
    [row] = gpu_hours_and_cost([item], DAY, NEXT, prices=PriceBook(POLICY.pricing))
    assert (row.cost_usd, row.unpriced_sessions) == (2.01, 0)


def test_idle_hours_detected_and_reclaimed() -> None:
    items = [
        session("i-1", "g5.12xlarge", 0, 4),
        session("i-1", "g5.12xlarge", 9, None),  # restarted by its owner at 09:00
        idle_decision("i-1", 3.0, "busy"),  # busy: not idle
        idle_decision("i-1", 3.5, "warned"),  # idle 01:30-03:30
        idle_decision("i-1", 3.75, "idle"),  # idle 01:45-03:45 (overlaps)
        idle_decision("i-1", 4.0, "acted", enforced=True),  # stopped at 04:00, idle 02:00-04:00
        idle_decision("i-2", 10.0, "warned"),  # report-only neighbour, never acted on
        idle_decision("i-2", 10.5, "acted", enforced=False),
    ]
    summary = idle_hours(items, DAY, NEXT)
    rows = {r.instance_id: r for r in summary.instances}
    assert (rows["i-1"].idle_hours, rows["i-1"].idle_gpu_hours) == (2.5, 10.0)
    assert (rows["i-1"].reclaimed_hours, rows["i-1"].reclaimed_gpu_hours) == (5.0, 20.0)  # 04:00 until 09:00
    assert (rows["i-2"].idle_hours, rows["i-2"].reclaimed_hours, rows["i-2"].gpus) == (2.5, 0.0, 1)
    assert summary.detected_gpu_hours == 12.5 and summary.reclaimed_gpu_hours == 20.0
    money = savings(items, DAY, NEXT)
    assert money.reclaimed_hours == 5.0 and money.saved_usd == round(5 * 5.672, 2)
    # the report-only neighbour would have given back 10:30 to the end of the period, had its stop been enforced
    assert [(r.instance_id, r.reclaimed_hours, r.would_reclaim_hours) for r in money.instances] == [
        ("i-1", 5.0, 0.0),
        ("i-2", 0.0, 13.5),
    ]
    assert (summary.would_reclaim_hours, money.would_reclaim_hours) == (13.5, 13.5)


def test_terminated_instance_is_reclaimed_until_the_end_of_the_period() -> None:
    items = [idle_decision("i-9", 20.0, "acted", enforced=True)]
    items[0]["evidence"]["instance_type"] = "p3.2xlarge"
    summary = idle_hours(items, DAY, NEXT)
    assert summary.reclaimed_hours == 4.0
    no_price = savings(items, DAY, NEXT)
    assert (no_price.saved_usd, no_price.unpriced_instances) == (0.0, 1)
    priced = savings(items, DAY, NEXT, PriceBook(POLICY.pricing))
    assert priced.saved_usd == round(4 * 3.06, 2)
