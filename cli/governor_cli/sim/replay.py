"""The backtest's row-by-row replay: the idle sweep run every interval over recorded metrics, as if enforcing, with
the warning period, the rate limit and the circuit breaker applied. The columnar replay
(:mod:`governor_cli.sim.columnar`) gives the same result on large files.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from governor.domain.breaker import Breaker
from governor.domain.fleet import Instance
from governor.idle.domain import Mark, Signals
from governor.idle.sweep import SweepPlan, sweep
from governor.policy import Policy


@dataclass
class ReplayedInstance:
    """What the replayed policy did to one instance: warnings and the action with their times."""

    actions: list[tuple[dt.datetime, str]] = field(default_factory=list)
    stopped_at: dt.datetime | None = None
    gpu_hours_reclaimed: float = 0.0


@dataclass
class Replay:
    """The backtest: per-instance actions, verdict counts over every sweep, the sweeps the breaker held (and when it
    tripped), and how many sweeps deferred actions to the next one."""

    start: dt.datetime
    end: dt.datetime
    interval: dt.timedelta
    sweeps: int = 0
    instances: dict[str, ReplayedInstance] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    held_back_sweeps: list[dt.datetime] = field(default_factory=list)
    breaker_trips: list[dt.datetime] = field(default_factory=list)
    deferred_sweeps: int = 0

    def count(self, action: str) -> int:
        return sum(1 for r in self.instances.values() for _, kind in r.actions if kind == action)

    @property
    def gpu_hours_reclaimed(self) -> float:
        return sum(r.gpu_hours_reclaimed for r in self.instances.values())


def _fleet(
    signals: Mapping[str, Signals],
    start: dt.datetime,
    launch_times: Mapping[str, dt.datetime] | None,
    inventory: Mapping[str, Instance] | None,
) -> list[Instance]:
    """Each instance of the metrics, running, launched at its first sample unless told (``launch_times``)."""
    firsts = {
        instance_id: min((s.times[0] for s in series.values() if s.times), default=start.timestamp())
        for instance_id, series in signals.items()
    }
    known = inventory or {}
    return [
        replace(
            known.get(instance_id) or Instance(id=instance_id, type="unknown", state="running", launch_time=start),
            state="running",
            launch_time=(launch_times or {}).get(instance_id) or dt.datetime.fromtimestamp(first, dt.UTC),
        )
        for instance_id, first in sorted(firsts.items())
    ]


def _count(
    result: Replay, plan: SweepPlan, marks: dict[str, Mark], now: dt.datetime, gpus: Mapping[str, int] | None
) -> None:
    """One sweep's plan into the replay's counts, and the marks the next sweep reads."""
    result.sweeps += 1
    if plan.held_back:
        result.held_back_sweeps.append(now)
    if plan.alarm is not None:
        result.breaker_trips.append(now)
    if plan.deferred:
        result.deferred_sweeps += 1
    for outcome in plan.outcomes:
        instance_id = outcome.instance.id
        result.verdicts[outcome.outcome] = result.verdicts.get(outcome.outcome, 0) + 1
        record = result.instances[instance_id]
        mark = outcome.mark
        if outcome.outcome == "warned":
            record.actions.append((now, "warn"))
        elif outcome.outcome == "checkpoint" and mark is not None:
            mark = replace(mark, checkpoint_status="Success")
        elif outcome.outcome == "acted":
            kind = next(a.type for a in outcome.decision.actions if a.type in ("stop", "terminate"))
            record.actions.append((now, kind))
            record.stopped_at = now
            hours = (result.end - now).total_seconds() / 3600
            record.gpu_hours_reclaimed = round(hours * (gpus or {}).get(instance_id, 1), 4)
        if mark is None:
            marks.pop(instance_id, None)
        else:
            marks[instance_id] = mark


def replay(
    signals: Mapping[str, Signals],
    policy: Policy,
    *,
    start: dt.datetime,
    end: dt.datetime,
    interval: dt.timedelta,
    gpus: Mapping[str, int] | None = None,
    launch_times: Mapping[str, dt.datetime] | None = None,
    inventory: Mapping[str, Instance] | None = None,
) -> Replay:
    """Run the sweep every ``interval`` over recorded metrics, as if enforcing, with the warning period, the rate
    limit and the circuit breaker applied (nobody re-arms it by hand in a replay).

    An instance counts as gone after its first stop or terminate; its GPU-hours from then to ``end`` are
    reclaimed (times its GPU count, default 1). A checkpoint command is assumed to succeed by the next sweep.
    Launch time defaults to the instance's first sample, so the launch grace applies from there. ``inventory``
    gives what EC2 would say of an instance (type, tags: its GPU model's idle draw, its team); without it an
    instance has no known type, so its power is not judged.
    """
    enforcing = policy.model_copy(update={"idle": policy.idle.model_copy(update={"enforce": True})})
    fleet = _fleet(signals, start, launch_times, inventory)
    result = Replay(start=start, end=end, interval=interval)
    result.instances = {i.id: ReplayedInstance() for i in fleet}
    marks: dict[str, Mark] = {}
    breaker = Breaker()
    now = start + interval
    while now <= end:
        running = [i for i in fleet if result.instances[i.id].stopped_at is None]
        plan = sweep(running, signals, marks, enforcing, now, interval=interval, breaker=breaker)
        breaker = plan.breaker
        _count(result, plan, marks, now, gpus)
        now += interval
    return result
