"""The backtest at fleet scale through the path a user runs: ``governor backtest --metrics FILE`` in a fresh process.

Run: ``.venv/bin/python -m bench.backtest_fleet --instances 10000 --days 30 --dir /tmp/fleet [--keep] [--csv]``,
or for the CSV alone ``--csv-only [--order time|instance] [--pipe] [--scan] [--runs N]``.

1. Writes a synthetic fleet's metrics as a Parquet file the way ``governor backtest --from-cloudwatch --save``
   writes one (one row group per 4 hours of the whole fleet, in time order, zstd): training jobs (stalls,
   checkpoint pauses, 40% ending during the month), sparse inference servers, notebooks used a few hours a day,
   idle boxes and boxes whose agent stops reporting, one sample a minute of GPU utilisation, GPU memory and CPU.
   The generator is vectorised (NumPy, seeded), so writing the month is minutes, not the row-by-row generator's
   half hour; its time is printed and is not part of any figure.
2. Runs ``python -m governor_cli backtest --metrics FILE --json`` under ``/usr/bin/time -v``: wall time, user and
   system CPU seconds, peak resident memory of the whole process, end to end from the file (reading, validating,
   the replay and the report). Nothing is prepared for it: no store, no cache.
3. With ``--csv`` (or ``--csv-only``), the same for the same fleet's CSV (``--csv-instances``: 1,000 with ``--csv``,
   else ``--instances``), in time order or, with ``--order instance``, one instance after another as a CloudWatch
   export comes. ``--scan`` also runs DuckDB's own scan of the file (``count(*)`` of ``read_csv``) in a fresh process
   for the ratio. The 10,000 x 30-day CSV is about 75 GiB, more than this machine's free disk: ``--pipe`` writes it
   zstd-compressed (about 5 GiB) and ``zstd -dc`` feeds the plain CSV through a named pipe to the command
   (``--metrics PIPE``, what ``--metrics <(zstdcat FILE)`` does), whose figures are its own process's; the feeder's
   CPU is printed apart.

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
from typing import Any, BinaryIO

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

    def write_csv(self, out: BinaryIO, order: str = "time") -> tuple[int, int]:
        """The same samples as CSV text: in time order (one 4-hour block of the whole fleet at a time, within it by
        metric and instance), or ``order="instance"`` one instance after another as a CloudWatch export comes (the
        whole span is held in memory: small fleets only). Values as ``f"{v:.1f}"`` (memory: ``int(v)``) print them,
        through tables of those texts: the same bytes, about twice as fast as formatting each row. Returns the rows
        and the bytes written."""
        base = int(START.timestamp())
        tenths = [f"{k / 10:.1f}" for k in range(1001)]  # utilisation and CPU: 0.0 .. 100.0, one decimal
        whole: list[str] = []  # memory in MB: int(v)
        header = b"timestamp,instance_id,metric,value\n"
        out.write(header)
        rows, size = 0, len(header)
        blocks = (
            ((first, self.block(first, min(self.minutes, first + GROUP))) for first in range(0, self.minutes, GROUP))
            if order == "time"
            else [
                (
                    0,
                    np.concatenate(
                        [self.block(f, min(self.minutes, f + GROUP)) for f in range(0, self.minutes, GROUP)], axis=2
                    ),
                )
            ]
        )
        for first, block in blocks:
            stamps = [
                dt.datetime.fromtimestamp(base + (first + k) * 60, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                for k in range(block.shape[2])
            ]
            lines: list[str] = []
            for inst in range(self.n) if order == "instance" else [None]:
                for metric, name in enumerate(METRICS):
                    part = block[metric] if inst is None else block[metric, inst : inst + 1]
                    where, minute = np.nonzero(~np.isnan(part))
                    values = part[where, minute]
                    if metric == 1:
                        codes = values.astype(np.int64)
                        top = int(codes.max(initial=0))
                        whole.extend(str(k) for k in range(len(whole), top + 1))
                        texts = whole
                    else:
                        codes = np.rint(values * 10).astype(np.int64)
                        texts = tenths
                    owner = [inst] * len(where) if inst is not None else where.tolist()
                    prefixes = {i: f",{self.ids[i]},{name}," for i in set(owner)}
                    lines.extend(
                        f"{stamps[m]}{prefixes[i]}{texts[c]}\n"
                        for i, m, c in zip(owner, minute.tolist(), codes.tolist(), strict=True)
                    )
            text = "".join(lines).encode()
            out.write(text)
            rows, size = rows + len(lines), size + len(text)
        return rows, size


def _timed(command: list[str], **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], dict[str, str], float]:
    """``command`` under /usr/bin/time -v: its result, time's figures and the wall seconds."""
    began = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=False, **kwargs)
    wall = time.perf_counter() - began
    return done, dict(re.findall(r"^\s*(.+?): (.+)$", done.stderr, flags=re.MULTILINE)), wall


