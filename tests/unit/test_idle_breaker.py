"""The circuit breaker trips on a measurement failure's signature, not on a count, and its hold clears by itself."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from governor.domain.breaker import Breaker
from governor.domain.fleet import Instance
from governor.idle.domain import GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, IDLE_BREAKER_TAG, Mark, Series
from governor.idle.sweep import SweepPlan, sweep
from governor.policy import Policy, parse_policy

START = dt.datetime(2026, 11, 2, 0, 0, tzinfo=dt.UTC)
OUTAGE = START + dt.timedelta(hours=4)  # the failure starts at this minute on every node
HOURS = 12
Failure = Literal["flatline", "driver", "utilisation", "ended"]


def policy(**idle: Any) -> Policy:
    return parse_policy({"idle": {"enforce": True, "launch_grace_minutes": 0, **idle}})


def instance(instance_id: str, team: str = "research", **tags: str) -> Instance:
    return Instance(id=instance_id, type="g5.xlarge", state="running", launch_time=START, tags={"team": team, **tags})


def job(
    stop: dt.datetime | None,
    failure: Failure = "flatline",
    *,
    back: dt.datetime | None = None,
    power: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """A job on an A10G at 85% and ~250 W (memory 30 GB) until ``stop``; after it, by ``failure``:

    flatline: utilisation, memory and power read exactly 0 (the job runs on); driver: utilisation and memory read 0,
    power N/A; utilisation: only utilisation reads 0; ended: the job really ended (0.3%, model kept loaded, power at
    the A10G's idle draw, wandering). Busy again from ``back``.
    """
    times, util, memory, watts = [], [], [], []
    for minute in range(HOURS * 60):
        at = START + dt.timedelta(minutes=minute)
        after = stop is not None and at >= stop and (back is None or at < back)
        wobble = ((minute * 7 + seed * 13) % 11) / 10
        times.append(at.timestamp())
        if not after:
            util.append(85.0)
            memory.append(30_000.0)
            watts.append(250.0 + wobble)
        elif failure == "ended":
            util.append(0.3)
            memory.append(30_000.0)
            watts.append(26.0 + wobble)
        elif failure == "utilisation":
            util.append(0.0)
            memory.append(30_000.0)
            watts.append(250.0 + wobble)
        else:
            util.append(0.0)
            memory.append(0.0)
            watts.append(0.0 if failure == "flatline" else None)
    found = {GPU_UTILIZATION: Series(times, util), GPU_MEMORY_USED: Series(times, memory)}
    if power:
        kept = [(t, w) for t, w in zip(times, watts, strict=True) if w is not None]
        found[GPU_POWER] = Series([t for t, _ in kept], [w for _, w in kept])
    return found


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
        return sorted(o.instance.id for _, plan in self.plans for o in plan.outcomes if o.outcome == "acted")

    def acted_at(self) -> dict[str, dt.datetime]:
        return {o.instance.id: at for at, plan in self.plans for o in plan.outcomes if o.outcome == "acted"}

    def alarms(self) -> list[dt.datetime]:
        return [at for at, plan in self.plans if plan.alarm is not None]


def until_end(fleet: Fleet) -> Fleet:
    fleet.run(START + dt.timedelta(hours=HOURS))
    return fleet


def test_a_flatline_of_every_gpu_series_trips_once_and_holds_while_it_lasts() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(20)}
    fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
    assert fleet.acted() == []
    assert len(fleet.alarms()) == 1 and fleet.alarms()[0] <= OUTAGE + dt.timedelta(minutes=60)
    alarm = next(plan.alarm for _, plan in fleet.plans if plan.alarm is not None)
    assert alarm.severity == "critical" and alarm.rule == "idle.circuit-breaker"
    assert alarm.evidence["held_back"] == 20 and alarm.evidence["with_signs"] == 20
    assert "20 instances turned idle within 1 min" in alarm.reasons[0]
    assert any("exactly 0 MiB" in s for s in alarm.evidence["signs"]["i-00"])
    renewals = [plan.renewed for _, plan in fleet.plans if plan.renewed is not None]
    assert renewals and all(r.evidence["status"] == "renewed" for r in renewals)  # every renewal is recorded
    outcomes = {o.outcome for _, plan in fleet.plans for o in plan.outcomes}
    assert "warned" not in outcomes and "held" in outcomes  # owners are not told their job is idle
    held = next(o for _, plan in fleet.plans for o in plan.outcomes if o.outcome == "held")
    assert held.decision.evidence["breaker"]["signature"] and held.decision.evidence["breaker"]["signs"]
    assert fleet.breaker.open


def test_the_driver_losing_its_gpus_stops_nothing() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "driver", seed=n) for n in range(12)}
    fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
    assert fleet.acted() == [] and len(fleet.alarms()) == 1


def test_an_evening_lull_never_trips_and_every_pod_is_reclaimed_on_time() -> None:
    """Forty pods of one team lose their traffic over three hours, in bursts of three within two minutes."""
    lull = OUTAGE
    ends = {f"i-{n:02d}": lull + dt.timedelta(minutes=13 * (n // 3) + n % 3) for n in range(40)}
    data = {i: job(end, "ended", seed=n) for n, (i, end) in enumerate(ends.items())}
    shipped = until_end(Fleet([instance(i, "serving") for i in data], data, policy()))
    relaxed = until_end(Fleet([instance(i, "serving") for i in data], data, policy(breaker_min_instances=10_000)))
    assert shipped.alarms() == [] and shipped.acted() == sorted(data)
    assert shipped.acted_at() == relaxed.acted_at()


def test_a_hold_without_signs_ends_before_anyone_would_have_been_warned() -> None:
    """Jobs of three teams really ending in the same minute: held, then released with nothing lost."""
    data = {f"i-{n:02d}": job(OUTAGE, "ended", seed=n) for n in range(6)}
    data |= {f"i-busy-{n:02d}": job(None) for n in range(30)}
    teams = ["research", "vision", "speech"]
    fleet = until_end(Fleet([instance(i, teams[n % 3]) for n, i in enumerate(data)], data, policy()))
    relaxed = until_end(
        Fleet([instance(i, teams[n % 3]) for n, i in enumerate(data)], data, policy(breaker_min_instances=10_000))
    )
    alarm = next(plan.alarm for _, plan in fleet.plans if plan.alarm is not None)
    assert len(fleet.alarms()) == 1 and "across 3 unrelated teams" in alarm.reasons[0]
    rearmed = [plan.rearmed for _, plan in fleet.plans if plan.rearmed is not None]
    assert len(rearmed) == 1 and "hold ended" in rearmed[0].reasons[0]
    assert fleet.acted() == relaxed.acted() == sorted(i for i in data if "busy" not in i)
    assert fleet.acted_at() == relaxed.acted_at()  # released before the warning was due: nothing later


def test_a_fleet_share_going_quiet_in_one_minute_is_held_until_it_is_busy_again() -> None:
    """Only utilisation reads 0, no power published: indistinguishable per instance, so the share of the fleet that
    went quiet in the same minute is the signature; it holds while that share stays quiet and re-arms after."""
    back = OUTAGE + dt.timedelta(hours=3)
    data = {f"i-{n:02d}": job(OUTAGE, "utilisation", back=back, power=False) for n in range(10)}
    fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
    assert fleet.acted() == [] and len(fleet.alarms()) == 1
    rearmed = [at for at, plan in fleet.plans if plan.rearmed is not None]
    assert len(rearmed) == 1 and back <= rearmed[0] <= back + dt.timedelta(minutes=15)
    assert not fleet.breaker.open


def test_power_at_the_working_level_keeps_a_flatlined_gpu_busy_without_the_breaker() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "utilisation", seed=n) for n in range(10)}
    fleet = until_end(Fleet([instance(i) for i in data], data, policy(breaker_min_instances=10_000)))
    assert fleet.acted() == []
    busy = next(o for _, plan in fleet.plans[-1:] for o in plan.outcomes)
    assert busy.outcome == "busy" and "GPU power reached" in busy.decision.reasons[0]


def test_a_real_idle_instance_outside_the_correlated_set_is_still_reclaimed() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(10)}
    data["i-notebook"] = job(START + dt.timedelta(minutes=30), "ended")  # quiet long before the outage
    fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
    assert fleet.acted() == ["i-notebook"] and len(fleet.alarms()) == 1


def test_a_few_jobs_ending_together_are_not_an_anomaly() -> None:
    data = {f"i-{n:02d}": job(None) for n in range(20)}
    for n in range(4):  # 4 < breaker_min_instances 5
        data[f"i-{n:02d}"] = job(OUTAGE, "flatline", seed=n)
    fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
    assert fleet.acted() == [f"i-{n:02d}" for n in range(4)] and fleet.alarms() == []


def test_small_fleets_never_trip_the_breaker() -> None:
    for size in (1, 2):
        data = {f"i-{n}": job(OUTAGE, "flatline") for n in range(size)}
        fleet = until_end(Fleet([instance(i) for i in data], data, policy()))
        assert fleet.acted() == sorted(data) and fleet.alarms() == []


def test_the_operator_re_arms_and_the_held_instances_proceed_without_tripping_again() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(6)}
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(OUTAGE + dt.timedelta(minutes=60))
    assert fleet.breaker.open and len(fleet.breaker.held) == 6
    fleet.breaker = fleet.breaker.rearmed()  # what `governor idle rearm` writes
    assert not fleet.breaker.open and fleet.breaker.released == frozenset(data)
    fleet.run(START + dt.timedelta(hours=HOURS), at=OUTAGE + dt.timedelta(minutes=75))
    assert fleet.acted() == sorted(data) and len(fleet.alarms()) == 1


def test_a_release_tag_lets_one_held_instance_go() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(6)}
    instances = [instance(i) for i in data]
    instances[0] = instance("i-00", **{IDLE_BREAKER_TAG: "release"})
    fleet = until_end(Fleet(instances, data, policy()))
    assert fleet.acted() == ["i-00"] and len(fleet.alarms()) == 1


def test_the_state_survives_the_ledger_round_trip() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(6)}
    fleet = Fleet([instance(i) for i in data], data, policy())
    fleet.run(OUTAGE + dt.timedelta(minutes=60))
    item = fleet.breaker.to_item()
    again = Breaker.from_item(item)
    assert again == fleet.breaker and again.signature and again.hold_until and again.evidence["cohort"] == 6


def test_report_only_is_a_faithful_preview_with_one_critical_per_held_set() -> None:
    data = {f"i-{n:02d}": job(OUTAGE, "flatline", seed=n) for n in range(10)}
    data["i-notebook"] = job(START + dt.timedelta(minutes=30), "ended")
    enforcing = until_end(Fleet([instance(i) for i in data], data, policy()))
    preview = until_end(Fleet([instance(i) for i in data], data, policy(enforce=False)))
    assert len(preview.alarms()) == 1 and preview.alarms() == enforcing.alarms()

    def findings(fleet: Fleet) -> list[tuple[dt.datetime, str, str]]:
        return [(at, o.instance.id, o.outcome) for at, plan in fleet.plans for o in plan.outcomes if o.finding]

    # the same warnings and the same "stop" at the same times; the preview's instance keeps running and is
    # reported once, not again every sweep
    assert findings(preview) == findings(enforcing)
    titles = [o.finding for _, plan in preview.plans for o in plan.outcomes if o.finding]
    assert any("would be stopped at" in t for t in titles) and any("would be stopped now" in t for t in titles)
