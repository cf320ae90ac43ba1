"""``governor backtest``: the idle policy replayed over a metrics CSV, as the sweep would have run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor_cli.main import main
from governor_cli.sim.workload import generate

HEADER = "timestamp,instance_id,metric,value\n"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["backtest", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _idle_rows(instance_id: str, hours: int, start: int = 1_793_577_600, util: float = 0.2) -> list[str]:
    rows = []
    for minute in range(hours * 60):
        stamp = start + 60 * minute
        rows.append(f"{stamp},{instance_id},gpu_utilization,{util}")
        rows.append(f"{stamp},{instance_id},gpu_memory_used,{8 * 1024}")  # MB, the agent's unit
    return rows


def test_idle_box_is_warned_then_stopped_and_busy_box_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + "\n".join(_idle_rows("i-idle", 6) + _idle_rows("i-busy", 6, util=70.0)) + "\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("idle: {max_fleet_percent: 50}\n")
    code, out, _ = _run(capsys, "--metrics", str(csv), "--policy", str(policy), "--json")
    assert code == 0
    result = json.loads(out)
    # data starts 00:00; at 01:15 the 90 min warning window (2 h window - 30 min warning) holds 75 of 90 samples
    # (>= min_samples_fraction 0.8): warn. At 01:45 the whole 2 h window holds 105 of 120 samples and the warning is
    # 30 min old: stop. The data ends at 06:00, so 4.25 hours are reclaimed.
    assert result["instances"]["i-idle"]["actions"] == [
        {"at": "2026-11-02T01:15:00Z", "type": "warn"},
        {"at": "2026-11-02T01:45:00Z", "type": "stop"},
    ]
    assert result["instances"]["i-idle"]["gpu_hours_reclaimed"] == 4.25
    assert result["instances"]["i-busy"] == {"actions": [], "gpu_hours_reclaimed": 0}
    summary = result["summary"]
    assert summary["warnings"] == 1 and summary["stops"] == 1 and summary["gpu_hours_reclaimed"] == 4.25
    assert summary["sweeps"] == 24 and summary["held_back_sweeps"] == []


def test_interval_and_rate_limit_are_applied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + "\n".join(_idle_rows("i-idle", 6) + _idle_rows("i-busy", 6, util=70.0)) + "\n")
    code, out, _ = _run(capsys, "--metrics", str(csv), "--interval", "1h", "--policy", "governor.yaml", "--json")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["sweeps"] == 6 and summary["interval_minutes"] == 60
    # warned at 02:00 and stopped at 03:00: in a fleet of two the 20% bound still allows one action (never rounded
    # to none), and nothing is held back
    assert summary["stops"] == 1 and summary["held_back_sweeps"] == [] and summary["breaker_trips"] == []


def test_memory_unit_flag_reads_bytes_exports_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default unit is the agent's MB; a file exported in bytes says so with --memory-unit bytes."""
    csv = tmp_path / "m.csv"
    rows = []
    for minute in range(6 * 60):
        stamp = 1_793_577_600 + 60 * minute
        rows.append(f"{stamp},i-a,gpu_utilization,0.2")
        rows.append(f"{stamp},i-a,gpu_memory_used,{(2 if minute % 2 else 40) * 1024**3}")  # bytes, swinging
    csv.write_text(HEADER + "\n".join(rows) + "\n")
    code, out, _ = _run(capsys, "--metrics", str(csv), "--memory-unit", "bytes", "--json")
    assert code == 0 and json.loads(out)["summary"]["verdicts"].get("busy", 0) > 0
    assert json.loads(out)["summary"]["stops"] == 0  # 38 GiB of movement is activity


def test_text_output_lists_actions_and_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "m.csv"
    generate(20, hours=8, seed=5).write_csv(csv)
    code, out, _ = _run(capsys, "--metrics", str(csv))
    assert code == 0
    assert "backtest of" in out and "20 instances" in out and "GPU-hours reclaimed" in out
    assert "verdicts over all sweeps:" in out


