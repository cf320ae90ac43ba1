"""``governor backtest --from-cloudwatch`` on the emulator: the fleet's own history, read at GetMetricData's limits,
replayed by the same decisions, reported per team; the saved Parquet file replays to the same result."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.idle.domain import GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION
from governor_cli.history import MAX_QUERIES, SLICE_MINUTES, CloudWatchHistory, plan
from governor_cli.main import main

NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
HOURS = 10


def _launch(ec2: Any, instance_type: str, team: str) -> str:
    image = ec2.describe_images()["Images"][0]["ImageId"]
    made = ec2.run_instances(
        ImageId=image,
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": team}]}],
    )
    return str(made["Instances"][0]["InstanceId"])


def _history(cloudwatch: Any, instance_id: str, busy_until: int) -> None:
    """HOURS of one-minute samples ending now; busy (80%, 250 W) for the first ``busy_until`` minutes."""
    data = []
    for minute in range(HOURS * 60):
        at = NOW - dt.timedelta(minutes=HOURS * 60 - minute)
        busy = minute < busy_until
        for name, value in (
            ("nvidia_smi_utilization_gpu", 80.0 if busy else 0.0),
            ("nvidia_smi_memory_used", 20_000.0),
            ("nvidia_smi_power_draw", 250.0 if busy else 26.0 + (minute % 5) * 0.3),
        ):
            data.append(
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                    "Timestamp": at,
                    "Value": value,
                }
            )
    for start in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])


@pytest.fixture
def fleet() -> Any:
    from governor_cli.demo.emulator import filter_wildcards

    with mock_aws(), filter_wildcards():  # the emulator matches wildcard filter values as AWS does
        ec2 = boto3.client("ec2", region_name="us-east-1")
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        ids = {
            "vision-idle": _launch(ec2, "g5.xlarge", "vision"),
            "vision-busy": _launch(ec2, "g5.xlarge", "vision"),
            "speech-idle": _launch(ec2, "g5.12xlarge", "speech"),
        }
        _history(cloudwatch, ids["vision-idle"], busy_until=60)
        _history(cloudwatch, ids["vision-busy"], busy_until=HOURS * 60)
        _history(cloudwatch, ids["speech-idle"], busy_until=120)
        yield ids


def test_the_fleets_own_history_is_replayed_and_reported_per_team(
    fleet: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "history.parquet"
    code = main(
        ["backtest", "--from-cloudwatch", "--region", "us-east-1", "--days", "1", "--save", str(saved), "--json"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    data = json.loads(out.out)
    stops = {i for i, r in data["instances"].items() if any(a["type"] == "stop" for a in r["actions"])}
    assert stops == {fleet["vision-idle"], fleet["speech-idle"]}
    teams = data["teams"]
    assert teams["vision"]["instances"] == 2 and teams["vision"]["stopped"] == 1 and teams["speech"]["stopped"] == 1
    # g5.12xlarge: 4 GPUs at $5.672 an hour (pricing.prices): the saving counts GPUs and dollars
    speech_hours = data["instances"][fleet["speech-idle"]]["gpu_hours_reclaimed"]
    assert teams["speech"]["gpu_hours_saved"] == pytest.approx(4 * speech_hours, abs=0.02)
    assert teams["speech"]["usd_saved"] == pytest.approx(5.672 * speech_hours, abs=0.02)
    assert "GetMetricData" in out.err and "calls" in out.err  # the plan and the progress, on stderr
    assert (
        data["summary"]["cloudwatch"]["calls"]
        == plan(3, [GPU_UTILIZATION, GPU_MEMORY_USED, GPU_POWER], NOW - dt.timedelta(days=1), NOW)[2]
    )
    # the saved file is the same history: replayed by --metrics it decides the same
    assert main(["backtest", "--metrics", str(saved), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert {i: r["actions"] for i, r in again["instances"].items()} == {
        i: r["actions"] for i, r in data["instances"].items()
    }


def test_a_tag_filter_and_instance_ids_narrow_the_fleet(
    fleet: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            ["backtest", "--from-cloudwatch", "--region", "us-east-1", "--days", "1", "--tag", "team=speech", "--json"]
        )
        == 0
    )
    assert set(json.loads(capsys.readouterr().out)["instances"]) == {fleet["speech-idle"]}
    assert (
        main(
            [
                "backtest",
                "--from-cloudwatch",
                "--region",
                "us-east-1",
                "--days",
                "1",
                "--instance-ids",
                fleet["vision-busy"],
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert set(data["instances"]) == {fleet["vision-busy"]} and data["summary"]["stops"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "16"], "15 days"),
        (["--days", "1", "--tag", "team"], "KEY=VALUE"),
        (["--days", "1", "--tag", "team=nobody"], "no GPU instance matches team=nobody"),
    ],
)
def test_bad_requests_are_one_line_and_exit_2(
    fleet: dict[str, str], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backtest", "--from-cloudwatch", "--region", "us-east-1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_metrics_and_from_cloudwatch_options_do_not_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text("timestamp,instance_id,metric,value\n2026-11-02T00:00:00Z,i-a,gpu_utilization,1\n")
    assert main(["backtest", "--metrics", str(csv), "--region", "us-east-1"]) == 2
    assert "--region goes with --from-cloudwatch" in capsys.readouterr().err


class _Counting:
    """A CloudWatch client that enforces GetMetricData's limits and answers with empty series."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        queries = kwargs["MetricDataQueries"]
        minutes = int((kwargs["EndTime"] - kwargs["StartTime"]).total_seconds() // 60)
        assert len(queries) <= 500 and len(queries) * minutes <= 100_800
        self.calls.append((len(queries), minutes))
        return {"MetricDataResults": [{"Id": q["Id"], "Timestamps": [], "Values": []} for q in queries]}


def test_a_fortnight_of_a_large_fleet_is_read_at_the_call_limits() -> None:
    client = _Counting()
    start = NOW - dt.timedelta(days=15)
    ids = [f"i-{n:017x}" for n in range(1200)]
    seen: list[tuple[int, int]] = []
    history = CloudWatchHistory(client, progress=lambda done, total: seen.append((done, total)))
    assert list(history.groups(ids, [GPU_UTILIZATION, GPU_MEMORY_USED, GPU_POWER], start, NOW)) == []
    slices, queries, calls = plan(1200, [GPU_UTILIZATION, GPU_MEMORY_USED, GPU_POWER], start, NOW)
    assert queries == 3600 and slices == math.ceil(15 * 1440 / SLICE_MINUTES) and calls == slices * 8
    assert len(client.calls) == calls and seen[-1] == (calls, calls)
    full = [c for c in client.calls if c[0] == MAX_QUERIES and c[1] == SLICE_MINUTES]
    assert len(full) >= calls - 2 * slices  # every call at 500 queries x 201 minutes but each slice's last
