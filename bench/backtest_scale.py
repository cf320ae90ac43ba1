"""``governor backtest`` at fleet scale: time (wall and CPU) and peak memory against the number of samples.

The workload generator writes each size to a CSV file first (in parallel blocks, one instance in memory at a time;
not counted), then the backtest runs on it in a fresh process, measured with ``getrusage`` of that child.

    .venv/bin/python -m bench.backtest_scale [--sizes 150x24 1500x24 150x168 10000x720] [--dir /tmp/backtest-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.common import PY, ROOT

SEED = 7
DEFAULT_SIZES = ("150x24", "1500x24", "150x168", "10000x720")
# issue 24's targets: (instances, hours) -> (wall seconds, peak RSS MiB)
TARGETS = {(1500, 24.0): (5.0, 300.0), (10000, 720.0): (900.0, 4096.0)}


def _write_block(path: str, instances: int, hours: float, block: int, blocks: int) -> int:
    from governor.sim.workload import stream, write_rows

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


def measure(path: Path, instances: int, hours: float, samples: int) -> Measured:
    """One ``governor backtest --json`` of ``path`` in a fresh process; wall, CPU (user + system) and peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "governor.cli", "backtest", "--metrics", str(path), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"backtest of {path} failed: {done.stderr.strip()[-500:]}")
    summary = json.loads(done.stdout)["summary"]
    summary.pop("policy", None)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(instances, hours, samples, path.stat().st_size, wall, cpu, after.ru_maxrss / 1024, summary)


def parse_size(text: str) -> tuple[int, float]:
    instances, _, hours = text.partition("x")
    return int(instances), float(hours)


def run(sizes: list[str], folder: Path, keep: bool, jobs: int) -> list[Measured]:
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
        if not keep:
            path.unlink()
            samples_file.unlink()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="INSTANCESxHOURS, e.g. 1500x24")
    parser.add_argument("--dir", default="/tmp/backtest-scale", help="where the generated CSV files go")
    parser.add_argument("--keep", action="store_true", help="keep the CSV files (and reuse them next time)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes generating the files")
    parser.add_argument("--generate-only", action="store_true")
    args = parser.parse_args()
    if args.generate_only:
        for size in args.sizes:
            instances, hours = parse_size(size)
            path = Path(args.dir) / f"workload-{instances}x{hours:g}h.csv"
            Path(args.dir).mkdir(parents=True, exist_ok=True)
            rows = generate_file(path, instances, hours, args.jobs)
            path.with_suffix(".rows").write_text(str(rows))
            print(f"{path}: {rows:,} samples")
        return
    run(args.sizes, Path(args.dir), args.keep, args.jobs)


if __name__ == "__main__":
    main()
