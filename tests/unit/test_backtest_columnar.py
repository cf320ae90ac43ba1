"""The columnar, streaming backtest decides exactly as the row-by-row replay did (issue 24 item 3).

The row-by-row path (``parse_metrics`` + ``replay_stretches``) is kept as the reference: both are compared on the
150-instance day (seed 7) under the shipped policy, a relaxed blast radius, a CPU threshold, an hourly interval, a
metrics outage that trips the circuit breaker, and a file with a gap; the shipped-policy figures are also pinned to
what the row-by-row code printed before the columnar path replaced it.
"""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from governor.policy import Policy, parse_policy
from governor_cli.commands.backtest import parse_metrics, replay_file, replay_stretches, to_json
from governor_cli.sim import columnar, spill
from governor_cli.sim.workload import Workload, generate, stream

QUARTER = dt.timedelta(minutes=15)


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("columnar") / "day.csv"
    generate(150, hours=24, seed=7).write_csv(path)
    return path


def _both(path: Path, policy: Policy, interval: dt.timedelta = QUARTER) -> tuple[dict[str, Any], dict[str, Any]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        old, old_gaps = replay_stretches(parse_metrics(handle, str(path)), policy, interval)
    new, new_gaps = replay_file(path, policy, interval)
    assert new_gaps == old_gaps
    return to_json(old, policy), to_json(new, policy)


def test_the_150_instance_day_gets_the_decisions_the_row_by_row_code_made(day: Path) -> None:
    policy = parse_policy({})
    old, new = _both(day, policy)
    assert new == old
    # What `governor backtest` printed for this file before the columnar path (same seed, shipped policy).
    summary = new["summary"]
    assert (summary["sweeps"], summary["warnings"], summary["stops"], summary["deferred_sweeps"]) == (96, 68, 68, 2)
    assert summary["gpu_hours_reclaimed"] == 1137.75 and summary["breaker_trips"] == []
    assert summary["verdicts"] == {
        "acted": 68,
        "busy": 8619,
        "deferred": 14,
        "grace": 150,
        "idle": 68,
        "unmonitored": 862,
        "warned": 68,
    }


@pytest.mark.parametrize(
    ("rules", "interval"),
    [
        ({"max_actions_per_sweep": 1000, "max_fleet_percent": 100}, QUARTER),
        ({"cpu_utilization_threshold": 20, "memory_change_tolerance_mib": None}, QUARTER),
        ({"window_minutes": 60, "warning_minutes": 0, "max_actions_per_sweep": 3}, dt.timedelta(hours=1)),
        (
            {"launch_grace_minutes": 0, "min_samples_fraction": 1.0, "max_sample_age_minutes": 1},
            dt.timedelta(seconds=90),
        ),
    ],
)
def test_other_policies_and_intervals_decide_the_same(day: Path, rules: dict[str, Any], interval: dt.timedelta) -> None:
    policy = parse_policy({"idle": rules})
    old, new = _both(day, policy, interval)
    assert new == old


def test_a_metrics_outage_trips_the_breaker_the_same_way(tmp_path: Path) -> None:
    workload = generate(150, hours=24, seed=7)
    first = 8 * 60  # every working GPU reads 0% from hour 8 (bench/idle_quality.py's outage)
    hit = [
        replace(i, gpu_utilization=[u if m < first or u is None else 0.0 for m, u in enumerate(i.gpu_utilization)])
        for i in workload.instances
        if all(i.working)
    ]
    path = tmp_path / "outage.csv"
    Workload(start=workload.start, minutes=workload.minutes, instances=hit).write_csv(path)
    old, new = _both(path, parse_policy({}))
    assert new == old
    assert new["summary"]["breaker_trips"] and new["summary"]["stops"] == 0


def test_stretches_apart_are_replayed_apart(tmp_path: Path) -> None:
    """Two days a week apart: the gap is skipped, launch grace counts from the first sample in the file."""
    first = generate(20, hours=6, seed=3)
    later = generate(20, hours=6, seed=4, start=first.start + dt.timedelta(days=7))
    renamed = [replace(i, id=f"i-{n:017x}") for n, i in enumerate(later.instances[:12])]
    buffer = io.StringIO()
    first.write_csv(buffer)
    text = buffer.getvalue()
    buffer = io.StringIO()
    Workload(start=later.start, minutes=later.minutes, instances=renamed + later.instances[12:]).write_csv(buffer)
    path = tmp_path / "gap.csv"
    path.write_text(text + buffer.getvalue().split("\n", 1)[1])
    old, new = _both(path, parse_policy({"idle": {"max_fleet_percent": 100}}))
    assert new == old
    assert new["summary"]["sweeps"] < 7 * 96  # the week between is not swept


def test_a_file_the_fast_reader_does_not_vouch_for_is_read_row_by_row(tmp_path: Path) -> None:
    """Values Python reads but DuckDB's cast might not, metric names with tabs: the careful reader decides."""
    rows = ["timestamp,instance_id,metric,value"]
    for minute in range(4 * 60):
        stamp = 1_793_577_600 + 60 * minute
        rows.append(f"{stamp},i-a,gpu_utilization\t,1_0" if minute == 5 else f"{stamp},i-a,gpu_utilization,0.2")
        rows.append(f"{stamp},i-a,gpu_memory_used,8192")
    path = tmp_path / "odd.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(columnar.Unsure):
        columnar.load(path, "MB", tmp_path)
    old, new = _both(path, parse_policy({}))
    assert new == old and new["summary"]["verdicts"].get("busy")  # the 10% minute keeps it busy for two hours


def test_the_replay_holds_a_window_not_the_history(day: Path, tmp_path: Path) -> None:
    samples = columnar.load(day, "MB", tmp_path)
    widths: list[int] = []
    cover = columnar.Window.cover

    def watched(self: columnar.Window, lo: int, hi: int) -> None:
        cover(self, lo, hi)
        widths.append(self.data.shape[2])

    try:
        columnar.Window.cover = watched  # type: ignore[method-assign]
        columnar.replay_columnar(samples, parse_policy({}), QUARTER)
    finally:
        columnar.Window.cover = cover  # type: ignore[method-assign]
    lookback = 120 + 15 + 1
    assert widths and max(widths) <= lookback + 2 * columnar.PART_MINUTES < 24 * 60


def test_the_generator_streamed_into_arrays_decides_as_its_csv_file(tmp_path: Path) -> None:
    """No CSV between the workload generator and the replay: the same fleet, the same decisions as from its file."""
    instances, hours = 40, 12
    policy = parse_policy({"idle": {"max_fleet_percent": 100, "max_actions_per_sweep": 3}})
    path = tmp_path / "fleet.csv"
    generate(instances, hours=hours, seed=7).write_csv(path)
    from_file, file_gaps = replay_file(path, policy, QUARTER)
    store = tmp_path / "store"
    for chunk in range(3):  # chunks of consecutive instances, as parallel generator processes write them
        columnar.write_chunk(store, chunk, stream(instances, hours=hours, seed=7, part=(chunk, 3)))
    streamed, gaps = columnar.replay_columnar(columnar.Store(store), policy, QUARTER)
    assert gaps == file_gaps == []
    assert to_json(streamed, policy) == to_json(from_file, policy)
    summary = to_json(streamed, policy)["summary"]
    assert summary["stops"] and summary["verdicts"].get("deferred")  # the rate limit's queue was exercised


def test_the_arrow_reader_and_the_partitioned_one_decide_the_same(day: Path, tmp_path: Path) -> None:
    """Arrow's one-pass reader (partition files) and the DuckDB/Parquet reader give the same ids and decisions."""
    spilled = spill.read_csv(day, "MB", tmp_path / "spill", columnar.LOADED)
    partitioned = columnar.load_partitions(day, "MB", tmp_path)
    assert spilled.ids == partitioned.ids and list(spilled.minutes) == list(partitioned.minutes)
    policy = parse_policy({"idle": {"max_fleet_percent": 100}})
    assert to_json(columnar.replay_columnar(spilled, policy, QUARTER)[0], policy) == to_json(
        columnar.replay_columnar(partitioned, policy, QUARTER)[0], policy
    )
