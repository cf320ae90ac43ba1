"""Idle policy quality: GPU-hours reclaimed and false stops, against the naive rule, on the synthetic workload.

Run: ``.venv/bin/python -m bench.idle_quality [--instances 150] [--hours 24] [--seed 7]``

The workload generator knows, minute by minute, whether each instance was doing useful work (training, including
its stalls and checkpoint pauses; serving, including the quiet minutes between requests). A stop is *false* when the
instance was working at that moment. Reclaimed GPU-hours count only the idle minutes after a stop; the working
minutes after a false stop are reported as work stopped.

The naive rule is the usual one: mean GPU utilisation under 5% for two consecutive 3600 s periods, then stop; a
period without data counts as 0% (missing data read as idle). The governor runs its real decision code through
``replay`` (a sweep every 15 minutes, warning period applied) with the shipped policy (rate limit 10 / 20%, circuit
breaker 25% / 5) and relaxed (rate limit 1000 / 100%, breaker off).

Two more scenarios: a metrics outage (every instance runs a job all day; at ``--outage-hour`` every GPU's
utilisation reads 0 from the same minute on, as after a driver or agent failure) and small fleets of 1, 2 and 5
reclaimable instances (abandoned notebooks and idle boxes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field

from governor.domain.fleet import Instance
from governor.idle.domain import GPU_UTILIZATION, Series
from governor.policy import Policy, parse_policy
from governor_cli.sim import outages
from governor_cli.sim.replay import replay
from governor_cli.sim.workload import SyntheticInstance, Workload, diurnal, generate

SHIPPED: dict[str, object] = {}
# Relaxed: no rate limit and no breaker (it never finds 10,000 instances turning idle together in these fleets).
NO_BREAKER: dict[str, object] = {"breaker_fleet_percent": 100, "breaker_min_instances": 10_000}
RELAXED: dict[str, object] = {"max_actions_per_sweep": 1000, "max_fleet_percent": 100, **NO_BREAKER}
SMALL_FLEETS = (1, 2, 5)


@dataclass
class Score:
    name: str
    stops: int = 0
    false_stops: int = 0
    reclaimed: float = 0.0
    work_stopped: float = 0.0
    held_back_sweeps: int = 0
    breaker_trips: int = 0
    seconds: float = 0.0
    false_by_kind: Counter[str] = field(default_factory=Counter)
    stops_by_kind: Counter[str] = field(default_factory=Counter)

    def add(self, instance: SyntheticInstance, stop_epoch: float) -> None:
        first = max(0, int((stop_epoch - instance.start) // 60))
        after = instance.working[first:]
        working = sum(after)
        self.stops += 1
        self.stops_by_kind[instance.kind] += 1
        self.reclaimed += (len(after) - working) * instance.gpus / 60
        self.work_stopped += working * instance.gpus / 60
        if instance.working_at(stop_epoch):
            self.false_stops += 1
            self.false_by_kind[instance.kind] += 1


def naive_stop(
    series: Series,
    start: float,
    end: float,
    *,
    period_seconds: int = 3600,
    threshold: float = 5.0,
    periods: int = 2,
) -> float | None:
    """The usual rule, for comparison only: mean utilisation under 5% for two consecutive hours, then stop.

    Periods run from ``start`` to ``end``; a period with no data counts as 0% (missing data read as idle, as
    alarms with ``treat_missing_data: breaching`` do). Returns the epoch second of the stop, or None.
    """
    below = 0
    edge = start
    while edge + period_seconds <= end:
        values = series.window(edge, edge + period_seconds)
        mean = sum(values) / len(values) if values else 0.0
        below = below + 1 if mean < threshold else 0
        edge += period_seconds
        if below >= periods:
            return edge
    return None


def score_naive(workload: Workload) -> Score:
    began = time.perf_counter()
    score = Score("naive: mean < 5% for 2 x 3600 s")
    start, end = workload.start.timestamp(), workload.end.timestamp()
    for instance in workload.instances:
        stop = naive_stop(instance.series()[GPU_UTILIZATION], start, end)
        if stop is not None:
            score.add(instance, stop)
    score.seconds = time.perf_counter() - began
    return score


def inventory(workload: Workload) -> dict[str, Instance]:
    """What EC2 says of each generated instance: its type (the GPU model's idle draw) and its team tag."""
    return {
        i.id: Instance(
            id=i.id, type=i.instance_type, state="running", launch_time=workload.start, tags={"team": i.team}
        )
        for i in workload.instances
    }


def score_governor(workload: Workload, policy: Policy, name: str) -> Score:
    began = time.perf_counter()
    by_id = workload.by_id()
    result = replay(
        workload.signals(),
        policy,
        start=workload.start,
        end=workload.end,
        interval=dt.timedelta(minutes=15),
        gpus={i.id: i.gpus for i in workload.instances},
        inventory=inventory(workload),
    )
    score = Score(name, held_back_sweeps=len(result.held_back_sweeps), breaker_trips=len(result.breaker_trips))
    for instance_id, record in result.instances.items():
        if record.stopped_at is not None:
            score.add(by_id[instance_id], record.stopped_at.timestamp())
    score.seconds = time.perf_counter() - began
    return score


SHAPES: dict[str, tuple[str, outages.Shape]] = {
    "flatline": ("every GPU series reads exactly 0 (utilisation, memory, power)", outages.flatline),
    "agent-stops": ("the CloudWatch agent stops: no GPU samples", outages.agent_stops),
    "driver-off-bus": ("the driver loses the GPU: utilisation and memory read 0, power N/A", outages.driver_off_bus),
    "team-crash": ("one team's training jobs crash together (really idle afterwards)", outages.crash),
    "utilisation-only": (
        "only utilisation reads 0; memory and power keep their real values",
        outages.utilisation_flatline,
    ),
}


def outage(workload: Workload, hour: float, shape: str) -> Workload:
    """The fleet with ``shape`` laid over it from ``hour``: every instance, or the vision team's training jobs."""
    _, apply = SHAPES[shape]
    if shape == "team-crash":
        return outages.apply(
            workload, apply, int(hour * 60), lambda i: i.kind == "training" and i.team == "vision" and all(i.working)
        )
    return outages.apply(workload, apply, int(hour * 60), lambda i: True)


def _table(title: str, scores: list[Score]) -> list[str]:
    lines = [
        title,
        f"  {'policy':50} {'stops':>5} {'false':>5} {'GPU-h reclaimed':>15} {'GPU-h of work stopped':>21} "
        f"{'held sweeps':>11} {'trips':>5} {'time':>6}",
    ]
    for s in scores:
        lines.append(
            f"  {s.name:50} {s.stops:5d} {s.false_stops:5d} {s.reclaimed:15.1f} {s.work_stopped:21.1f} "
            f"{s.held_back_sweeps:11d} {s.breaker_trips:5d} {s.seconds:5.1f}s"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=150)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--outage-hour", type=float, default=8.0, help="hour of the trace the metrics outage starts")
    args = parser.parse_args()
    workload = generate(args.instances, hours=args.hours, seed=args.seed, power=True)
    kinds = Counter(i.kind for i in workload.instances)
    idle_hours = sum((i.minutes - sum(i.working)) * i.gpus / 60 for i in workload.instances)
    print(
        f"synthetic workload: {len(workload.instances)} instances x {args.hours:g} h, seed {args.seed} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})"
    )
    print(f"idle GPU-hours in the trace (the most any policy could reclaim): {idle_hours:.1f}\n")
    shipped_policy, relaxed_policy = parse_policy({"idle": SHIPPED}), parse_policy({"idle": RELAXED})
    scores = [
        score_naive(workload),
        score_governor(workload, shipped_policy, "governor, shipped (rate 10 / 20%, breaker on)"),
        score_governor(workload, relaxed_policy, "governor, relaxed (rate 1000 / 100%, no breaker)"),
    ]
    print("\n".join(_table("synthetic workload", scores)))
    print()
    for s in scores:
        stops = ", ".join(f"{k} {v}" for k, v in sorted(s.stops_by_kind.items())) or "none"
        false = ", ".join(f"{k} {v}" for k, v in sorted(s.false_by_kind.items())) or "none"
        print(f"{s.name}: stops by kind: {stops}; false stops by kind: {false}")
    naive, shipped, relaxed = scores
    if naive.stops:
        print(f"\nnaive rule: {100 * naive.false_stops / naive.stops:.0f}% of its stops hit a working machine")
    share = 100 * shipped.reclaimed / max(relaxed.reclaimed, 1e-9)
    met = share >= 95 and shipped.false_stops == 0
    print(
        f"shipped / relaxed GPU-h reclaimed: {shipped.reclaimed:.1f} / {relaxed.reclaimed:.1f} = {share:.1f}% "
        f"(target >= 95% with 0 false stops: {'met' if met else 'NOT met'})\n"
    )

    fleet = diurnal(seed=args.seed)
    lull = [
        score_naive(fleet),
        score_governor(fleet, shipped_policy, "governor, shipped (rate 10 / 20%, breaker on)"),
        score_governor(fleet, relaxed_policy, "governor, relaxed (rate 1000 / 100%, no breaker)"),
        score_governor(fleet, parse_policy({"idle": NO_BREAKER}), "governor, breaker off (rate 10 / 20%)"),
    ]
    reclaimable = sum(1 for i in fleet.instances if not all(i.working))
    print(
        "\n".join(
            _table(
                f"diurnal serving fleet: {len(fleet.instances)} pods x {fleet.minutes // 60} h from 06:00, "
                f"{reclaimable} lose their traffic between 18:30 and 21:50 (one team, g5.xlarge, power published)",
                lull,
            )
        )
    )
    share = 100 * lull[1].reclaimed / max(lull[2].reclaimed, 1e-9)
    met = share >= 95 and lull[1].false_stops == 0
    print(
        f"diurnal: shipped / relaxed GPU-h reclaimed: {lull[1].reclaimed:.1f} / {lull[2].reclaimed:.1f} = {share:.1f}% "
        f"(target >= 95% with 0 false stops: {'met' if met else 'NOT met'}); stops {lull[1].stops} / {lull[2].stops}"
    )
    alone = 100 * lull[1].reclaimed / max(lull[3].reclaimed, 1e-9)
    print(
        f"diurnal: shipped / breaker off (rate limit as shipped): {lull[1].reclaimed:.1f} / {lull[3].reclaimed:.1f} = "
        f"{alone:.1f}% (what the breaker costs; the rest of the gap to relaxed is the rate limit)\n"
    )
    for shape, (what, _) in SHAPES.items():
        hit = outage(workload, args.outage_hour, shape)
        scores = [
            score_naive(hit),
            score_governor(hit, shipped_policy, "governor, shipped (rate 10 / 20%, breaker on)"),
            score_governor(hit, relaxed_policy, "governor, relaxed (rate 1000 / 100%, no breaker)"),
        ]
        print("\n".join(_table(f"outage {shape} from hour {args.outage_hour:g}: {what}", scores)))
        print(
            f"outage {shape}: false stops naive / shipped / relaxed: {scores[0].false_stops} / "
            f"{scores[1].false_stops} / {scores[2].false_stops} (target for shipped: 0)\n"
        )

    for size in SMALL_FLEETS:
        small = generate(size, hours=args.hours, seed=args.seed, mix={"notebook": 1, "idle": 1})
        small_scores = [
            score_governor(small, shipped_policy, "governor, shipped"),
            score_governor(small, relaxed_policy, "governor, relaxed"),
        ]
        kinds_small = ", ".join(f"{k} {v}" for k, v in sorted(Counter(i.kind for i in small.instances).items()))
        print("\n".join(_table(f"small fleet of {size} ({kinds_small})", small_scores)))
    print()


if __name__ == "__main__":
    main()
