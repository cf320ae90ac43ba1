"""``governor backtest --metrics FILE.parquet``: the same decisions as the row-by-row reference, in any row order."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from governor.policy import parse_policy
from governor_cli.commands.backtest import parse_metrics, replay_file, replay_stretches, to_json
from governor_cli.main import main
from governor_cli.sim import parquet
from governor_cli.sim.workload import generate

QUARTER = dt.timedelta(minutes=15)


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("parquet")
    workload = generate(150, hours=24, seed=7)
    workload.write_csv(folder / "day.csv")
    groups = parquet.workload_groups(workload.instances, int(workload.start.timestamp()), workload.minutes)
    parquet.write(folder / "day.parquet", groups)
    return folder / "day.csv", folder / "day.parquet"


def _reference(csv: Path) -> dict[str, Any]:
    policy = parse_policy({})
    with csv.open(encoding="utf-8") as handle:
        return to_json(replay_stretches(parse_metrics(handle, str(csv)), policy, QUARTER)[0], policy)


def test_the_150_instance_day_from_parquet_gets_the_row_by_row_decisions(day: tuple[Path, Path]) -> None:
    csv, path = day
    policy = parse_policy({})
    assert parquet.is_parquet(path) and not parquet.is_parquet(csv)
    assert pq.ParquetFile(path).num_row_groups == 6  # one per 4 hours, in time order
    assert to_json(replay_file(path, policy, QUARTER)[0], policy) == _reference(csv)


def test_a_file_in_another_order_is_sorted_first_and_decides_the_same(day: tuple[Path, Path], tmp_path: Path) -> None:
    csv, path = day
    table = pq.read_table(path)
    shuffled = table.take(pa.array(sorted(range(table.num_rows), key=lambda k: (k * 7919) % table.num_rows)))

    target = tmp_path / "shuffled.parquet"
    pq.write_table(shuffled, target, row_group_size=100_000)
    policy = parse_policy({})
    assert to_json(replay_file(target, policy, QUARTER)[0], policy) == _reference(csv)


def test_the_command_reads_parquet_and_refuses_a_broken_file_in_one_line(
    day: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = day
    assert main(["backtest", "--metrics", str(path), "--json"]) == 0
    assert '"stops": 68' in capsys.readouterr().out
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + b"\0" * 64)
    assert main(["backtest", "--metrics", str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "broken.parquet" in err and "Traceback" not in err
    wrong = tmp_path / "columns.parquet"
    pq.write_table(pa.table({"time": [1], "id": ["i-a"]}), wrong)
    assert main(["backtest", "--metrics", str(wrong)]) == 2
    assert "columns must include timestamp" in capsys.readouterr().err
