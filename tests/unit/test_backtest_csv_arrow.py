"""The metrics CSV read once by Arrow into partition files (issue 50 item 4): the row-by-row reader's samples exactly,
or a doubt that sends the file to that reader; any row order; a pipe; progress on a terminal.

The row-by-row reader (``parse_metrics``) is the reference for every sample: a file the fast reader accepts must hold
exactly the samples that reader reads (same instances, minutes and values), and a file it refuses must be one the
careful reader then reads or refuses with the line.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from governor.idle.domain import GPU_MEMORY_USED
from governor.policy import parse_policy
from governor_cli.commands.backtest import parse_metrics, replay_file, replay_stretches, to_json
from governor_cli.main import main
from governor_cli.sim import columnar, spill
from governor_cli.sim.metrics_file import MetricsFileError, Unsure
from governor_cli.sim.workload import generate
from tests.unit.test_backtest_columnar import QUARTER

HEADER = "timestamp,instance_id,metric,value\n"
ROOT = Path(__file__).resolve().parents[2]


def _spilled(path: Path, folder: Path, unit: str = "MB") -> dict[tuple[str, str, float], float]:
    """Every sample the fast reader wrote, keyed as the row-by-row reader's series are (id, metric, epoch second)."""
    samples = spill.read_csv(path, unit, folder, columnar.LOADED)
    found: dict[tuple[str, str, float], float] = {}
    for part in sorted(samples.parts):
        lo = part * spill.PART_MINUTES
        data = np.full((len(samples.metrics), len(samples.ids), spill.PART_MINUTES), np.nan)
        samples.fill(data, lo, part, lo, lo + spill.PART_MINUTES)
        for m, i, t in zip(*np.nonzero(~np.isnan(data)), strict=True):
            found[(samples.ids[i], samples.metrics[m], float((lo + t) * 60))] = float(data[m, i, t])
    return found


def _careful(path: Path, unit: str = "MB") -> dict[tuple[str, str, float], float]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        signals = parse_metrics(handle, str(path), unit)
    return {
        (instance_id, metric, t): v
        for instance_id, series in signals.items()
        for metric, s in series.items()
        for t, v in zip(s.times, s.values, strict=True)
    }


@pytest.mark.parametrize(
    "row",
    [
        "1793577600,i-a,gpu_utilization,1",  # epoch seconds
        "1793577659.9,i-a,gpu_utilization,1",  # fractional epoch seconds: the minute they fall in
        "2026-11-02T00:00:00+00:00,i-a,gpu_utilization,1",  # an offset
        "2026-11-02T05:30:00+05:30,i-a,gpu_utilization,1",  # another offset
        "2026-11-02 00:00:00,i-a,gpu_utilization,1",  # a space for the T, no zone: UTC
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,1e3",  # an exponent
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,+4.25",  # a sign
        "2026-11-02T00:00:00Z, i-a ,gpu_utilization,1",  # spaces around the id (stripped)
        "2026-11-02T00:00:00Z,i a,gpu_utilization,1",  # a space inside the id
        "2026-11-02T00:00:00Z,i-a,gpu_utilization ,1",  # a known metric behind a space (stripped)
        "2026-11-02T00:00:00Z,i-a,network_in,x",  # another metric: skipped whatever its value
        "2026-11-02T00:00:00Z,,network_in,1",  # another metric: skipped whatever its id
        "2026-11-02T00:00:30Z,i-a,gpu_utilization,9.5",  # two samples in one minute: the larger
    ],
)
def test_rows_the_fast_reader_reads_hold_the_row_by_row_readers_samples(tmp_path: Path, row: str) -> None:
    path = tmp_path / "odd.csv"
    path.write_text(f"{HEADER}2026-11-02T00:01:00Z,i-a,gpu_utilization,2.5\n{row}\n")
    assert _spilled(path, tmp_path / "spill") == _careful(path)