def measure(path: Path) -> dict[str, Any]:
    """``governor backtest --metrics path --json`` in a fresh process under /usr/bin/time -v."""
    env = {**os.environ, "PYTHONPATH": "lambdas:cli:."}
    done, stats, wall = _timed(
        [sys.executable, "-m", "governor_cli", "backtest", "--metrics", str(path), "--json"], env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"backtest failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)["summary"]
    return {
        "wall": wall,
        "user": float(stats["User time (seconds)"]),
        "sys": float(stats["System time (seconds)"]),
        "rss_mib": int(stats["Maximum resident set size (kbytes)"]) / 1024,
        "summary": {k: summary[k] for k in ("instances", "sweeps", "warnings", "stops", "gpu_hours_reclaimed")},
        "breaker_trips": len(summary["breaker_trips"]),
    }


def measure_pipe(compressed: Path, folder: Path) -> dict[str, Any]:
    """The backtest of a CSV too large for the disk: ``zstd -dc`` writes it into a named pipe, ``governor backtest
    --metrics PIPE`` reads it once, as ``--metrics <(zstdcat FILE)`` would; the feeder's CPU is reported apart."""
    fifo = folder / "fleet.csv"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    feeder = subprocess.Popen(  # the shell opens the pipe for writing, which waits for the reader
        ["/usr/bin/time", "-f", "%U %S", "sh", "-c", 'exec zstd -dcq "$1" > "$2"', "sh", str(compressed), str(fifo)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        result = measure(fifo)
    finally:
        _, err = feeder.communicate()
        fifo.unlink(missing_ok=True)
    user, system = (float(x) for x in err.split()[-2:])
    return {**result, "feeder_cpu": user + system}


SCAN = (
    "import os, sys, duckdb\n"
    "con = duckdb.connect()\n"
    "con.execute('SET enable_progress_bar = false')\n"
    "before = os.times()\n"
    "rows = con.execute('SELECT count(*) FROM read_csv(?)', [sys.argv[1]]).fetchone()[0]\n"
    "after = os.times()\n"
    "print(rows, after.user - before.user + after.system - before.system)\n"
)


def scan(path: Path) -> dict[str, float]:
    """DuckDB's own ``SELECT count(*) FROM read_csv(FILE)`` in a fresh process: the query's CPU (all its threads) and
    the whole process's (interpreter, import and query), to compare with the backtest's whole process."""
    done, stats, wall = _timed([sys.executable, "-c", SCAN, str(path)])
    if done.returncode != 0:
        raise SystemExit(f"scan failed: {done.stderr[-2000:]}")
    rows, query = done.stdout.split()
    return {
        "rows": int(rows),
        "query_cpu": float(query),
        "process_cpu": float(stats["User time (seconds)"]) + float(stats["System time (seconds)"]),
        "wall": wall,
    }


def report(label: str, path: Path, rows: int, result: dict[str, Any], written: float) -> None:
    cpu = result["user"] + result["sys"]
    size = path.stat().st_size / 2**30
    feeder = f"; the zstd feeder used {result['feeder_cpu']:.1f} CPU-s apart" if "feeder_cpu" in result else ""
    piped = f"PIPE (zstd -dc {path.name} > PIPE)" if "feeder_cpu" in result else path.name
    print(
        f"{label}: {rows:,} samples, {size:.2f} GiB on disk ({written:.0f} s to write, not counted)\n"
        f"  governor backtest --metrics {piped} --json: wall {result['wall']:.1f} s, CPU {cpu:.1f} s "
        f"(user {result['user']:.1f} + sys {result['sys']:.1f}), peak RSS {result['rss_mib']:.0f} MiB, "
        f"{1e6 * cpu / rows:.3f} us CPU per sample{feeder}\n"
        f"  decisions: {result['summary']}, breaker trips {result['breaker_trips']}\n"
        f"  target <= 900 s and <= 4,096 MiB: wall {'met' if result['wall'] <= 900 else 'NOT met'}, "
        f"CPU {'met' if cpu <= 900 else 'NOT met'}, memory {'met' if result['rss_mib'] <= 4096 else 'NOT met'}"
    )


def write_csv(path: Path, fleet: Fleet, order: str, compressed: bool) -> tuple[int, int]:
    """The fleet's CSV at ``path`` (zstd-compressed when ``compressed``): its rows and plain bytes, also kept beside
    it (a kept file is not written again)."""
    import pyarrow as pa

    counted = path.with_name(path.name + ".rows")
    if path.exists() and counted.exists():
        rows, size = counted.read_text().split()
        return int(rows), int(size)
    with pa.CompressedOutputStream(str(path), "zstd") if compressed else path.open("wb") as out:
        rows, size = fleet.write_csv(out, order)  # type: ignore[arg-type]
    counted.write_text(f"{rows} {size}")
    return rows, size


def run_csv(args: argparse.Namespace, folder: Path, minutes: int) -> dict[str, Any]:
    """Write and measure the CSV (regular file, or zstd fed through a pipe); optionally DuckDB's scan of it."""
    instances = args.csv_instances or args.instances
    name = f"fleet-{instances}x{args.days:g}d{'-by-instance' if args.order == 'instance' else ''}.csv"
    path = folder / (name + ".zst" if args.pipe else name)
    began = time.perf_counter()
    rows, size = write_csv(path, Fleet(instances, minutes), args.order, args.pipe)
    written = time.perf_counter() - began
    label = (
        f"CSV ({args.order} order{', zstd through a pipe' if args.pipe else ''}), {instances:,} x {args.days:g} d, "
        f"{size / 2**30:.2f} GiB of CSV"
    )
    try:
        results = [measure_pipe(path, folder) if args.pipe else measure(path) for _ in range(args.runs)]
        for result in results:
            report(label, path, rows, result, written)
        cpus = sorted(r["user"] + r["sys"] for r in results)
        print(f"  CPU of {len(cpus)} runs: {', '.join(f'{c:.2f}' for c in cpus)} (median {cpus[len(cpus) // 2]:.2f})")
        if args.scan and not args.pipe:
            scans = [scan(path) for _ in range(args.runs)]
            query = sorted(s["query_cpu"] for s in scans)[len(scans) // 2]
            process = sorted(s["process_cpu"] for s in scans)[len(scans) // 2]
            median = cpus[len(cpus) // 2]
            print(
                f"  DuckDB {duckdb_version()} scan (count of read_csv of the file), median of {len(scans)}: query "
                f"{query:.2f} CPU-s, whole process {process:.2f} CPU-s; the backtest (whole process) is "
                f"{median / query:.1f}x the query, {median / process:.1f}x the process"
            )
        return results[len(results) // 2]
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".rows").unlink(missing_ok=True)


def duckdb_version() -> str:
    import duckdb

    return str(duckdb.__version__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--dir", default="/tmp/backtest-fleet")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--csv", action="store_true", help="also measure a CSV of --csv-instances for the same days")
    parser.add_argument("--csv-only", action="store_true", help="measure the CSV only (of --instances by default)")
    parser.add_argument("--csv-instances", type=int, default=None, help="default: 1,000 with --csv, else --instances")
    parser.add_argument("--order", choices=("time", "instance"), default="time", help="row order of the CSV")
    parser.add_argument(
        "--pipe", action="store_true", help="write the CSV zstd-compressed and feed it through a named pipe"
    )
    parser.add_argument("--scan", action="store_true", help="also time DuckDB's read_csv scan of the CSV")
    parser.add_argument("--runs", type=int, default=1, help="backtests (and scans) of the CSV; the median is printed")
    args = parser.parse_args()
    if args.csv and args.csv_instances is None and not args.csv_only:
        args.csv_instances = 1_000
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    minutes = int(args.days * 1440)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.csv_only:
        run_parquet(args, folder, minutes)
    if args.csv or args.csv_only:
        run_csv(args, folder, minutes)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def run_parquet(args: argparse.Namespace, folder: Path, minutes: int) -> int:
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
    return rows


if __name__ == "__main__":
    main()
