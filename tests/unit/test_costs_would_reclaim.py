"""Report-only value: the hours a report-only idle policy's stop decisions would give back, from the same decision code
that enforcing runs, equal what the enforced run reclaims (docs/idle.md, "Idle figures")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.costs import idle_hours, savings
from governor.idle.decide import decide
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, Series
from governor.policy import parse_policy
from governor.report.render.format import would_reclaim_text
from governor.report.sections.cost import cost_section

DAY = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
END = DAY + dt.timedelta(hours=8)
INSTANCE = Instance(
    id="i-0abc1234def567890",
    type="g5.12xlarge",
    state="running",
    launch_time=DAY,
    tags={"team": "vision", "owner": "ana"},
)
PRICE = 5.672


def _session(end: dt.datetime | None) -> dict[str, Any]:
    return {
        "kind": "session",
        "instance_id": INSTANCE.id,
        "instance_type": "g5.12xlarge",
        "gpus": 4,
        "start": DAY.isoformat(),
        "end": end.isoformat() if end else None,
        "on_demand_per_hour": PRICE,
        "price_per_hour": PRICE,
    }


def _day(enforce: bool, busy_from: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Sweeps every 15 min from 02:00 on an instance idle from midnight (busy again from ``busy_from``), as the idle
    handler records them; enforcing stops the instance, so it leaves the sweeps and its session ends at the stop."""
    policy = parse_policy({"idle": {"enforce": enforce, "warning_minutes": 30}})
    minutes = [DAY.timestamp() + 60 * m for m in range(8 * 60)]
    busy_at = busy_from.timestamp() if busy_from else float("inf")
    signals = {
        GPU_UTILIZATION: Series(minutes, [90.0 if t >= busy_at else 0.5 for t in minutes]),
        GPU_MEMORY_USED: Series(minutes, [2.0e9] * len(minutes)),
    }
    items: list[dict[str, Any]] = []
    mark = None
    stopped: dt.datetime | None = None
    now = DAY + dt.timedelta(hours=2)
    while now <= END and stopped is None:
        outcome = decide(INSTANCE, assess(INSTANCE, signals, policy, now), mark, policy, now)
        items.append({"kind": "decision", "at": now.isoformat(), **outcome.decision.model_dump(mode="json")})
        if enforce and outcome.outcome == "acted":
            stopped = now
        mark = outcome.mark
        now += dt.timedelta(minutes=15)
    return [_session(stopped), *items]


def test_report_only_would_reclaim_equals_what_enforcing_reclaims() -> None:
    report_only, enforced = _day(enforce=False), _day(enforce=True)
    would = idle_hours(report_only, DAY, END)
    done = idle_hours(enforced, DAY, END)
    assert done.reclaimed_gpu_hours == 4 * 5.5  # stopped at 02:30 (warned 02:00, 30 min warning), idle to 08:00
    assert would.would_reclaim_gpu_hours == done.reclaimed_gpu_hours
    assert would.reclaimed_gpu_hours == 0 and done.would_reclaim_gpu_hours == 0
    assert (
        savings(report_only, DAY, END).would_save_usd == savings(enforced, DAY, END).saved_usd == round(5.5 * PRICE, 2)
    )
    # detected idle in the report-only run = idle before the stop decision (the enforced run's) + would reclaim
    assert would.detected_gpu_hours == done.detected_gpu_hours + would.would_reclaim_gpu_hours


def test_would_reclaim_ends_when_the_instance_is_next_judged_busy() -> None:
    items = _day(enforce=False, busy_from=DAY + dt.timedelta(hours=5))
    summary = idle_hours(items, DAY, END)
    assert summary.would_reclaim_hours == 2.75  # decided 02:30, the 05:15 sweep sees work again (the owner is back)


def test_held_decisions_over_the_blast_radius_would_reclaim_nothing() -> None:
    items = _day(enforce=False)
    for item in items:
        if (item.get("evidence") or {}).get("status") == "acted":
            item["evidence"]["status"] = "held"
    assert idle_hours(items, DAY, END).would_reclaim_hours == 0


def test_report_and_its_phrase_carry_the_would_reclaim_figures() -> None:
    section = cost_section(_day(enforce=False), parse_policy({}), DAY, END)
    assert (section.idle_would_act, section.would_reclaim_gpu_hours) == (1, 22.0)
    assert section.would_save_usd == round(5.5 * PRICE, 2)
    assert would_reclaim_text(section) == f"would stop 1 instance(s), would reclaim 22.0 GPU-hours, ${5.5 * PRICE:,.2f}"
