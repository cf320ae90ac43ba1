"""``make bench``: run every side-by-side benchmark once, in sequence, and regenerate bench/README.md.

Each figure is written with the command that measures it alone and the date; timings are medians of several runs and
every comparison is a ratio of figures measured in this same run. Nothing here runs in ``make test``.

    .venv/bin/python -m bench.run [--quick] [--out bench/README.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import PY, ROOT, Figure, cores, median

SECTIONS = (
    "1. Idle sweep cost vs Cloud Custodian",
    "2. Cold start and package size",
    "3. Handler latency on the local emulator",
    "4. Audit engine",
    "5. Idle policy quality vs the naive rule",
    "7. Backtest at scale",
)


def _run(args: list[str]) -> str:
    done = subprocess.run([PY, *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": "."})
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(args)} failed:\n{tail}")
    return done.stdout


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    if not found:
        raise RuntimeError(f"{pattern!r} not in output:\n{text}")
    return float(found.group(1))


def idle_sweep(sizes: list[int], runs: int, full_data: int) -> list[Figure]:
    from bench.idle_vs_custodian import describe, figures, measure_size

    results = []
    for size in sizes:
        result = measure_size(size, runs, full_data)
        print(describe(result), flush=True)
        results.append(result)
    sizes_arg = " ".join(str(s) for s in sizes)
    command = f"python -m bench.idle_vs_custodian --sizes {sizes_arg} --runs {runs} --full-data {full_data}"
    return figures(results, command, runs)


def cold_start(runs: int, build_layer: bool) -> list[Figure]:
    from bench.cold_start import measure

    command = f"python -m bench.cold_start --runs {runs}" + ("" if build_layer else " --no-layer")
    return measure(runs, build_layer, command)


def latency(events: int) -> list[Figure]:
    section = SECTIONS[2]
    rows: list[Figure] = []
    args = ["-m", "bench.spot_latency", "--events", str(events), "--instances", str(min(250, events)), "--json"]
    spot = json.loads(_run(args))
    command = "python " + " ".join(args)
    checkpoint = spot["to_checkpoint_ms"]
    rows.append(
        Figure(
            section,
            f"Spot interruption warning -> checkpoint command sent, p50 / p99 ({spot['events']} events)",
            f"{checkpoint['p50']} ms / {checkpoint['p99']} ms",
            command,
            f"whole handler p50 {spot['handler_ms']['p50']} ms",
        )
    )
    args = ["-m", "bench.network_latency", "--events", str(events)]
    text = _run(args)
    rows.append(
        Figure(
            section,
            f"world-open security-group rule event -> rule revoked, p50 / p99 ({events} events)",
            f"{_number(r'p50 ([0-9.]+) ms, p99', text):.1f} ms / {_number(r'p99 ([0-9.]+) ms, max', text):.1f} ms",
            "python " + " ".join(args),
            "enforce on: re-read, ledger, revoke, finding",
        )
    )
    args = ["-m", "bench.keys_latency", "--events", str(events)]
    text = _run(args)
    rows.append(
        Figure(
            section,
            f"DisableKeyRotation event -> rotation enabled, p50 / p99 ({events} events)",
            f"{_number(r'latency ms: p50 ([0-9.]+)', text):.1f} ms / {_number(r'p99 ([0-9.]+)  max', text):.1f} ms",
            "python " + " ".join(args),
            "enforce on: re-read, ledger, EnableKeyRotation, finding",
        )
    )
    return rows


def audit(records: int, runs: int) -> list[Figure]:
    from bench.audit_engine import START, _child, generate

    section = SECTIONS[3]
    command = f"python -m bench.audit_engine --records {records}"
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as scratch:
        folder = Path(scratch)
        began = time.perf_counter()
        files = generate(folder, records)
        generated = time.perf_counter() - began
        one_day = (
            (START + dt.timedelta(days=14)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            (START + dt.timedelta(days=15)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        for label, (start, end) in {"30-day range": (None, None), "1-day range": one_day}.items():
            measured = [_child(folder, start, end) for _ in range(runs)]
            last = measured[-1]
            queries = len(last["rows"])
            rows.append(
                Figure(
                    section,
                    f"{label}: {last['records']:,} of {records:,} records, {last['files_opened']:,} of {files:,} files, "
                    f"all {queries} queries: load / queries / total (median of {runs})",
                    f"{median([m['load_seconds'] for m in measured]):.1f} s / "
                    f"{median([m['query_seconds'] for m in measured]):.1f} s / "
                    f"{median([m['total_seconds'] for m in measured]):.1f} s",
                    command,
                    f"peak RSS {median([m['peak_rss_mib'] for m in measured]):,.0f} MiB; synthetic trail generated in "
                    f"{generated:.0f}s (not counted)",
                )
            )
    return rows


def quality(instances: int, hours: float, seed: int) -> list[Figure]:
    from bench.idle_quality import score_governor, score_naive
    from governor.policy import parse_policy
    from governor_cli.sim.workload import Workload, generate

    section = SECTIONS[4]
    command = f"python -m bench.idle_quality --instances {instances} --hours {hours:g} --seed {seed}"
    workload = generate(instances, hours=hours, seed=seed)
    idle_hours = sum((i.minutes - sum(i.working)) * i.gpus / 60 for i in workload.instances)
    relaxed = parse_policy({"idle": {"max_actions_per_sweep": 1000, "max_fleet_percent": 100}})
    naive = score_naive(workload)
    scores = [
        naive,
        score_governor(workload, parse_policy({}), "governor, default policy (blast radius 10 / 20%)"),
        score_governor(workload, relaxed, "governor, default policy with the blast radius relaxed (1000 / 100%)"),
    ]
    rows = [
        Figure(
            section,
            f"workload: {instances} instances x {hours:g} h, seed {seed}",
            f"{idle_hours:,.1f} idle GPU-hours in the trace",
            command,
            "the most any policy could reclaim; a stop is false when the instance was working at that minute",
        )
    ]
    for score in scores:
        rows.append(
            Figure(
                section,
                f"{score.name}: stops / false stops / GPU-h reclaimed / GPU-h of work stopped",
                f"{score.stops} / {score.false_stops} / {score.reclaimed:,.1f} / {score.work_stopped:,.1f}",
                command,
                f"sweeps held back by the blast radius: {score.held_back_sweeps}; false stops by kind: "
                + (", ".join(f"{k} {v}" for k, v in sorted(score.false_by_kind.items())) or "none"),
            )
        )
    # Only the truly idle instances; with the relaxed blast radius each instance's verdict is independent of the rest.
    idle_only = Workload(
        start=workload.start, minutes=workload.minutes, instances=[i for i in workload.instances if i.kind == "idle"]
    )
    naive_idle = score_naive(idle_only)
    governor_idle = score_governor(idle_only, relaxed, "governor relaxed, truly idle only")
    rows.append(
        Figure(
            section,
            f"GPU-h reclaimed on the {len(idle_only.instances)} truly idle instances, governor (relaxed) / naive",
            f"{governor_idle.reclaimed:,.1f} / {naive_idle.reclaimed:,.1f} "
            f"({100 * governor_idle.reclaimed / max(naive_idle.reclaimed, 1e-9):.1f}%)",
            command,
        )
    )
    governor = scores[2]
    met = governor.false_stops == 0 and governor_idle.reclaimed >= naive_idle.reclaimed
    rows.append(
        Figure(
            section,
            "target: zero false stops, and at least the naive rule's GPU-h on truly idle instances",
            "met (blast radius relaxed)" if met else "NOT met",
            command,
            f"with the default blast radius every sweep of this fleet is held back ({scores[1].held_back_sweeps} sweeps): "
            "nothing is stopped, by design, when more than 10 instances or 20% of the fleet would be",
        )
    )
    return rows


def backtest(
    sizes: list[str], reference: list[str], folder: str, stream: Sequence[str] = (), extra: Sequence[str] = ()
) -> list[Figure]:
    from bench.backtest_scale import Measured, figures, run

    # The generated files stay in ``folder`` and are reused by the next run (10,000 x 3 days is 2.7 GB).
    results = run(sizes, Path(folder), keep=True, jobs=os.cpu_count() or 1, reference=reference, stream=stream)
    command = "python -m bench.backtest_scale --sizes " + " ".join(sizes) + " --reference " + " ".join(reference)
    command += " --stream " + " ".join(stream) if stream else ""
    rows = figures(results, command)
    # Runs measured earlier by ``bench.backtest_scale`` (its JSON lines), e.g. a size too long to rerun with the rest.
    for log in extra:
        lines = [json.loads(line) for line in Path(log).read_text().splitlines() if line.startswith("{")]
        earlier = [Measured(**line) for line in lines]
        kinds = {
            flag: " ".join(f"{m.instances}x{m.hours:g}" for m in earlier if m.reader == reader)
            for flag, reader in (("--sizes", "columnar"), ("--reference", "row by row"), ("--stream", "streamed"))
        }
        rows += figures(
            earlier, "python -m bench.backtest_scale " + " ".join(f"{k} {v}".strip() for k, v in kinds.items())
        )
    return rows


BACKTEST_NOTE = """Added by issue 24 (item 3). Two ways in, one replay. From a file, `governor backtest` reads the metrics CSV
with DuckDB in one pass into Parquet partitions of 4 hours. Streamed, the workload generator's samples go straight into
arrays (`governor_cli.sim.columnar.write_chunk`: one `.npy` per 4-hour partition per 100 instances, in the CSV's own
precision, no text in between) and `Store` hands them to the same replay. The replay walks the sweeps in time order
holding, per metric, one dense instance-by-minute array of the lookback plus one partition: memory follows the fleet
and the window, not the history. Each sweep computes every instance's window statistics with NumPy and applies the
idle rule's own checks (`idle/checks.py: idle_checks`); instances that are not idle, unmarked and not exempt are only
counted. The rate limit's queue is vectorised too: instances marked, idle for the whole window and past their warning
would each be acted on, so only the first `limit` of them (longest idle first, then by id) go through `sweep()` with
the instances whose mark or state can change; the rest are counted as deferred, marks kept, which is what `sweep()`
decides for them. `sweep()`'s own answer checks the shortcut: if anything else would act, or the breaker trips or is
open, that sweep is decided again with every instance. Before this, a 10,000-instance fleet's ~3,000 queued idle boxes
each went through `sweep()` every 15 minutes for days, most of the 10,000-instance CPU. Profile (`python -m cProfile`, 1,500 x 1
day streamed, shares of the replay): `sweep()` on the few materialised instances 37%, NumPy window statistics 30%,
building those instances' series 8%, reading partitions 8%. Every figure is one fresh process (wall, user + system CPU of the whole process, its peak
RSS from `wait4`); generating the files or arrays is not counted (its CPU is given). "Row by row" is the reader and
replay the command used before (kept as the reference; `tests/unit/test_backtest_columnar.py` checks the columnar
path decides the same on the 150-instance day, and that streamed and file replays decide the same); the bench fails if
row by row and columnar, or streamed and file, summaries differ. How it grows: CPU with the samples (from a file the
DuckDB pass, about 1.2 us a CSV row, is most of it) plus the sweeps times the fleet for the NumPy windows. Memory: the
libraries, three dense arrays of fleet x (lookback + 4 h), and, from a file, DuckDB's Parquet writer: the generated
CSV lists each instance's whole history in turn, so every 4-hour partition stays open for the whole pass with its
buffers, which is why the file path's peak grew from 769 to 965 MiB between 1 and 3 days at 10,000 instances (6
partitions open against 18); the streamed replay has no writer and its peak does not grow with the days (compare its
10,000-instance rows). The machine was shared by five sessions (1-minute load 8-14 on 2 cores), so wall times are
high: read the CPU column; each row gives the load when it ended."""


COLD_NOTE = """Every import figure is CPU time (user + system of a fresh child process, `getrusage`) with the interpreter's
own start (`python -c pass`) subtracted, the median of 11 fresh processes, peers and handlers interleaved in the same
rounds. "As deployed" rows import a staged copy of the code asset's files with `PYTHONDONTWRITEBYTECODE=1` (the asset
CDK deploys holds no bytecode and Lambda's `/var/task` is read-only, so a real cold start compiles every governor
module it imports); "bytecode cached" rows import the same files compiled; Custodian is measured both ways (c7n as its
`mu` archive holds it, and compiled). Targets: a handler's import <= 1.3x the baseline and <= 0.8x Custodian's entry;
import plus first invocation to the first AWS request <= 1.5x the baseline plus three clients. Sizes: each function
ships the code asset and only the layers its handler imports (`infra.dependencies`: `base` for every function,
`slack-sdk`, `lightkube` and `matplotlib` only where imported), built as `make layer` builds them (CPython 3.14
arm64 wheels). Single processes vary widely on this machine (tens of percent); {cores} cores, 1-, 5- and 15-minute
load {load} when the section was written."""

IDLE_NOTE = """The emulator (moto's server) runs in its own process for each size, so each tool's process CPU is its
own and the emulator shares neither tool's interpreter lock; both tools read the same stored datapoints through the
same indexed lookups (one pass over the queried metric's datapoints, moto's own aggregation; the answers are moto's:
`tests/unit/test_bench_emulator.py`). Every size holds its datapoints (two hours of GPU utilisation and memory a
minute per instance from the workload generator), seeded inside the emulator's process through moto's own
`put_metric_data` (seeding is not measured). The governor reads CloudWatch in two phases: window `Maximum` statistics
for every instance, minute points only for those they do not prove plainly busy (docs/idle.md); its CloudWatch calls
are both phases'. CPU is each tool's process CPU (user + system) over its sweep, per instance:
the governor's sweep with its AWS clients (parsing included), Custodian's run in its own process. Wall times are
each tool's in-process time for one sweep against the same emulator, so they include the emulator's time answering.
The machine was shared ({cores} cores; 1-, 5- and 15-minute load {load} when the section was written): wall times
under contention move by tens of percent between runs; CPU moves less."""


def splice(readme: str, section: str, block: str) -> str:
    """``readme`` with the section titled ``section`` replaced by ``block`` (appended when absent)."""
    title = f"## {section}"
    if title not in readme:
        return readme.rstrip("\n") + "\n\n" + block
    head, _, rest = readme.partition(title)
    tail = rest.find("\n## ")
    return head + block + ("" if tail < 0 else rest[tail + 1 :])


def section_block(section: str, rows: list[Figure], note: str, when: str, only: str = "backtest") -> str:
    lines = [f"## {section}", "", f"Regenerated on its own at {when} with `python -m bench.run --only {only}`.", ""]
    lines += [note, "", "| Figure | Value | Command | Note |", "|---|---|---|---|"]
    for r in rows:
        cells = [r.name, r.value, f"`{r.command}`", r.note]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n\n"


def render(rows: list[Figure], meta: dict[str, str]) -> str:
    lines = [
        "# Benchmarks against peers",
        "",
        "Generated by `make bench` (`python -m bench.run`); do not edit by hand. Every figure below was measured in the",
        "run described here; timings are medians of several runs, comparisons are ratios of figures from this same run.",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in meta.items()),
        "",
        "Emulator notes: AWS is emulated by moto's server on a loopback port, so wall times measure the tools plus the",
        "emulator, not AWS latency. moto answers CloudWatch queries by scanning every stored datapoint; the idle",
        "comparison hands moto's own lookup only the queried metric's datapoints (same answers) for both tools alike,",
        "and fills each query's periods in one pass over them with moto's own aggregation (moto's loop scans them once",
        "per period; `tests/unit/test_bench_emulator.py` holds the answers equal). The emulator runs in its own",
        "process, so each tool's process CPU is its own. The governor's figures in section 1 are one",
        "report-only sweep through `governor.idle.sweep_run.run_sweep` with the real adapters; Custodian's are",
        "`custodian run` of a `metrics` filter policy (`bench/c7n_runner.py`, c7n 0.9.53) in its own virtual",
        "environment; API calls are counted by wrapping botocore's `_make_api_call` in each process. The audit engine runs at 250,000 records (three fresh processes per",
        "range) to keep `make bench` under 20 minutes; `python -m bench.audit_engine` alone runs 1,000,000 records once.",
        "",
    ]
    for section in SECTIONS:
        mine = [r for r in rows if r.section == section]
        if not mine:
            continue
        lines += [f"## {section}", "", "| Figure | Value | Command | Note |", "|---|---|---|---|"]
        for r in mine:
            cells = [r.name, r.value, f"`{r.command}`", r.note]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the harness (not for the README)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "README.md"))
    parser.add_argument(
        "--only",
        choices=["backtest", "idle", "cold"],
        help="measure one section and replace it in the existing README (the others stay as they are)",
    )
    parser.add_argument("--backtest-dir", default="/tmp/backtest-scale", help="where the backtest's CSV files are kept")
    parser.add_argument("--backtest-sizes", nargs="*", help="sizes read from a CSV file (INSTANCESxHOURS)")
    parser.add_argument("--backtest-reference", nargs="*", help="sizes also replayed row by row")
    parser.add_argument("--backtest-stream", nargs="*", help="sizes streamed from the generator (no CSV)")
    parser.add_argument(
        "--backtest-extra", nargs="*", default=[], help="JSON lines of bench.backtest_scale runs to add"
    )
    parser.add_argument(
        "--idle-sizes", type=int, nargs="*", default=[100, 1000, 10000], help="fleet sizes (--only idle)"
    )
    parser.add_argument("--idle-runs", type=int, default=3, help="sweeps per tool and size (--only idle)")
    parser.add_argument(
        "--idle-full-data", type=int, default=10000, help="largest fleet seeded with data (--only idle)"
    )
    args = parser.parse_args()
    began = time.perf_counter()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    quick = args.quick
    backtest_sizes = ["150x24", "1500x24"] if quick else ["150x24", "1500x24", "150x168", "10000x24", "10000x72"]
    backtest_reference = ["150x24"] if quick else ["150x24", "1500x24", "150x168"]
    backtest_stream = ["150x24", "1500x24"] if quick else ["150x24", "1500x24", "10000x24", "10000x720"]
    if args.backtest_sizes is not None:
        backtest_sizes = args.backtest_sizes
    if args.backtest_reference is not None:
        backtest_reference = args.backtest_reference
    if args.backtest_stream is not None:
        backtest_stream = args.backtest_stream
    if args.only == "idle":
        found = idle_sweep(args.idle_sizes, args.idle_runs, args.idle_full_data)
        section, out = SECTIONS[0], Path(args.out)
        note = IDLE_NOTE.format(load=", ".join(f"{x:.1f}" for x in os.getloadavg()), cores=cores())
        out.write_text(splice(out.read_text(), section, section_block(section, found, note, date, "idle")))
        print(f"wrote section {section} of {args.out} in {(time.perf_counter() - began) / 60:.1f} min", file=sys.stderr)
        return
    if args.only == "cold":
        found = cold_start(11, build_layer=True)
        section, out = SECTIONS[1], Path(args.out)
        note = COLD_NOTE.format(load=", ".join(f"{x:.1f}" for x in os.getloadavg()), cores=cores())
        out.write_text(splice(out.read_text(), section, section_block(section, found, note, date, "cold")))
        print(f"wrote section {section} of {args.out} in {(time.perf_counter() - began) / 60:.1f} min", file=sys.stderr)
        return
    if args.only == "backtest":
        found = backtest(backtest_sizes, backtest_reference, args.backtest_dir, backtest_stream, args.backtest_extra)
        section = SECTIONS[-1]
        out = Path(args.out)
        out.write_text(splice(out.read_text(), section, section_block(section, found, BACKTEST_NOTE, date)))
        print(f"wrote section {section} of {args.out} in {(time.perf_counter() - began) / 60:.1f} min", file=sys.stderr)
        return
    steps: list[tuple[str, Callable[[], list[Figure]]]] = [
        ("idle sweep", lambda: idle_sweep([20, 50] if quick else [100, 1000, 10000], 2 if quick else 3, 1000)),
        ("cold start", lambda: cold_start(1 if quick else 11, build_layer=True)),
        ("latency", lambda: latency(20 if quick else 200)),
        ("audit", lambda: audit(5000 if quick else 250_000, 1 if quick else 3)),
        ("quality", lambda: quality(150, 24.0, 7)),
        ("backtest", lambda: backtest(backtest_sizes, backtest_reference, args.backtest_dir, backtest_stream)),
    ]
    rows: list[Figure] = []
    durations: dict[str, float] = {}
    loads: list[float] = []
    for name, step in steps:
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        found = step()
        for row in found:
            print(f"  {row.name}: {row.value}" + (f"  ({row.note})" if row.note else ""), flush=True)
        rows += found
        durations[name] = time.perf_counter() - t0
        loads.append(os.getloadavg()[0])
    total = time.perf_counter() - began
    meta = {
        "Date": date,
        "Command": "`make bench` (`.venv/bin/python -m bench.run" + (" --quick" if quick else "") + "`)",
        "Machine": f"{cores()} cores available ({os.cpu_count()} CPUs), {platform.machine()}, {platform.system()}",
        "Python": f"{platform.python_version()} (governor), c7n 0.9.53 in bench/.venv-c7n",
        "Total wall time": f"{total / 60:.1f} min ("
        + ", ".join(f"{k} {v / 60:.1f}" for k, v in durations.items())
        + ")",
        "1-minute load average after each step": ", ".join(f"{x:.1f}" for x in loads)
        + " (above the core count, other work shared the CPUs)",
    }
    Path(args.out).write_text(render(rows, meta))
    print(f"wrote {args.out} in {total / 60:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    main()
