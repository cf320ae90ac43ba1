"""Idle hours and savings from the decisions the real idle policy makes, recorded as the ledger stores them.

Guards the record shapes both sides rely on: if the idle policy's evidence or actions change, this fails.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.costs import idle_hours, savings
from governor.idle.decide import decide
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, Series
from governor.policy import parse_policy

DAY = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
POLICY = parse_policy({"idle": {"enforce": True, "warning_minutes": 30}})


def test_idle_policy_decisions_give_detected_and_reclaimed_gpu_hours_and_savings() -> None:
    instance = Instance(
        id="i-0abc1234def567890",
        type="g5.12xlarge",
        state="running",
        launch_time=DAY - dt.timedelta(days=1),
        tags={"team": "vision", "owner": "ana"},
    )
    minutes = [DAY.timestamp() + 60 * m for m in range(6 * 60)]
    signals = {
        GPU_UTILIZATION: Series(minutes, [0.5] * len(minutes)),
        GPU_MEMORY_USED: Series(minutes, [2.0e9] * len(minutes)),
    }
    items: list[dict[str, Any]] = [
        {
            "kind": "session",
            "instance_id": instance.id,
            "instance_type": "g5.12xlarge",
            "gpus": 4,
            "start": (DAY - dt.timedelta(days=1)).isoformat(),
            "end": (DAY + dt.timedelta(hours=2, minutes=30)).isoformat(),
            "on_demand_per_hour": 5.672,
            "price_per_hour": 5.672,
        },
        {
            "kind": "session",
            "instance_id": instance.id,
            "instance_type": "g5.12xlarge",
            "gpus": 4,
            "start": (DAY + dt.timedelta(hours=5)).isoformat(),  # the owner started it again
            "end": None,
            "on_demand_per_hour": 5.672,
            "price_per_hour": 5.672,
        },
    ]
    mark = None
    outcomes = []
    for sweep in range(3):  # 02:00 warned, 02:15 still idle, 02:30 stopped
        now = DAY + dt.timedelta(hours=2, minutes=15 * sweep)
        outcome = decide(instance, assess(instance, signals, POLICY, now), mark, POLICY, now)
        outcomes.append(outcome.outcome)
        items.append(
            {
                "kind": "decision",
                "at": now.isoformat(),
                "event_id": f"sweep-{sweep}",
                **outcome.decision.model_dump(mode="json"),
            }
        )
        mark = outcome.mark
    assert outcomes == ["warned", "idle", "acted"]
    summary = idle_hours(items, DAY, DAY + dt.timedelta(days=1))
    [row] = summary.instances
    assert (row.idle_hours, row.idle_gpu_hours) == (2.5, 10.0)  # window start 00:00 to the stop at 02:30
    assert (row.reclaimed_hours, row.reclaimed_gpu_hours) == (2.5, 10.0)  # stopped 02:30, restarted 05:00
    assert savings(items, DAY, DAY + dt.timedelta(days=1)).saved_usd == round(2.5 * 5.672, 2)
