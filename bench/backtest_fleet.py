"""The backtest at fleet scale through the path a user runs: ``governor backtest --metrics FILE`` in a fresh process.

Run: ``.venv/bin/python -m bench.backtest_fleet --instances 10000 --days 30 --dir /tmp/fleet [--keep] [--csv]``

1. Writes a synthetic fleet's metrics as a Parquet file the way ``governor backtest --from-cloudwatch --save``
   writes one (one row group per 4 hours of the whole fleet, in time order, zstd): training jobs (stalls,
   checkpoint pauses, 40% ending during the month), sparse inference servers, notebooks used a few hours a day,
   idle boxes and boxes whose agent stops reporting, one sample a minute of GPU utilisation, GPU memory and CPU.
   The generator is vectorised (NumPy, seeded), so writing the month is minutes, not the row-by-row generator's
   half hour; its time is printed and is not part of any figure.
2. Runs ``python -m governor_cli backtest --metrics FILE --json`` under ``/usr/bin/time -v``: wall time, user and
   system CPU seconds, peak resident memory of the whole process, end to end from the file (reading, validating,
   the replay and the report). Nothing is prepared for it: no store, no cache.
3. With ``--csv``, the same for the CSV of a fleet small enough to fit beside it (``--csv-instances``, default 1,000
   for the same days), to give the CSV reader's cost per row at scale; the 10,000 x 30-day CSV (about 75 GiB) is
   not written, so any CSV figure at that size is an extrapolation and printed as one.

Files are deleted after measuring unless ``--keep``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

START = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
METRICS = ["gpu_utilization", "gpu_memory_used", "cpu_utilization"]
GROUP = 240
KINDS = ("training", "inference", "notebook", "idle", "unmonitored")
MIX = (0.35, 0.25, 0.15, 0.15, 0.10)


class Fleet:
    """Per-instance parameters drawn once; each 4-hour block of every instance's samples drawn from them."""

    def __init__(self, instances: int, minutes: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        self.n, self.minutes, self.seed = instances, minutes, seed
        self.kind = rng.choice(len(KINDS), size=instances, p=MIX)
        self.ids = [f"i-0{seed % 4096:03x}{k:013x}" for k in range(instances)]
        self.model = rng.uniform(6, 70, instances) * 1024  # MB loaded
        self.ends = np.where(
            (self.kind == 0) & (rng.random(instances) < 0.4), rng.integers(minutes // 10, minutes, instances), minutes
        )
        self.silent = np.where(self.kind == 4, rng.integers(minutes // 4, minutes, instances), minutes)
        self.phase = rng.integers(0, 70, instances)
        self.session = rng.integers(9 * 60, 11 * 60, instances)  # notebooks: first minute of the day's session
        self.length = rng.integers(60, 180, instances)

    def block(self, first: int, last: int) -> np.ndarray:
        """[metric, instance, minute] for minutes ``first`` .. ``last`` - 1 (NaN: no sample)."""
        rng = np.random.default_rng([self.seed, first])
        width = last - first
        minute = np.arange(first, last)[None, :]
        shape = (self.n, width)
        kind = self.kind[:, None]
        noise = rng.normal(0.3, 0.2, shape).clip(0, 100)
        util = noise.copy()
        training = (kind == 0) | (kind == 4)
        running = training & (minute < self.ends[:, None])
        pause = ((minute + self.phase[:, None]) % 70) < 10
        stall = rng.random(shape) < 0.03
        busy = rng.normal(88, 6, shape).clip(0, 100)
        util = np.where(running & ~pause & ~stall, busy, util)
        util = np.where(running & stall & ~pause, rng.normal(1.5, 1.0, shape).clip(0, 100), util)
        requests = (kind == 1) & (rng.random(shape) < 1 / 30)
        util = np.where(requests, rng.uniform(15, 60, shape), util)
        day_minute = minute % 1440
        session = (
            (kind == 2) & (day_minute >= self.session[:, None]) & (day_minute < (self.session + self.length)[:, None])
        )
        util = np.where(session & (rng.random(shape) < 0.4), rng.uniform(10, 60, shape), util)
        memory = np.where(kind == 3, rng.uniform(0, 5, shape), self.model[:, None] + rng.uniform(-20, 20, shape))
        memory = np.where(training & ~running, rng.uniform(250, 300, shape), memory)
        memory = np.where(requests, memory + rng.uniform(30, 120, shape), memory)
        cpu = np.where(util > 5, rng.normal(40, 10, shape), rng.normal(2, 0.5, shape)).clip(0, 100)
        out = np.stack([np.round(util, 1), np.trunc(memory), np.round(cpu, 1)])
        silent = (minute >= self.silent[:, None]) & (kind == 4)
        out[0][silent] = np.nan
        out[1][silent] = np.nan
        return out

    def groups(self) -> Iterator[tuple[Any, Any, Any, Any]]:
        base = int(START.timestamp())
        for first in range(0, self.minutes, GROUP):
            last = min(self.minutes, first + GROUP)
            block = self.block(first, last)
            metric, inst, minute = np.nonzero(~np.isnan(block))
            yield (
                base + (first + minute).astype(np.int64) * 60,
                (inst.astype(np.int32), self.ids),
                (metric.astype(np.int8), METRICS),
                block[metric, inst, minute],
            )

    def write_csv(self, path: Path) -> int:
        """The same samples as CSV, in time order (one block at a time)."""
        rows = 0
        with path.open("w", encoding="utf-8") as handle:
            handle.write("timestamp,instance_id,metric,value\n")
            for seconds, (inst, ids), (metric, names), values in self.groups():
                stamps = {
                    s: dt.datetime.fromtimestamp(s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    for s in np.unique(seconds).tolist()
                }
                lines = [
                    f"{stamps[s]},{ids[i]},{names[m]},{int(v) if m == 1 else f'{v:.1f}'}\n"
                    for s, i, m, v in zip(
                        seconds.tolist(), inst.tolist(), metric.tolist(), values.tolist(), strict=True
                    )
                ]
                handle.writelines(lines)
                rows += len(lines)
        return rows


def measure(path: Path) -> dict[str, Any]:
    """``governor backtest --metrics path --json`` in a fresh process under /usr/bin/time -v."""
    env = {**os.environ, "PYTHONPATH": "lambdas:cli:."}
    command = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "governor_cli",
        "backtest",
        "--metrics",
        str(path),
        "--json",
    ]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"backtest failed ({done.returncode}): {done.stderr[-2000:]}")
    stats = dict(re.findall(r"^\s*(.+?): (.+)$", done.stderr, flags=re.MULTILINE))
    summary = json.loads(done.stdout)["summary"]
    return {
        "wall": wall,
        "user": float(stats["User time (seconds)"]),
        "sys": float(stats["System time (seconds)"]),
        "rss_mib": int(stats["Maximum resident set size (kbytes)"]) / 1024,
        "summary": {k: summary[k] for k in ("instances", "sweeps", "warnings", "stops", "gpu_hours_reclaimed")},
        "breaker_trips": len(summary["breaker_trips"]),
    }


def report(label: str, path: Path, rows: int, result: dict[str, Any], written: float) -> None:
    cpu = result["user"] + result["sys"]
    size = path.stat().st_size / 2**30
    print(
        f"{label}: {rows:,} samples, {size:.2f} GiB ({written:.0f} s to write, not counted)\n"
        f"  governor backtest --metrics {path.name} --json: wall {result['wall']:.1f} s, CPU {cpu:.1f} s "
        f"(user {result['user']:.1f} + sys {result['sys']:.1f}), peak RSS {result['rss_mib']:.0f} MiB, "
        f"{1e6 * cpu / rows:.3f} us CPU per sample\n"
        f"  decisions: {result['summary']}, breaker trips {result['breaker_trips']}\n"
        f"  target <= 900 s and <= 4,096 MiB: wall {'met' if result['wall'] <= 900 else 'NOT met'}, "
        f"CPU {'met' if cpu <= 900 else 'NOT met'}, memory {'met' if result['rss_mib'] <= 4096 else 'NOT met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--dir", default="/tmp/backtest-fleet")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--csv", action="store_true", help="also measure a CSV of --csv-instances for the same days")
    parser.add_argument("--csv-instances", type=int, default=1_000)
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    minutes = int(args.days * 1440)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    from governor_cli.sim import parquet

    path = folder / f"fleet-{args.instances}x{args.days:g}d.parquet"
    began = time.perf_counter()
    if not path.exists():
        rows = parquet.write(path, Fleet(args.instances, minutes).groups())
    else:
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(path).metadata.num_rows
    written = time.perf_counter() - began
    try:
        result = measure(path)
        report(f"Parquet, {args.instances:,} instances x {args.days:g} days", path, rows, result, written)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
    if args.csv:
        csv = folder / f"fleet-{args.csv_instances}x{args.days:g}d.csv"
        began = time.perf_counter()
        csv_rows = (
            Fleet(args.csv_instances, minutes).write_csv(csv) if not csv.exists() else sum(1 for _ in csv.open()) - 1
        )
        written = time.perf_counter() - began
        try:
            result = measure(csv)
            report(f"CSV, {args.csv_instances:,} instances x {args.days:g} days", csv, csv_rows, result, written)
            cpu = result["user"] + result["sys"]
            scaled = cpu / csv_rows * rows
            print(
                f"  EXTRAPOLATION, not a measurement: at {1e6 * cpu / csv_rows:.3f} us a sample, the CSV of "
                f"{args.instances:,} x {args.days:g} days ({rows:,} samples) would cost about {scaled:.0f} CPU-s"
            )
        finally:
            if not args.keep:
                csv.unlink(missing_ok=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
