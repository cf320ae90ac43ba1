"""A synthetic, seeded GPU workload: one-minute GPU/CPU samples per instance plus the ground truth of who works.

The five kinds are the cases an idle policy must get right:

- ``training``: high utilisation with data-loader stalls (a few minutes near 0%) and checkpoint pauses (5-15 min
  at 0% with the model still in memory); some jobs finish during the day and leave the box idle (reclaimable).
- ``inference``: a service with sparse traffic: short bursts every 5-60 minutes, near 0% in between. It is working
  all day, yet its hourly mean is under 5%, which is what fools the naive rule.
- ``notebook``: a user works for an hour or two, then leaves a model loaded in GPU memory (reclaimable).
- ``idle``: a truly idle box (reclaimable all day).
- ``unmonitored``: a training box whose CloudWatch agent stops reporting mid-day; it keeps working.

Typical use::

    from governor_cli.sim.workload import generate
    workload = generate(instances=150, hours=24, seed=7)
    workload.write_csv("metrics.csv")              # for `governor backtest --metrics metrics.csv`
    signals = workload.signals()                   # {instance_id: {"gpu_utilization": Series, ...}}
    workload.instances[0].working                  # ground truth per minute

Same seed, same arguments: the same workload, byte for byte.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from governor.idle.domain import CPU_UTILIZATION, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, Series

Kind = Literal["training", "inference", "notebook", "idle", "unmonitored", "diurnal"]
KINDS: tuple[Kind, ...] = ("training", "inference", "notebook", "idle", "unmonitored")
DEFAULT_MIX: dict[Kind, float] = {
    "training": 0.35,
    "inference": 0.25,
    "notebook": 0.15,
    "idle": 0.15,
    "unmonitored": 0.1,
}
DEFAULT_START = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
METRICS = (GPU_UTILIZATION, GPU_MEMORY_USED, CPU_UTILIZATION)
# GPU memory is in MB, as the CloudWatch agent publishes nvidia_smi_memory_used (nvidia-smi's MiB).
MIB = 1.0
GIB = 1024 * MIB
_TYPES: dict[Kind, tuple[tuple[str, int], ...]] = {
    "training": (("p4d.24xlarge", 8), ("g5.12xlarge", 4), ("p5.48xlarge", 8)),
    "inference": (("g5.xlarge", 1), ("g6.xlarge", 1), ("inf2.xlarge", 1)),
    "notebook": (("g5.2xlarge", 1), ("g4dn.xlarge", 1)),
    "idle": (("g5.xlarge", 1), ("g4dn.12xlarge", 4)),
    "unmonitored": (("g5.12xlarge", 4), ("p4d.24xlarge", 8)),
}


@dataclass(frozen=True)
class SyntheticInstance:
    """One instance's per-minute samples (``None``: the agent did not report) and whether it was working."""

    id: str
    kind: Kind
    instance_type: str
    gpus: int
    start: int
    gpu_utilization: list[float | None]
    gpu_memory_used: list[float | None]
    cpu_utilization: list[float | None]
    working: list[bool]
    # Power draw in W per minute (the agent's nvidia_smi_power_draw), when generated with ``power=True``.
    gpu_power_draw: list[float | None] | None = None
    team: str = ""

    @property
    def minutes(self) -> int:
        return len(self.working)

    def series(self) -> dict[str, Series]:
        """The instance's metrics in the shape the idle domain reads, gaps left out."""
        result: dict[str, Series] = {}
        for name, values in self._metric_lists().items():
            times = [float(self.start + 60 * m) for m, v in enumerate(values) if v is not None]
            result[name] = Series(times, [v for v in values if v is not None])
        return result

    def working_at(self, epoch: float) -> bool:
        """Ground truth: was the instance doing (or serving) useful work at this second? False outside the data."""
        minute = int((epoch - self.start) // 60)
        return 0 <= minute < self.minutes and self.working[minute]

    def rows(self) -> Iterator[tuple[int, str, float]]:
        """(epoch second, metric, value) for every reported sample."""
        for name, values in self._metric_lists().items():
            for minute, value in enumerate(values):
                if value is not None:
                    yield self.start + 60 * minute, name, value

    def _metric_lists(self) -> dict[str, list[float | None]]:
        found = {
            GPU_UTILIZATION: self.gpu_utilization,
            GPU_MEMORY_USED: self.gpu_memory_used,
            CPU_UTILIZATION: self.cpu_utilization,
        }
        if self.gpu_power_draw is not None:
            found[GPU_POWER] = self.gpu_power_draw
        return found


@dataclass(frozen=True)
class Workload:
    """A generated fleet: the instances, the first minute and the length, in minutes."""

    start: dt.datetime
    minutes: int
    instances: list[SyntheticInstance] = field(default_factory=list)

    @property
    def end(self) -> dt.datetime:
        return self.start + dt.timedelta(minutes=self.minutes)

    def by_id(self) -> dict[str, SyntheticInstance]:
        return {i.id: i for i in self.instances}

    def signals(self) -> dict[str, dict[str, Series]]:
        """Per instance id, the series the sweep would read from CloudWatch."""
        return {i.id: i.series() for i in self.instances}

    def write_csv(self, target: str | Path | IO[str], *, epoch: bool = False) -> int:
        """Write ``timestamp,instance_id,metric,value`` rows (ISO 8601 or epoch seconds); returns the row count.

        ``gpu_memory_used`` is in MB, the CloudWatch agent's unit and ``governor backtest``'s default ``--memory-unit``.
        """
        return write_rows(target, self.instances, epoch=epoch)


def write_rows(
    target: str | Path | IO[str], instances: Iterable[SyntheticInstance], *, epoch: bool = False, header: bool = True
) -> int:
    """The CSV of ``instances`` (any iterable, so a fleet can be written one instance at a time); returns the rows."""
    if isinstance(target, str | Path):
        with Path(target).open("w", encoding="utf-8", newline="") as handle:
            return write_rows(handle, instances, epoch=epoch, header=header)
    writer = csv.writer(target, lineterminator="\n")
    if header:
        writer.writerow(["timestamp", "instance_id", "metric", "value"])
    stamps: dict[int, str] = {}
    count = 0
    for instance in instances:
        for second, metric, value in instance.rows():
            stamp = stamps.get(second)
            if stamp is None:
                stamp = (
                    str(second) if epoch else dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
                stamps[second] = stamp
            text = (
                str(int(value))
                if metric == GPU_MEMORY_USED
                else f"{value:.2f}"
                if metric == GPU_POWER
                else f"{value:.1f}"
            )
            writer.writerow([stamp, instance.id, metric, text])
            count += 1
    return count


def _clip(value: float, low: float = 0.0, high: float = 100.0) -> float:
    return min(high, max(low, value))


def _training(
    rng: random.Random, minutes: int, finishes: bool
) -> tuple[list[float], list[float], list[float], list[bool]]:
    end = rng.randint(minutes // 3, minutes * 3 // 4) if finishes else minutes
    model = rng.uniform(20, 70) * GIB
    util: list[float] = []
    memory: list[float] = []
    cpu: list[float] = []
    working: list[bool] = []
    next_checkpoint = rng.randint(45, 90)
    pause = 0
    stall = 0
    for minute in range(minutes):
        if minute >= end:
            util.append(_clip(rng.gauss(0.3, 0.2)))
            memory.append(rng.uniform(250, 300) * MIB)
            cpu.append(_clip(rng.gauss(1.5, 0.5)))
            working.append(False)
            continue
        working.append(True)
        if pause == 0 and minute == next_checkpoint:
            pause = rng.randint(5, 15)
            next_checkpoint = minute + pause + rng.randint(45, 90)
        if stall == 0 and pause == 0 and rng.random() < 0.03:
            stall = rng.randint(1, 4)
        if pause:
            pause -= 1
            util.append(_clip(rng.gauss(0.5, 0.4)))
            cpu.append(_clip(rng.gauss(30, 5)))
        elif stall:
            stall -= 1
            util.append(_clip(rng.gauss(1.5, 1.0)))
            cpu.append(_clip(rng.gauss(95, 3)))
        else:
            util.append(_clip(rng.gauss(88, 6)))
            cpu.append(_clip(rng.gauss(60, 10)))
        memory.append(model + rng.uniform(-40, 40) * MIB)
    return util, memory, cpu, working


def _inference(rng: random.Random, minutes: int) -> tuple[list[float], list[float], list[float], list[bool]]:
    model = rng.uniform(6, 20) * GIB
    util = [0.0] * minutes
    minute = rng.randint(0, 30)
    while minute < minutes:
        for burst in range(rng.randint(1, 2)):
            if minute + burst < minutes:
                util[minute + burst] = rng.uniform(15, 60)
        minute += rng.randint(5, 60)
    util = [u if u else _clip(rng.gauss(0.3, 0.3)) for u in util]
    memory = [model + (rng.uniform(30, 120) if u > 5 else rng.uniform(0, 20)) * MIB for u in util]
    cpu = [_clip(rng.gauss(25 if u > 5 else 3, 2)) for u in util]
    return util, memory, cpu, [True] * minutes


def _notebook(rng: random.Random, minutes: int) -> tuple[list[float], list[float], list[float], list[bool]]:
    session = min(minutes, rng.randint(60, 180))
    model = rng.uniform(8, 16) * GIB
    util: list[float] = []
    memory: list[float] = []
    cpu: list[float] = []
    for minute in range(minutes):
        if minute < session:
            util.append(rng.uniform(10, 60) if rng.random() < 0.4 else _clip(rng.gauss(1, 1)))
            memory.append(model * min(1.0, (minute + 1) / 20) + rng.uniform(0, 500) * MIB)
            cpu.append(_clip(rng.gauss(15, 5)))
        else:
            util.append(_clip(rng.gauss(0.2, 0.2)))
            memory.append(model + rng.uniform(-10, 10) * MIB)
            cpu.append(_clip(rng.gauss(1, 0.4)))
    return util, memory, cpu, [m < session for m in range(minutes)]


def _idle(rng: random.Random, minutes: int) -> tuple[list[float], list[float], list[float], list[bool]]:
    util = [_clip(rng.gauss(0.1, 0.1)) for _ in range(minutes)]
    memory = [rng.uniform(0, 5) * MIB for _ in range(minutes)]
    cpu = [_clip(rng.gauss(0.8, 0.3)) for _ in range(minutes)]
    return util, memory, cpu, [False] * minutes


# Teams owning each kind of workload (the breaker counts unrelated teams turning idle together as a failure's sign).
TEAMS: dict[Kind, tuple[str, ...]] = {
    "training": ("research", "vision", "speech"),
    "inference": ("serving",),
    "notebook": ("data-science",),
    "idle": ("research", "data-science"),
    "unmonitored": ("research",),
    "diurnal": ("serving",),
}
# Simulated power: (idle W, W at full load) per instance family. Where the governor has a measured idle draw
# (governor.idle.power.MEASURED) the idle figure is that one; elsewhere about a tenth of the model's limit.
SIM_POWER: dict[str, tuple[float, float]] = {
    "g5": (25.58, 300.0),
    "g4dn": (26.78, 70.0),
    "g6": (7.0, 72.0),
    "p4d": (50.0, 400.0),
    "p5": (70.0, 700.0),
}


def with_power(instance: SyntheticInstance) -> SyntheticInstance:
    """The instance with a power series that follows its utilisation (idle draw plus load), as nvidia-smi reads it;
    drawn from its own random stream, so the other metrics stay byte for byte what they were."""
    family = instance.instance_type.split(".", 1)[0]
    if family not in SIM_POWER:
        return instance  # not an NVIDIA GPU (inf2: Inferentia): nvidia-smi publishes nothing
    idle, peak = SIM_POWER[family]
    rng = random.Random(f"{instance.id}:power")
    power: list[float | None] = []
    for util in instance.gpu_utilization:
        if util is None:
            power.append(None)
            continue
        load = (peak - idle) * util / 100 * rng.uniform(0.85, 1.0)
        power.append(round(max(1.0, idle + load + rng.gauss(0, 0.6)), 2))
    return dataclasses.replace(instance, gpu_power_draw=power)


def make_instance(kind: Kind, instance_id: str, start: int, minutes: int, rng: random.Random) -> SyntheticInstance:
    """One instance of ``kind`` starting at epoch second ``start``; ``rng`` makes it reproducible."""
    instance_type, gpus = rng.choice(_TYPES[kind])
    if kind == "training":
        util, memory, cpu, working = _training(rng, minutes, finishes=rng.random() < 0.4)
    elif kind == "inference":
        util, memory, cpu, working = _inference(rng, minutes)
    elif kind == "notebook":
        util, memory, cpu, working = _notebook(rng, minutes)
    elif kind == "idle":
        util, memory, cpu, working = _idle(rng, minutes)
    else:
        util, memory, cpu, working = _training(rng, minutes, finishes=False)
    gpu_util: list[float | None] = list(util)
    gpu_memory: list[float | None] = list(memory)
    if kind == "unmonitored":
        silent = rng.randint(minutes // 4, minutes // 2)
        flaky = max(0, silent - rng.randint(30, 90))
        for minute in range(flaky, minutes):
            if minute >= silent or rng.random() < 0.5:
                gpu_util[minute] = None
                gpu_memory[minute] = None
    return SyntheticInstance(
        id=instance_id,
        kind=kind,
        instance_type=instance_type,
        gpus=gpus,
        start=start,
        gpu_utilization=gpu_util,
        gpu_memory_used=gpu_memory,
        cpu_utilization=list(cpu),
        working=working,
        team=TEAMS[kind][int(instance_id[-3:], 16) % len(TEAMS[kind])],
    )


def _kinds(count: int, mix: Mapping[Kind, float], rng: random.Random) -> list[Kind]:
    total = sum(mix.values())
    shares = {kind: count * weight / total for kind, weight in mix.items()}
    counts = {kind: int(share) for kind, share in shares.items()}
    by_remainder = sorted(shares, key=lambda k: shares[k] - counts[k], reverse=True)
    for kind in by_remainder[: count - sum(counts.values())]:
        counts[kind] += 1
    kinds = [kind for kind in KINDS if kind in counts for _ in range(counts[kind])]
    rng.shuffle(kinds)
    return kinds


def generate(
    instances: int = 150,
    *,
    hours: float = 24.0,
    seed: int = 7,
    start: dt.datetime = DEFAULT_START,
    mix: Mapping[Kind, float] | None = None,
    power: bool = False,
) -> Workload:
    """A fleet of ``instances``, kinds in proportion to ``mix`` (default :data:`DEFAULT_MIX`), a sample a minute;
    with ``power`` each NVIDIA GPU also reports its power draw (the shipped agent configuration collects it)."""
    minutes = int(hours * 60)
    made = stream(instances, hours=hours, seed=seed, start=start, mix=mix)
    return Workload(start=start, minutes=minutes, instances=[with_power(i) if power else i for i in made])


def stream(
    instances: int = 150,
    *,
    hours: float = 24.0,
    seed: int = 7,
    start: dt.datetime = DEFAULT_START,
    mix: Mapping[Kind, float] | None = None,
    part: tuple[int, int] = (0, 1),
) -> Iterator[SyntheticInstance]:
    """The instances :func:`generate` makes, one at a time, so a fleet's month fits in memory one instance at a time.

    ``part=(k, n)`` yields only the k-th of n consecutive blocks of instances (to write a large fleet in parallel
    processes; the blocks' files, concatenated in order, are the whole fleet's file).
    """
    minutes = int(hours * 60)
    first = int(start.timestamp())
    kinds = _kinds(instances, mix or DEFAULT_MIX, random.Random(seed))
    block, blocks = part
    for index in range(block * len(kinds) // blocks, (block + 1) * len(kinds) // blocks):
        rng = random.Random(f"{seed}:{index}")
        yield make_instance(kinds[index], f"i-0{seed % 4096:03x}{index:013x}", first, minutes, rng)


DIURNAL_START = dt.datetime(2026, 11, 2, 6, 0, tzinfo=dt.UTC)


def diurnal(
    instances: int = 143,
    *,
    reclaimable: int = 89,
    hours: float = 36.0,
    seed: int = 7,
    start: dt.datetime = DIURNAL_START,
    power: bool = True,
) -> Workload:
    """A serving fleet's day and a half from 06:00: a morning ramp, a busy day, an evening decline over hours, a
    quiet night and the next morning's ramp (the shape of the production day issue 36 describes).

    ``reclaimable`` pods lose their traffic in the evening: requests thin out from 17:00 and each pod's last busy
    minute falls between 18:30 and 21:50, in bursts of up to about 22 pods within 11 minutes (a region drained, a
    client batch ending), then nothing until 06:00-08:00 the next morning: idle, with the model loaded, all night
    (the ground truth says reclaimable). The rest keep a trickle of requests all night (working). One team, one
    instance type: a lull is a workload's own rhythm, not a measurement failure.
    """
    rng = random.Random(f"diurnal:{seed}")
    minutes = int(hours * 60)
    first = int(start.timestamp())
    day_minute = (start.hour * 60 + start.minute) % 1440
    lull_open, lull_close = 18 * 60 + 30 - day_minute, 21 * 60 + 50 - day_minute  # minutes from the start
    # Bursts of last-busy minutes: cluster centres across the lull, sizes that sum to the reclaimable pods.
    ends: list[int] = []
    while len(ends) < reclaimable:
        size = min(reclaimable - len(ends), rng.choice((1, 2, 3, 5, 8, 13, 22)))
        centre = rng.randint(lull_open, lull_close - 11)
        ends += [centre + rng.randint(0, 10) for _ in range(size)]
    rng.shuffle(ends)
    made: list[SyntheticInstance] = []
    for index in range(instances):
        pod = random.Random(f"diurnal:{seed}:{index}")
        last = ends[index] if index < reclaimable else None
        morning = (24 * 60 - day_minute) + 6 * 60 + pod.randint(0, 120)  # the next day's first request
        util = [_clip(pod.gauss(0.3, 0.3)) for _ in range(minutes)]
        working = [True] * minutes
        minute = pod.randint(0, 20)
        while minute < minutes:
            hour = (day_minute + minute) / 60 % 24
            if last is not None and last < minute < morning:
                minute = morning
                continue
            if last is not None and minute == last:
                util[minute] = pod.uniform(15, 60)
                minute = last + 1
                continue
            util[minute] = pod.uniform(15, 60)
            # Day: a request every 1-4 min; evening: gaps grow; night (kept pods): every 10-40 min.
            if 8 <= hour < 17:
                gap = pod.randint(1, 4)
            elif 17 <= hour < 22:
                gap = pod.randint(2, 6 + int((hour - 17) * 4))
            else:
                gap = pod.randint(10, 40)
            if last is not None and minute < last < minute + gap:
                gap = last - minute
            minute += gap
        if last is not None:
            for m in range(last + 1, min(morning, minutes)):
                working[m] = False
        model = pod.uniform(6, 20) * GIB
        memory: list[float | None] = [
            model + (pod.uniform(30, 120) if u > 5 else pod.uniform(0, 20)) * MIB for u in util
        ]
        cpu: list[float | None] = [_clip(pod.gauss(25 if u > 5 else 3, 2)) for u in util]
        made.append(
            SyntheticInstance(
                id=f"i-0d{seed % 256:02x}{index:013x}",
                kind="diurnal",
                instance_type="g5.xlarge",
                gpus=1,
                start=first,
                gpu_utilization=list(util),
                gpu_memory_used=memory,
                cpu_utilization=cpu,
                working=working,
                team="serving",
            )
        )
    return Workload(start=start, minutes=minutes, instances=[with_power(i) if power else i for i in made])


def main(argv: list[str] | None = None) -> int:
    """``python -m governor_cli.sim.workload --out metrics.csv``: write a workload CSV for ``governor backtest``."""
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic GPU workload as a backtest CSV.")
    parser.add_argument("--instances", type=int, default=150)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--epoch", action="store_true", help="epoch-second timestamps instead of ISO 8601")
    parser.add_argument("--out", required=True, help="CSV file to write")
    args = parser.parse_args(argv)
    counts = dict.fromkeys(KINDS, 0)

    def counted() -> Iterator[SyntheticInstance]:
        for instance in stream(args.instances, hours=args.hours, seed=args.seed):
            counts[instance.kind] += 1
            yield instance

    rows = write_rows(args.out, counted(), epoch=args.epoch)  # one instance in memory at a time
    kinds = ", ".join(f"{k} {n}" for k, n in counts.items())
    print(
        f"{args.out}: {rows} samples, {args.instances} instances ({kinds}), "
        f"{args.hours:g} h from {DEFAULT_START.isoformat()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
