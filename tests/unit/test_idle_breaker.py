"""The circuit breaker: instances turning idle together are held with one critical finding, and it re-arms."""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.breaker import Breaker
from governor.domain.fleet import Instance
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, IDLE_BREAKER_TAG, Mark, Series, SweepPlan, sweep
from governor.policy import Policy, parse_policy

START = dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.UTC)
OUTAGE = START + dt.timedelta(hours=4)  # every GPU reads 0% from this minute on
HOURS = 12


def policy(**idle: Any) -> Policy:
    return parse_policy({"idle": {"enforce": True, "launch_grace_minutes": 0, **idle}})


def instance(instance_id: str, **tags: str) -> Instance:
    return Instance(id=instance_id, type="g5.xlarge", state="running", launch_time=START, tags=dict(tags))


def busy_until(stop: dt.datetime | None, *, back: dt.datetime | None = None) -> dict[str, Series]:
    """A training job at 85% until ``stop`` (0% after it, model still loaded), busy again from ``back``."""
    times, util = [], []
    for minute in range(HOURS * 60):
        at = START + dt.timedelta(minutes=minute)
        quiet = stop is not None and at >= stop and (back is None or at < back)
        times.append(at.timestamp())
        util.append(0.0 if quiet else 85.0)
    return {GPU_UTILIZATION: Series(times, util), GPU_MEMORY_USED: Series(times, [30_000.0] * len(times))}


class Fleet:
    """Runs the sweep every 15 minutes, keeping marks and the breaker as the handler does in the ledger."""

    def __init__(self, instances: list[Instance], data: dict[str, dict[str, Series]], p: Policy) -> None:
        self.instances, self.data, self.policy = instances, data, p
        self.marks: dict[str, Mark] = {}
        self.breaker = Breaker()
        self.plans: list[tuple[dt.datetime, SweepPlan]] = []

    def run(self, until: dt.datetime, at: dt.datetime = START + dt.timedelta(minutes=15)) -> None:
        while at <= until:
            plan = sweep(self.instances, self.data, self.marks, self.policy, at, breaker=self.breaker)
            self.breaker = plan.breaker
            self.marks = {o.instance.id: o.mark for o in plan.outcomes if o.mark is not None}
            gone = {o.instance.id for o in plan.acting() if o.outcome == "acted"}
            self.instances = [i for i in self.instances if i.id not in gone]
            self.plans.append((at, plan))
            at += dt.timedelta(minutes=15)

    def acted(self) -> list[str]:
        return [o.instance.id for _, plan in self.plans for o in plan.outcomes if o.outcome == "acted"]

    def alarms(self) -> list[dt.datetime]:
        return [at for at, plan in self.plans if plan.alarm is not None]


def test_an_outage_that_zeroes_every_gpu_at_once_trips_once_and_nothing_is_stopped() -> None:
    fleet = Fleet(
        [instance(f"i-{n:02d}") for n in range(20)], {f"i-{n:02d}": busy_until(OUTAGE) for n in range(20)}, policy()
    )
    fleet.run(START + dt.timedelta(hours=HOURS))
    assert fleet.acted() == []
    # one alarm, before any warning could go out (at +90 min)
    assert len(fleet.alarms()) == 1 and fleet.alarms()[0] <= OUTAGE + dt.timedelta(minutes=60)
    alarm = next(plan.alarm for _, plan in fleet.plans if plan.alarm is not None)
    assert alarm.severity == "critical" and alarm.rule == "idle.circuit-breaker"
    assert alarm.evidence["held_back"] == 20 and "20 of 20" in alarm.reasons[0]
    outcomes = {o.outcome for _, plan in fleet.plans for o in plan.outcomes}
    assert "warned" not in outcomes and "held" in outcomes  # owners are not told their job is idle
    assert fleet.breaker.open