@pytest.mark.parametrize(
    "row",
    [
        '2026-11-02T00:00:00Z,"i-a",gpu_utilization,1',  # quotes: the csv module unquotes, Arrow is not asked to
        '2026-11-02T00:00:00Z,i-a,"gpu_utilization,x",1',  # a quoted comma in a row of a skipped metric
        "2026-02-30T00:00:00Z,i-a,gpu_utilization,1",  # no such day
        "2026-11-02T24:00:00Z,i-a,gpu_utilization,1",  # no such hour
        "2200-01-01T00:00:00Z,i-a,gpu_utilization,1",  # out of the supported range
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,1.2.3",  # two points
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,-1",  # negative
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,nan",  # not a number
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,inf",  # not finite
        "2026-11-02T00:00:00Z,i-a,gpu_utilization, 1",  # float() strips, Arrow's cast does not: careful reader
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,1_0",  # float() reads it, Arrow's cast does not
        "2026-11-02T00:00:00Z,,gpu_utilization,1",  # an empty id
        "2026-11-02T00:00:00Z,i-\x07,gpu_utilization,1",  # an id that is not printable
        "2026-11-02T00:00:00Z,i-a,gpu_utilization,1,5",  # five fields
        "2026-11-02T00:00:00Z,i-a,gpu_utilization",  # three fields
        "   ",  # a line of spaces (the row-by-row reader skips it; Arrow would see one field)
    ],
)
def test_rows_the_fast_reader_doubts_go_to_the_careful_reader(tmp_path: Path, row: str) -> None:
    path = tmp_path / "odd.csv"
    path.write_text(f"{HEADER}2026-11-02T00:01:00Z,i-a,gpu_utilization,2.5\n{row}\n")
    with pytest.raises(Unsure):
        spill.read_csv(path, "MB", tmp_path / "spill", columnar.LOADED)
    try:
        careful = _careful(path)
    except MetricsFileError:
        return  # the careful reader names the line
    policy = parse_policy({})
    assert careful and to_json(replay_file(path, policy, QUARTER)[0], policy)["summary"]["instances"] == 1


@pytest.mark.parametrize(
    "text",
    [
        "\ufeff" + HEADER,  # a byte-order mark, as spreadsheets write
        "Timestamp, Instance_ID ,METRIC,value\r\n",  # case and spaces, CRLF
    ],
)
def test_headers_the_row_by_row_reader_accepts_are_read(tmp_path: Path, text: str) -> None:
    path = tmp_path / "header.csv"
    path.write_bytes(
        (
            text + "2026-11-02T00:01:00Z,i-a,gpu_utilization,2.5\r\n\r\n2026-11-02T00:02:00Z,i-a,gpu_memory_used,7\r\n"
        ).encode()
    )
    assert _spilled(path, tmp_path / "spill") == _careful(path)


def test_values_are_read_as_float_reads_them(tmp_path: Path) -> None:
    """Random decimal texts, with and without points and exponents: the same float64 as float(), memory scaled."""
    rng = random.Random(50)
    texts = ["0", "007", ".5", "5.", "0.1", "123456789.12345", "4.9e-324", "1.7976931348623157e308"]
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        point = rng.randint(0, len(digits))
        text = digits[:point] + "." + digits[point:] if rng.random() < 0.7 else digits
        if rng.random() < 0.2:
            text += f"e{rng.choice(['', '-', '+'])}{rng.randint(0, 30)}"
        texts.append(text)
    rows = [
        f"2026-11-02T{n // 60 % 24:02d}:{n % 60:02d}:00Z,i-{n // 1440},gpu_memory_used,{v}" for n, v in enumerate(texts)
    ]
    path = tmp_path / "values.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    found = _spilled(path, tmp_path / "spill", "MiB")
    assert found == _careful(path, "MiB")
    assert sorted(found.values()) == sorted(float(t) for t in texts)
    assert _spilled(path, tmp_path / "bytes", "bytes") == _careful(path, "bytes")


def _rows(path: Path) -> tuple[str, list[str]]:
    header, *rows = path.read_text().splitlines(keepends=True)
    return header, rows


