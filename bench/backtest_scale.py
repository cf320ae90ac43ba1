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
import tempfile
import time
from collections.abc import Sequence
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


def _write_store_chunk(folder: str, instances: int, hours: float, chunk: int, chunks: int) -> int:
    from governor_cli.sim.columnar import write_chunk
    from governor_cli.sim.workload import stream

    return write_chunk(Path(folder), chunk, stream(instances, hours=hours, seed=SEED, part=(chunk, chunks)))


def generate_store(folder: Path, instances: int, hours: float, jobs: int = 2) -> int:
    """The generator's samples for ``instances`` x ``hours`` (seed 7) streamed straight into arrays, no CSV: one store
    chunk of :data:`governor_cli.sim.columnar.STORE_CHUNK` instances at a time per process. Returns the samples."""
    from governor_cli.sim.columnar import STORE_CHUNK

    shutil.rmtree(folder, ignore_errors=True)
    chunks = max(1, -(-instances // STORE_CHUNK))
    began, cpu = time.perf_counter(), _children_cpu()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        samples = sum(
            pool.map(
                _write_store_chunk,
                *zip(*[(str(folder), instances, hours, k, chunks) for k in range(chunks)], strict=True),
            )
        )
    spent = {"samples": samples, "cpu_seconds": _children_cpu() - cpu, "wall_seconds": time.perf_counter() - began}
    (folder / GENERATED).write_text(json.dumps({**spent, "jobs": jobs}))
    return samples


GENERATED = "generated.json"  # a store's sample count and what generating it cost


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
    generated_cpu: float | None = None  # a store's generation (not counted in the figures), in CPU seconds
    load: float = 0.0  # the 1-minute load average when the run ended


def measure(path: Path, instances: int, hours: float, samples: int, *, row_by_row: bool = False) -> Measured:
    """One ``governor backtest --json`` of ``path`` in a fresh process; wall, CPU (user + system) and peak RSS.

    ``row_by_row`` runs the reference path instead (the reader and replay the command used before issue 24), in the
    same way, for the comparison.
    """
    command = ["-m", "bench.backtest_scale", "--row-by-row", str(path)] if row_by_row else ["-m", "governor_cli"]
    command += [] if row_by_row else ["backtest", "--metrics", str(path), "--json"]
    summary, wall, cpu, rss = _run_child(command, f"backtest of {path}")
    reader = "row by row" if row_by_row else "columnar"
    return Measured(
        instances, hours, samples, path.stat().st_size, wall, cpu, rss, summary, reader, load=os.getloadavg()[0]
    )


def measure_store(folder: Path, instances: int, hours: float) -> Measured:
    """One replay of a store (the generator's samples as arrays, no CSV) in a fresh process, measured as ``measure``."""
    generated = json.loads((folder / GENERATED).read_text())
    summary, wall, cpu, rss = _run_child(
        ["-m", "bench.backtest_scale", "--replay-store", str(folder)], f"replay of {folder}"
    )
    size = sum(p.stat().st_size for p in folder.rglob("*.npy"))
    return Measured(
        instances,
        hours,
        int(generated["samples"]),
        size,
        wall,
        cpu,
        rss,
        summary,
        "streamed",
        float(generated["cpu_seconds"]),
        os.getloadavg()[0],
    )


def _run_child(arguments: list[str], what: str) -> tuple[dict[str, object], float, float, float]:
    """Run ``python <arguments>`` in a fresh process; its ``--json`` summary (without the policy), wall seconds, CPU
    seconds (user + system) and peak RSS in MiB, from ``wait4`` (this child's own usage)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        child = subprocess.Popen(
            [PY, *arguments], stdout=out, stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{what} failed: {err.read().decode()[-500:]}")
        summary: dict[str, object] = json.loads(out.read())["summary"]
    summary.pop("policy", None)
    return summary, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def replay_store(folder: Path) -> None:
    """The streamed replay: the shipped policy over a store, printing what ``governor backtest --json`` prints."""
    import datetime as dt

    from governor.policy import resolve_policy
    from governor_cli.commands.backtest import _iso, to_json
    from governor_cli.sim.columnar import Store, replay_columnar

    policy = resolve_policy(None)[0]
    result, gaps = replay_columnar(Store(folder), policy, dt.timedelta(minutes=15))
    data = to_json(result, policy)
    data["summary"]["gaps_skipped"] = [{"from": _iso(a), "to": _iso(b)} for a, b in gaps]
    print(json.dumps(data))


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


def run(
    sizes: list[str], folder: Path, keep: bool, jobs: int, reference: list[str], stream: Sequence[str] = ()
) -> list[Measured]:
    """Generate (or reuse, with ``keep``) each size's file and measure the backtest on it; the ``reference`` sizes are
    also measured row by row. The ``stream`` sizes are then generated straight into arrays (no CSV) and replayed;
    where a size was also run from its file, both must decide the same."""
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
    from_file = {(m.instances, m.hours): m for m in results if m.reader == "columnar"}
    for size in stream:
        instances, hours = parse_size(size)
        store = folder / f"store-{instances}x{hours:g}h"
        if not (keep and (store / GENERATED).exists()):
            generate_store(store, instances, hours, jobs)
        result = measure_store(store, instances, hours)
        print(json.dumps(result.__dict__), flush=True)
        results.append(result)
        same = from_file.get((instances, hours))
        if same is not None and same.summary != result.summary:
            raise RuntimeError(f"{size}: the streamed and file replays disagree")
        if not keep:
            shutil.rmtree(store)
    return results


SECTION = "7. Backtest at scale"
FULL_MINUTES = 10_000 * 720 * 60  # the 432 M samples: instance-minutes (three metric rows each in the CSV)


def _size(m: Measured) -> str:
    span = f"{m.hours / 24:g} day" + ("s" if m.hours != 24 else "") if m.hours % 24 == 0 else f"{m.hours:g} h"
    return f"{m.instances:,} instances x {span}"


def _verdict(m: Measured, target: tuple[float, float]) -> str:
    cpu_ok, wall_ok, rss_ok = m.cpu_seconds <= target[0], m.wall_seconds <= target[0], m.peak_rss_mib <= target[1]
    wall = "met" if wall_ok else f"NOT met at load {m.load:.1f} on {os.cpu_count()} cores"
    return (
        f"target <= {target[0]:g} s and <= {target[1]:,.0f} MiB: CPU {'met' if cpu_ok else 'NOT met'}, wall {wall}, "
        f"memory {'met' if rss_ok else 'NOT met'}"
    )


def figures(results: list[Measured], command: str) -> list[Figure]:
    """The README rows: each size's wall / CPU / peak RSS beside its target, the row-by-row reference and, for the
    streamed sizes, the same size read from its file."""
    rows: list[Figure] = []
    reference = {(m.instances, m.hours): m for m in results if m.reader == "row by row"}
    from_file = {(m.instances, m.hours): m for m in results if m.reader == "columnar"}
    for m in results:
        if m.reader == "row by row":
            continue
        notes = []
        target = TARGETS.get((m.instances, m.hours))
        if target:
            notes.append(_verdict(m, target))
        old = reference.get((m.instances, m.hours)) if m.reader == "columnar" else None
        if old:
            notes.append(
                f"row by row (before): {old.wall_seconds:.1f} s / {old.cpu_seconds:.1f} s / {old.peak_rss_mib:,.0f} MiB, "
                f"{old.cpu_seconds / m.cpu_seconds:.1f}x the CPU, {old.peak_rss_mib / m.peak_rss_mib:.1f}x the memory; "
                "same decisions"
            )
        if m.reader == "streamed":
            notes.append(
                f"generating the samples took {m.generated_cpu or 0:,.0f} CPU-s (the workload generator, not counted, "
                "as the CSV files are not)"
            )
            same = from_file.get((m.instances, m.hours))
            if same:
                notes.append(f"same decisions as the file; {same.cpu_seconds / m.cpu_seconds:.1f}x less CPU")
            label = f"{_size(m)} streamed from the generator ({m.samples:,} samples, no CSV)"
        else:
            label = f"{_size(m)} ({m.samples:,} rows, {m.file_bytes / 2**30:.2f} GiB CSV)"
        notes.append(f"{1e6 * m.cpu_seconds / m.samples:.2f} us CPU per sample; load {m.load:.1f}")
        rows.append(
            Figure(
                SECTION,
                f"{label}: wall / CPU / peak RSS",
                f"{m.wall_seconds:.1f} s / {m.cpu_seconds:.1f} s / {m.peak_rss_mib:,.0f} MiB",
                command,
                "; ".join(notes),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=list(DEFAULT_SIZES), help="INSTANCESxHOURS, e.g. 1500x24")
    parser.add_argument("--dir", default="/tmp/backtest-scale", help="where the generated CSV files go")
    parser.add_argument("--keep", action="store_true", help="keep the CSV files (and reuse them next time)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes generating the files")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument(
        "--reference", nargs="*", default=["150x24", "1500x24", "150x168"], help="sizes also run row by row"
    )
    parser.add_argument("--row-by-row", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--generate-store", action="store_true", help="write the sizes as stores (no CSV) only")
    parser.add_argument("--stream", nargs="*", default=[], help="sizes also replayed straight from the generator")
    parser.add_argument("--replay-store", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay_store:
        replay_store(Path(args.replay_store))
        return
    if args.generate_store:
        for size in args.sizes:
            instances, hours = parse_size(size)
            path = Path(args.dir) / f"store-{instances}x{hours:g}h"
            began = time.perf_counter()
            rows = generate_store(path, instances, hours, args.jobs)
            print(f"{path}: {rows:,} samples in {time.perf_counter() - began:.0f} s", flush=True)
        return
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
    run(args.sizes, Path(args.dir), args.keep, args.jobs, args.reference, args.stream)


if __name__ == "__main__":
    main()
