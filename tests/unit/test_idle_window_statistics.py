"""Fewer points, the same decisions (issue 50, item 3): the sweep's two-phase read decides every instance as the minute
points alone would.

On the generated fleets the idle benchmarks use (``bench.idle_quality``: the synthetic workload, its diurnal serving
fleet, a metrics outage), a sweep every 15 minutes is planned twice from the same stored minute data: once with every
instance's minute points (today's read), once in two phases, phase one's statistics computed from those minute points
as CloudWatch computes a one-bucket ``Maximum`` (the largest per-minute ``Maximum`` of the bucket's minutes). Every
instance's status, table row, verdict, rule, actions and next mark, and the breaker, must be the same.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

import pytest

from bench.idle_quality import inventory
from governor.domain.breaker import Breaker
from governor.domain.fleet import Instance
from governor.idle.domain import Mark, Series, lookback_start
from governor.idle.sweep import SweepPlan, sweep
from governor.idle.window_statistics import (
    JUDGED_FROM,
    StatisticsWindow,
    WindowMaxima,
    plainly_busy,
    statistics_signals,
    statistics_window,
)
from governor.policy import Policy, parse_policy
from governor_cli.sim import outages
from governor_cli.sim.workload import SIM_POWER, SyntheticInstance, Workload, diurnal, generate

INTERVAL = dt.timedelta(minutes=15)


def cloudwatch_maxima(signals: Mapping[str, Series], asked: tuple[str, ...], window: StatisticsWindow) -> dict:
    """What CloudWatch answers for one bucket ``[start, end)``: the maximum of the minute points in it, per signal."""
    found = {}
    for signal in asked:
        series = signals.get(signal)
        values = series.window(window.start.timestamp(), window.end.timestamp()) if series is not None else ()
        if values:
            found[signal] = max(values)
    return found


def _stored(signals: Mapping[str, Mapping[str, Series]], start: float, end: float) -> dict[str, dict[str, Series]]:
    """The minute points a GetMetricData read of ``[start, end)`` returns (the stored data, nothing after ``end``)."""
    read: dict[str, dict[str, Series]] = {}
    for instance_id, found in signals.items():
        read[instance_id] = {}
        for name, series in found.items():
            low, high = (len(series.window(-1, edge)) for edge in (start, end))
            read[instance_id][name] = Series(series.times[low:high], series.values[low:high])
    return read


def _same(minute: SweepPlan, two: SweepPlan, statistics: Mapping[str, WindowMaxima]) -> Counter[str]:
    assert [o.instance.id for o in minute.outcomes] == [o.instance.id for o in two.outcomes]
    rows: Counter[str] = Counter()
    for a, b in zip(minute.outcomes, two.outcomes, strict=True):
        said = a.instance.id
        assert (b.outcome, b.decision.evidence["status"]) == (a.outcome, a.decision.evidence["status"]), said
        assert b.row == a.row, said
        assert (b.decision.verdict, b.decision.rule, b.decision.severity) == (
            a.decision.verdict,
            a.decision.rule,
            a.decision.severity,
        ), said
        assert [x.model_dump() for x in b.decision.actions] == [x.model_dump() for x in a.decision.actions], said
        assert (b.mark, b.finding is None) == (a.mark, a.finding is None), said
        if said in statistics and b.row is not None:
            rows[b.row.name] += 1  # grace, exemptions and snoozes first, as the minute read's
            if b.decision.evidence["status"] == "busy":
                assert b.decision.evidence["judged_from"] == JUDGED_FROM
    assert two.breaker == minute.breaker
    assert (two.alarm is None) == (minute.alarm is None)
    if minute.alarm is not None and two.alarm is not None:
        assert (two.alarm.reasons, two.alarm.evidence) == (minute.alarm.reasons, minute.alarm.evidence)
    assert (two.held_back, two.deferred, two.fleet_size) == (minute.held_back, minute.deferred, minute.fleet_size)
    return rows


def both_ways(workload: Workload, policy: Policy, *, offset: int = 0, first_hour: float = 0.0) -> Counter[str]:
    """Sweep every 15 minutes (``offset`` seconds past the quarter hour), as the replay does (enforcing, checkpoints
    done by the next sweep, stopped instances gone), each sweep planned both ways and compared."""
    idle = policy.idle.model_copy(update={"enforce": True})
    policy = policy.model_copy(update={"idle": idle})
    signals = workload.signals()
    fleet: list[Instance] = sorted(inventory(workload).values(), key=lambda i: i.id)
    marks: dict[str, Mark] = {}
    breaker = Breaker()
    rows: Counter[str] = Counter()
    now = workload.start + INTERVAL + dt.timedelta(hours=first_hour, seconds=offset)
    while now <= workload.end:
        start = lookback_start(idle, now, INTERVAL).replace(second=0, microsecond=0).timestamp()
        end = now.replace(second=0, microsecond=0) + (dt.timedelta(minutes=1) if offset else dt.timedelta())
        read = _stored(signals, start, end.timestamp())
        minute = sweep(fleet, read, marks, policy, now, interval=INTERVAL, breaker=breaker)
        window = statistics_window(idle, now, INTERVAL)
        assert window is not None
        statistics = {}
        for instance in fleet:
            found = WindowMaxima(
                window, cloudwatch_maxima(read[instance.id], statistics_signals(instance, idle), window)
            )
            if plainly_busy(found, instance, idle):
                statistics[instance.id] = found
        rest = {i: s for i, s in read.items() if i not in statistics}
        two = sweep(fleet, rest, marks, policy, now, interval=INTERVAL, breaker=breaker, statistics=statistics)
        rows += _same(minute, two, statistics)
        rows["sweeps"] += 1
        rows["alarms"] += minute.alarm is not None
        rows["stalls found"] += sum(1 for o in minute.outcomes if o.decision.evidence["status"] == "stalled")
        for outcome in minute.outcomes:
            mark = outcome.mark
            if outcome.outcome == "checkpoint" and mark is not None:
                mark = replace(mark, checkpoint_status="Success")
            if mark is None:
                marks.pop(outcome.instance.id, None)
            else:
                marks[outcome.instance.id] = mark
        stopped = {o.instance.id for o in minute.outcomes if o.outcome == "acted"}
        fleet = [i for i in fleet if i.id not in stopped]
        breaker = minute.breaker
        now += INTERVAL
    return rows


SHIPPED = parse_policy({})
SHORT = parse_policy({"idle": {"window_minutes": 60, "warning_minutes": 30, "max_fleet_percent": 100}})
NO_STALL = parse_policy({"idle": {"stall_utilization_threshold": None, "cpu_utilization_threshold": 20}})
NO_BREAKER = parse_policy({"idle": {"breaker_fleet_percent": 100, "breaker_min_instances": 10_000}})


@pytest.mark.parametrize(
    ("name", "policy", "offset"),
    [("shipped", SHIPPED, 0), ("shipped", SHIPPED, 17), ("short", SHORT, 41), ("no-stall", NO_STALL, 0)],
)
def test_generated_fleets_get_the_same_decisions_both_ways(name: str, policy: Policy, offset: int) -> None:
    """The synthetic mix (training with stalls and pauses, serving, notebooks, idle boxes), with power and without."""
    with_power = both_ways(generate(60, hours=10, seed=3, power=True), policy, offset=offset)
    without = both_ways(generate(60, hours=10, seed=5), policy, offset=offset)
    seen = with_power + without
    assert seen["busy"] > 0  # phase one proved instances busy
    if name == "short":  # idle spells long enough to be warned, then work again: warnings withdrawn from statistics
        assert seen["busy, warning withdrawn"] > 0


def _hung(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """A hung job from ``minute``: utilisation pinned at 97%, memory still, power at the GPU's idle draw."""
    if instance.gpu_power_draw is None or instance.kind != "training":
        return instance
    idle_draw = SIM_POWER[instance.instance_type.split(".", 1)[0]][0]
    held = next((v for v in reversed(instance.gpu_memory_used[:minute]) if v is not None), 30_000.0)
    return dataclasses.replace(
        instance,
        gpu_utilization=[v if m < minute else 97.0 for m, v in enumerate(instance.gpu_utilization)],
        gpu_memory_used=[v if m < minute else held for m, v in enumerate(instance.gpu_memory_used)],
        gpu_power_draw=[v if m < minute else idle_draw + (m % 3) * 0.5 for m, v in enumerate(instance.gpu_power_draw)],
    )


def test_hung_jobs_are_found_stalled_both_ways() -> None:
    """A job busy at idle power is a stall, never "busy": phase one does not prove it busy (its power maximum is not
    above the idle ceiling), and its minute points find the stall."""
    fleet = outages.apply(generate(60, hours=6, seed=4, power=True), _hung, 120, lambda i: True)
    seen = both_ways(fleet, SHIPPED)
    assert seen["stalled"] == 0 and seen["busy"] > 0  # no stalled instance was judged from statistics
    assert seen["stalls found"] > 0


def test_the_diurnal_serving_fleet_and_its_breaker_get_the_same_decisions_both_ways() -> None:
    """The evening lull (an instance busy minutes ago is not among those that turned quiet), and a metrics outage
    that trips the breaker."""
    seen = both_ways(diurnal(hours=20), NO_BREAKER, first_hour=9.0)
    assert seen["busy"] > 0
    outage = outages.apply(generate(80, hours=6, seed=9, power=True), outages.flatline, 200, lambda i: True)
    tripped = both_ways(outage, SHIPPED)
    assert tripped["alarms"] > 0 and tripped["busy"] > 0