@pytest.mark.parametrize("order", ["by instance", "shuffled", "reversed"])
def test_any_row_order_decides_as_the_generators_file(tmp_path: Path, order: str) -> None:
    """A CloudWatch export comes one instance after another; the partitions put it back in time order."""
    path = tmp_path / "fleet.csv"
    generate(60, hours=10, seed=7).write_csv(path)
    header, rows = _rows(path)
    if order == "by instance":
        rows.sort(key=lambda row: row.split(",")[1])
    elif order == "shuffled":
        random.Random(3).shuffle(rows)
    else:
        rows.reverse()
    other = tmp_path / "other.csv"
    other.write_text(header + "".join(rows))
    policy = parse_policy({"idle": {"max_fleet_percent": 100, "max_actions_per_sweep": 3}})
    expected = to_json(replay_file(path, policy, QUARTER)[0], policy)
    assert to_json(replay_file(other, policy, QUARTER)[0], policy) == expected
    assert expected["summary"]["stops"] and expected["summary"]["verdicts"].get("deferred")


def test_the_spilled_file_decides_as_the_row_by_row_replay_across_partitions_and_gaps(tmp_path: Path) -> None:
    """Stretches whose edges fall inside a partition: membership from the partition's own records."""
    first = generate(12, hours=5, seed=3)
    path = tmp_path / "gap.csv"
    buffer = io.StringIO()
    first.write_csv(buffer)
    later = generate(12, hours=3, seed=4, start=first.start + dt.timedelta(hours=7, minutes=50))
    more = io.StringIO()
    later.write_csv(more)
    path.write_text(buffer.getvalue() + more.getvalue().split("\n", 1)[1])
    policy = parse_policy({"idle": {"max_fleet_percent": 100, "window_minutes": 60, "warning_minutes": 0}})
    with path.open(encoding="utf-8", newline="") as handle:
        old, old_gaps = replay_stretches(parse_metrics(handle, str(path)), policy, QUARTER)
    samples = spill.read_csv(path, "MB", tmp_path / "spill", columnar.LOADED)
    new, gaps = columnar.replay_columnar(samples, policy, QUARTER)
    assert gaps == old_gaps and len(gaps) == 1
    assert to_json(new, policy) == to_json(old, policy)


