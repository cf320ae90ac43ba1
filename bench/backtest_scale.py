"""``governor backtest`` at fleet scale: time (wall and CPU) and peak memory against the number of samples.

The workload generator writes each size to a CSV file first (in parallel blocks, one instance in memory at a time;
not counted), then the backtest runs on it in a fresh process, measured with ``getrusage`` of that child.

    .venv/bin/python -m bench.backtest_scale [--sizes 150x24 1500x24 150x168 10000x720] [--dir /tmp/backtest-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.common import PY, ROOT, Figure

SEED = 7
DEFAULT_SIZES = ("150x24", "1500x24", "150x168", "10000x720")
# issue 24's targets: (instances, hours) -> (wall seconds, peak RSS MiB)
TARGETS = {(1500, 24.0): (5.0, 300.0), (10000, 720.0): (900.0, 4096.0)}


def _write_block(path: str, instances: int, hours: float, block: int, blocks: int) -> int:
    from governor_cli.sim.workload import stream, write_rows

    return write_rows(path, stream(instances, hours=hours, seed=SEED, part=(block, blocks)), header=block == 0)


def generate_file(path: Path, instances: int, hours: float, jobs: int = 2) -> int:
    """The generator's CSV for ``instances`` x ``hours`` (seed 7), byte for byte what ``generate().write_csv`` writes."""
    blocks = max(1, min(jobs * 4, instances))
    parts = [path.with_name(f"{path.name}.part{k:03d}") for k in range(blocks)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        rows = sum(
            pool.map(
                _write_block,
                map(str, parts),
                *zip(*[(instances, hours, k, blocks) for k in range(blocks)], strict=True),
            )
        )
    with path.open("wb") as out:
        for part in parts:
            with part.open("rb") as handle:
                shutil.copyfileobj(handle, out, 16 * 1024 * 1024)
            part.unlink()
    return rows


@dataclass(frozen=True)
class Measured:
    instances: int
    hours: float
    samples: int
    file_bytes: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    summary: dict[str, object]
    reader: str = "columnar"


def measure(path: Path, instances: int, hours: float, samples: int, *, row_by_row: bool = False) -> Measured:
    """One ``governor backtest --json`` of ``path`` in a fresh process; wall, CPU (user + system) and peak RSS.

    ``row_by_row`` runs the reference path instead (the reader and replay the command used before issue 24), in the
    same way, for the comparison.
    """
    command = ["-m", "bench.backtest_scale", "--row-by-row", str(path)] if row_by_row else ["-m", "governor_cli"]
    command += [] if row_by_row else ["backtest", "--metrics", str(path), "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        child = subprocess.Popen(
            [PY, *command], stdout=out, stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        _, status, usage = os.wait4(child.pid, 0)  # this child's own CPU and peak RSS
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"backtest of {path} failed: {err.read().decode()[-500:]}")
        summary = json.loads(out.read())["summary"]
    summary.pop("policy", None)
    cpu = usage.ru_utime + usage.ru_stime
    rss = usage.ru_maxrss / 1024
    reader = "row by row" if row_by_row else "columnar"
    return Measured(instances, hours, samples, path.stat().st_size, wall, cpu, rss, summary, reader)


def row_by_row(path: Path) -> None:
    """The reference: ``parse_metrics`` + ``replay_stretches``, printing what ``governor backtest --json`` prints."""
    import datetime as dt

    from governor.policy import resolve_policy
    from governor_cli.commands.backtest import parse_metrics, replay_stretches, to_json

    policy = resolve_policy(None)[0]
    with path.open(encoding="utf-8-sig", newline="") as handle:
        result, _ = replay_stretches(parse_metrics(handle, str(path)), policy, dt.timedelta(minutes=15))
    print(json.dumps(to_json(result, policy)))


def parse_size(text: str) -> tuple[int, float]:
    instances, _, hours = text.partition("x")
    return int(instances), float(hours)


def run(sizes: list[str], folder: Path, keep: bool, jobs: int, reference: list[str]) -> list[Measured]:
    """Generate (or reuse, with ``keep``) each size's file and measure the backtest on it; the ``reference`` sizes are
    also measured row by row."""
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for size in sizes:
        instances, hours = parse_size(size)
        path = folder / f"workload-{instances}x{hours:g}h.csv"
        began = time.perf_counter()
        samples_file = path.with_suffix(".rows")
        if path.exists() and samples_file.exists():
            samples = int(samples_file.read_text())
        else:
            samples = generate_file(path, instances, hours, jobs)
            samples_file.write_text(str(samples))
        print(
            f"{size}: {samples:,} samples, {path.stat().st_size / 2**30:.2f} GiB, "
            f"generated in {time.perf_counter() - began:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        result = measure(path, instances, hours, samples)
        print(json.dumps(result.__dict__), flush=True)
        results.append(result)
        if size in reference:
            old = measure(path, instances, hours, samples, row_by_row=True)
            print(json.dumps(old.__dict__), flush=True)
            if old.summary != {k: v for k, v in result.summary.items() if k != "gaps_skipped"}:
                raise RuntimeError(f"{size}: the row-by-row and columnar replays disagree")
            results.append(old)
        if not keep:
            path.unlink()
            samples_file.unlink()
    return results


SECTION = "7. Backtest at scale"
FULL_MINUTES = 10_000 * 720 * 60  # the 432 M samples: instance-minutes (three metric rows each in the CSV)


def _size(m: Measured) -> str:
    span = f"{m.hours / 24:g} day" + ("s" if m.hours != 24 else "") if m.hours % 24 == 0 else f"{m.hours:g} h"
    return f"{m.instances:,} instances x {span}"


def figures(results: list[Measured], command: str) -> list[Figure]:
    """The README rows: each size's wall / CPU / peak RSS beside its target and the row-by-row reference."""
    rows: list[Figure] = []
    reference = {(m.instances, m.hours): m for m in results if m.reader != "columnar"}
    columnar = [m for m in results if m.reader == "columnar"]
    for m in columnar:
        notes = []
        target = TARGETS.get((m.instances, m.hours))
        if target:
            wall_ok, rss_ok = m.wall_seconds <= target[0], m.peak_rss_mib <= target[1]
            notes.append(
                f"target <= {target[0]:g} s and <= {target[1]:,.0f} MiB: wall {'met' if wall_ok else 'NOT met'}, "
                f"memory {'met' if rss_ok else 'NOT met'}"
            )
        old = reference.get((m.instances, m.hours))
        if old:
            notes.append(
                f"row by row (before): {old.wall_seconds:.1f} s / {old.cpu_seconds:.1f} s / {old.peak_rss_mib:,.0f} MiB, "
                f"{old.cpu_seconds / m.cpu_seconds:.1f}x the CPU, {old.peak_rss_mib / m.peak_rss_mib:.1f}x the memory; "
                "same decisions"
            )
        notes.append(f"{1e6 * m.cpu_seconds / m.samples:.2f} us CPU per row")
        rows.append(
            Figure(
                SECTION,
                f"{_size(m)} ({m.samples:,} rows, {m.file_bytes / 2**30:.2f} GiB CSV): wall / CPU / peak RSS",
                f"{m.wall_seconds:.1f} s / {m.cpu_seconds:.1f} s / {m.peak_rss_mib:,.0f} MiB",
                command,
                "; ".join(notes),
            )
        )
    if columnar:
        largest = max(columnar, key=lambda m: m.samples)
        per_row = largest.cpu_seconds / largest.samples
        rows_needed = largest.samples / (largest.instances * largest.hours * 60) * FULL_MINUTES
        rows.append(
            Figure(
                SECTION,
                f"10,000 instances x 30 days (432 M instance-minutes, {rows_needed / 1e9:.2f} G CSV rows): CPU "
                "extrapolated from the largest size measured",
                f"about {per_row * rows_needed / 60:,.0f} CPU-min, {per_row * rows_needed / 120:,.0f} min wall on 2 free "
                "cores",
                command,
                f"not measured: {_size(largest)} at {1e6 * per_row:.2f} us CPU per row, times {rows_needed / 1e9:.2f} G "
                "rows (target <= 15 min, <= 4 GiB); memory follows the fleet, not the days (compare the 1- and 3-day rows)",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="INSTANCESxHOURS, e.g. 1500x24")
    parser.add_argument("--dir", default="/tmp/backtest-scale", help="where the generated CSV files go")
    parser.add_argument("--keep", action="store_true", help="keep the CSV files (and reuse them next time)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes generating the files")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument(
        "--reference", nargs="*", default=["150x24", "1500x24", "150x168"], help="sizes also run row by row"
    )
    parser.add_argument("--row-by-row", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row_by_row:
        row_by_row(Path(args.row_by_row))
        return
    if args.generate_only:
        for size in args.sizes:
            instances, hours = parse_size(size)
            path = Path(args.dir) / f"workload-{instances}x{hours:g}h.csv"
            Path(args.dir).mkdir(parents=True, exist_ok=True)
            rows = generate_file(path, instances, hours, args.jobs)
            path.with_suffix(".rows").write_text(str(rows))
            print(f"{path}: {rows:,} samples")
        return
    run(args.sizes, Path(args.dir), args.keep, args.jobs, args.reference)


if __name__ == "__main__":
    main()