def test_it_re_arms_by_itself_once_the_metrics_come_back() -> None:
    back = OUTAGE + dt.timedelta(hours=3)
    data = {f"i-{n:02d}": busy_until(OUTAGE, back=back) for n in range(10)}
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(START + dt.timedelta(hours=HOURS))
    assert fleet.acted() == [] and len(fleet.alarms()) == 1
    rearmed = [at for at, plan in fleet.plans if plan.rearmed is not None]
    assert len(rearmed) == 1 and back <= rearmed[0] <= back + dt.timedelta(minutes=15)
    assert not fleet.breaker.open


def test_a_real_idle_instance_outside_the_correlated_set_is_still_reclaimed() -> None:
    data = {f"i-{n:02d}": busy_until(OUTAGE) for n in range(10)}
    data["i-notebook"] = busy_until(START + dt.timedelta(minutes=30))  # quiet long before the outage
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(START + dt.timedelta(hours=HOURS))
    assert fleet.acted() == ["i-notebook"]
    assert len(fleet.alarms()) == 1


def test_a_few_jobs_ending_together_are_not_an_anomaly() -> None:
    data = {f"i-{n:02d}": busy_until(None) for n in range(20)}
    for n in range(4):  # 4 < breaker_min_instances 5, and 20% of 20 is not more than 25%
        data[f"i-{n:02d}"] = busy_until(OUTAGE)
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(START + dt.timedelta(hours=HOURS))
    assert sorted(fleet.acted()) == [f"i-{n:02d}" for n in range(4)] and fleet.alarms() == []


def test_small_fleets_never_trip_the_breaker() -> None:
    for size in (1, 2):
        data = {f"i-{n}": busy_until(OUTAGE) for n in range(size)}
        fleet = Fleet([instance(i) for i in data], data, policy())
        fleet.run(START + dt.timedelta(hours=HOURS))
        assert sorted(fleet.acted()) == sorted(data) and fleet.alarms() == []


def test_the_operator_re_arms_and_the_held_instances_proceed_without_tripping_again() -> None:
    data = {f"i-{n:02d}": busy_until(OUTAGE) for n in range(6)}
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(OUTAGE + dt.timedelta(minutes=60))
    assert fleet.breaker.open and len(fleet.breaker.held) == 6
    fleet.breaker = fleet.breaker.rearmed()  # what `governor idle rearm` writes
    assert not fleet.breaker.open and fleet.breaker.released == frozenset(data)
    fleet.run(START + dt.timedelta(hours=HOURS), at=OUTAGE + dt.timedelta(minutes=75))
    assert sorted(fleet.acted()) == sorted(data) and len(fleet.alarms()) == 1


def test_a_release_tag_lets_one_held_instance_go() -> None:
    data = {f"i-{n:02d}": busy_until(OUTAGE) for n in range(6)}
    instances = [instance(i) for i in data]
    instances[0] = instance("i-00", **{IDLE_BREAKER_TAG: "release"})
    fleet = Fleet(instances, data, policy())
    fleet.run(START + dt.timedelta(hours=HOURS))
    assert fleet.acted() == ["i-00"] and len(fleet.alarms()) == 1


def test_report_only_is_a_faithful_preview_with_one_critical_per_held_set() -> None:
    data = {f"i-{n:02d}": busy_until(OUTAGE) for n in range(10)}
    data["i-notebook"] = busy_until(START + dt.timedelta(minutes=30))
    enforcing = Fleet([instance(i) for i in data], data, policy())
    preview = Fleet([instance(i) for i in data], data, policy(enforce=False))
    until = START + dt.timedelta(hours=HOURS)
    enforcing.run(until)
    preview.run(until)
    assert len(preview.alarms()) == 1 and preview.alarms() == enforcing.alarms()

    def findings(fleet: Fleet) -> list[tuple[dt.datetime, str, str]]:
        return [(at, o.instance.id, o.outcome) for at, plan in fleet.plans for o in plan.outcomes if o.finding]

    # the same warnings and the same "stop" at the same times; the preview's instance keeps running and is
    # reported once, not again every sweep
    assert findings(preview) == findings(enforcing)
    titles = [o.finding for _, plan in preview.plans for o in plan.outcomes if o.finding]
    assert any("would be stopped at" in t for t in titles) and any("would be stopped now" in t for t in titles)