def _command(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "governor_cli", "backtest", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env={"PYTHONPATH": "lambdas:cli:.", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_a_pipe_is_read_once_and_decides_as_the_file(tmp_path: Path) -> None:
    """``--metrics /dev/stdin`` (or ``<(zstdcat export.csv.zst)``): the bytes cannot be read twice, and need not be."""
    path = tmp_path / "fleet.csv"
    generate(20, hours=6, seed=7).write_csv(path)
    from_file = _command("--metrics", str(path), "--json")
    piped = _command("--metrics", "/dev/stdin", "--json", stdin=path.read_bytes())
    assert piped.returncode == 0, piped.stderr.decode()
    assert json.loads(piped.stdout)["summary"] == json.loads(from_file.stdout)["summary"]


def test_a_pipe_the_fast_reader_doubts_exits_2_with_one_line(tmp_path: Path) -> None:
    body = f"{HEADER}2026-11-02T00:01:00Z,i-a,gpu_utilization,2.5\n2026-11-02T00:02:00Z,i-a,gpu_utilization,abc\n"
    piped = _command("--metrics", "/dev/stdin", stdin=body.encode())
    err = piped.stderr.decode()
    assert piped.returncode == 2 and not piped.stdout
    assert len(err.strip().splitlines()) == 1 and "/dev/stdin" in err and "abc" in err and "Traceback" not in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_reading_the_file_shows_its_progress_in_bytes_on_a_terminal_only(
    terminal: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from governor_cli import progress

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)  # the bar's ~2 s delay, without waiting for it
    path = tmp_path / "fleet.csv"
    generate(10, hours=3, seed=7).write_csv(path)
    stderr: Any = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["backtest", "--metrics", str(path), "--json"]) == 0
    json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    drawn = stderr.getvalue()
    if terminal:
        assert "reading fleet.csv" in drawn and "B/s" in drawn
    else:
        assert drawn == ""


def test_memory_is_read_in_the_unit_given(tmp_path: Path) -> None:
    path = tmp_path / "memory.csv"
    path.write_text(f"{HEADER}2026-11-02T00:01:00Z,i-a,{GPU_MEMORY_USED},1000\n")
    assert _spilled(path, tmp_path / "a", "MB") == _careful(path, "MB")
    assert _spilled(path, tmp_path / "b", "bytes") == _careful(path, "bytes")


@pytest.mark.parametrize("held", [True, False])
def test_held_in_memory_or_written_to_partition_files_the_samples_and_decisions_are_the_row_by_row_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """A file that fits keeps its samples in memory, a larger one (or a pipe) goes through partition files on disk:
    ids first seen out of order, stretch edges inside a partition, either way the careful reader's samples."""
    first = generate(12, hours=5, seed=3)
    buffer = io.StringIO()
    first.write_csv(buffer)
    later = generate(12, hours=3, seed=4, start=first.start + dt.timedelta(hours=7, minutes=50))
    more = io.StringIO()
    later.write_csv(more)
    header, *rows = (buffer.getvalue() + more.getvalue().split("\n", 1)[1]).splitlines(keepends=True)
    random.Random(5).shuffle(rows)
    path = tmp_path / "shuffled.csv"
    path.write_text(header + "".join(rows))
    if not held:
        monkeypatch.setattr(spill, "HELD_CSV_BYTES", 0)
    assert _spilled(path, tmp_path / "spill") == _careful(path)
    assert bool(list((tmp_path / "spill").glob("part*.bin"))) is not held
    policy = parse_policy({"idle": {"max_fleet_percent": 100, "window_minutes": 60, "warning_minutes": 0}})
    with path.open(encoding="utf-8", newline="") as handle:
        old, old_gaps = replay_stretches(parse_metrics(handle, str(path)), policy, QUARTER)
    new, gaps = columnar.replay_columnar(
        spill.read_csv(path, "MB", tmp_path / "again", columnar.LOADED), policy, QUARTER
    )
    assert gaps == old_gaps and len(gaps) == 1
    assert to_json(new, policy) == to_json(old, policy)


@pytest.mark.parametrize(
    "row",
    [
        b"2026-11-02T00:00:00Z,i-\xff,gpu_utilization,1",  # an id that is not UTF-8
        b"2026-11-02T00:00:00\xc3,i-a,gpu_utilization,1",  # a timestamp cut inside a character
        b"2026-11-02T00:00:00Z,i-a,gpu_\xe9,1",  # a metric name in Latin-1
        b"2026-11-02T00:00:00Z,i-a,network_in,\xff",  # a skipped metric's value
        b"2026-11-02T00:00:00Z,i-a,gpu_utilization,1\xc2\xa0",  # a value with a no-break space
    ],
)
def test_bytes_that_are_not_ascii_numbers_or_utf8_text_go_to_the_careful_reader(tmp_path: Path, row: bytes) -> None:
    """The row-by-row reader decodes the file as UTF-8 (and refuses it if it is not); the fast reader decodes each
    distinct id, timestamp and metric name the same way and reads values only as ASCII numbers, else it doubts."""
    path = tmp_path / "bytes.csv"
    path.write_bytes(f"{HEADER}2026-11-02T00:01:00Z,i-a,gpu_utilization,2.5\n".encode() + row + b"\n")
    with pytest.raises(Unsure):
        spill.read_csv(path, "MB", tmp_path / "spill", columnar.LOADED)


def test_ids_in_utf8_beyond_ascii_are_read_as_the_row_by_row_reader_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "names.csv"
    path.write_text(
        f"{HEADER}2026-11-02T00:01:00Z,nœud-é,gpu_utilization,2.5\n2026-11-02T00:02:00Z,節點,gpu_utilization,3\n"
        "2026-11-02T00:02:00Z,nœud-é,network_in,4\n",
        encoding="utf-8",
    )
    assert _spilled(path, tmp_path / "spill") == _careful(path)