def test_iso_and_epoch_timestamps_and_unknown_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "m.csv"
    rows = _idle_rows("i-a", 3)
    iso = [r.replace("1793577600,", "2026-11-02T00:00:00+00:00,", 1) for r in rows]
    csv.write_text(HEADER + "\n".join([*iso, "1793577600,i-a,nvidia_smi_temperature_gpu,40"]) + "\n")
    code, out, _ = _run(capsys, "--metrics", str(csv), "--json")
    assert code == 0 and json.loads(out)["summary"]["instances"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("time,id,metric,value\n", "line 1: header must be"),
        (HEADER + "1793577600,i-a,gpu_utilization,0.1\n1793577660,i-a,gpu_utilization,abc\n", "line 3: value 'abc'"),
        (HEADER + "yesterday,i-a,gpu_utilization,1\n", "line 2: timestamp 'yesterday'"),
        (HEADER + "1793577600,i-a,gpu_utilization\n", "line 2: expected 4 fields"),
        (HEADER + "1793577600,i-a,gpu_utilization,-3\n", "line 2: value '-3'"),
        ("", "empty file"),
        (HEADER + "1793577600,i-a,other_metric,1\n", "no gpu_utilization"),
    ],
)
def test_malformed_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str
) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text(body)
    code, out, err = _run(capsys, "--metrics", str(csv))
    assert code == 2 and not out
    assert str(csv) in err and message in err and "Traceback" not in err


def test_missing_file_and_bad_interval_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--metrics", str(tmp_path / "nope.csv"))
    assert code == 2 and "cannot read" in err
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + "\n".join(_idle_rows("i-a", 1)) + "\n")
    code, _, err = _run(capsys, "--metrics", str(csv), "--interval", "30s")
    assert code == 2 and "--interval" in err


def test_a_day_of_minute_samples_for_150_instances_replays_every_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Speed is measured in bench/ (bench/backtest_scale.py, bench/README.md section 7), never asserted here."""
    csv = tmp_path / "day.csv"
    generate(150, hours=24).write_csv(csv)
    code, out, _ = _run(capsys, "--metrics", str(csv), "--json")
    assert code == 0 and json.loads(out)["summary"]["instances"] == 150


def test_instances_file_makes_the_replay_honour_the_purchase_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: with the fleet as `aws ec2 describe-instances` prints it, an idle Capacity Block instance is warned
    about and reported, never stopped, and its hours are not counted as reclaimed; the On-Demand one is."""
    block, plain = "i-0b10c4000000000aa", "i-0d000000000000001"
    csv = tmp_path / "m.csv"
    csv.write_text(HEADER + "\n".join(_idle_rows(block, 6) + _idle_rows(plain, 6)) + "\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("idle: {max_fleet_percent: 100, enforce: true}\n")
    shape = {"InstanceType": "p5.48xlarge", "State": {"Code": 16, "Name": "running"}}
    described = {
        "Reservations": [
            {
                "Instances": [
                    {
                        **shape,
                        "InstanceId": block,
                        "LaunchTime": "2026-11-01T00:00:00+00:00",
                        "InstanceLifecycle": "capacity-block",
                        "CapacityReservationId": "cr-0a1b2c3d4e5f60718",
                    },
                    {**shape, "InstanceId": plain, "LaunchTime": "2026-11-01T00:00:00+00:00"},
                ]
            }
        ]
    }
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(described))
    args = ("--metrics", str(csv), "--policy", str(policy), "--json")
    code, out, _ = _run(capsys, *args, "--instances", str(instances))
    assert code == 0
    result = json.loads(out)
    assert [a["type"] for a in result["instances"][block]["actions"]] == ["warn"]
    assert result["instances"][block]["gpu_hours_reclaimed"] == 0
    assert result["instances"][plain]["gpu_hours_reclaimed"] == 4.25
    assert result["summary"]["gpu_hours_reclaimed"] == 4.25 and result["summary"]["verdicts"]["reported"] >= 1
    # without the file the replay cannot know: both count (what it did before)
    _, out, _ = _run(capsys, *args)
    assert json.loads(out)["summary"]["gpu_hours_reclaimed"] == 8.5
    instances.write_text('{"Instances": []}')
    code, _, err = _run(capsys, *args, "--instances", str(instances))
    assert code == 2 and "not a DescribeInstances response" in err
