"""``governor status --table``: the fleet as the idle sweep left it, one line per GPU instance, on moto.

The sweep is the real idle handler writing to a DynamoDB ledger on the emulator; the command reads that table and
EC2, as an operator's would after ``cdk deploy``."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.fanout import TargetLedger
from governor.idle.handler import handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli import fleet_status
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.main import main
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics

TABLE = "governor-ledger"
HUB = ["--table", TABLE, "--region", "us-east-1"]


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Three GPU instances (idle, busy, no GPU data), one stopped and one without an owner tag, after one sweep."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(fleet_status, "clock", lambda: T0 + dt.timedelta(minutes=10))
    with mock_aws():
        create_ledger_table(TABLE)
        ec2 = boto3.client("ec2", region_name="us-east-1")
        idle, busy, dark = _launch(ec2, "g5.xlarge", 3)
        stopped = _launch(ec2, "p4d.24xlarge")[0]
        ec2.stop_instances(InstanceIds=[stopped])
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        nobody = ec2.run_instances(ImageId=image, InstanceType="g6.xlarge", MinCount=1, MaxCount=1)["Instances"][0]
        _metrics(idle, 0.3)
        _metrics(busy, 75.0)
        _metrics(nobody["InstanceId"], 80.0)
        policy = parse_policy({"idle": {"launch_grace_minutes": 0, "max_fleet_percent": 100}})
        yield policy, {"idle": idle, "busy": busy, "dark": dark, "stopped": stopped, "nobody": nobody["InstanceId"]}


def _sweep(ledger: Any, policy: Any, **where: Any) -> dict[str, Any]:
    runtime = Runtime(policy, ledger, MemorySink(), MemoryDeadLetters(), "us-east-1")
    event = _event(T0, "sweep-1")
    event.update(where)
    return handle(event, runtime, _aws())


def test_one_line_per_gpu_instance_with_owner_idle_time_warning_and_why(
    swept: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, ids = swept
    assert _sweep(DynamoLedger(TABLE, region="us-east-1"), policy)["status"] == "swept"
    assert main(["status", *HUB]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["INSTANCE", "OWNER", "TEAM", "TYPE", "STATE"]
    rows = {line.split()[0]: line for line in out[1:-1]}
    assert set(rows) == set(ids.values())  # the m5-free GPU fleet, stopped instance included
    warned = rows[ids["idle"]]
    due = (T0 + dt.timedelta(minutes=policy.idle.warning_minutes)).strftime("%Y-%m-%d %H:%M")
    assert (
        warned.split()[1] == "ana" and "vision" in warned
    )  # the one name every surface gives the owner and "g5.xlarge" in warned and "running" in warned
    assert "10 min" in warned and f"report (would stop) at {due}" in warned  # shipped policy: report-only
    assert "busy:" in rows[ids["busy"]] and "unmonitored:" in rows[ids["dark"]]
    assert "stopped" in rows[ids["stopped"]] and "p4d.24xlarge" in rows[ids["stopped"]]
    assert rows[ids["nobody"]].split()[1:3] == ["unknown", "unknown"]
    assert out[-1].startswith("5 GPU instances (") and "1 without an owner tag" in out[-1]
    assert "last sweep" in out[-1] and "10 min ago" in out[-1]

    assert main(["status", *HUB, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {row["instance"]: row for row in data["instances"]}
    assert by_id[ids["idle"]]["idle_minutes"] == 10 and by_id[ids["idle"]]["status"] == "warned"
    assert by_id[ids["idle"]]["warned_at"] == T0.strftime("%Y-%m-%d %H:%M")
    assert by_id[ids["busy"]]["why_not_idle"].startswith("busy:") and by_id[ids["busy"]]["idle_minutes"] is None
    assert data["last_sweep"]["event_id"] == "sweep-1" and data["breaker"] == {"open": False, "held": []}


def test_an_organisation_target_is_read_from_the_ledger_and_an_unknown_one_is_an_error(
    swept: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, ids = swept
    ledger = TargetLedger(DynamoLedger(TABLE, region="us-east-1"), "222222222222", "us-east-1")
    _sweep(ledger, policy, account="222222222222", region="us-east-1")
    assert main(["status", *HUB, "--target", "222222222222/us-east-1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {row["instance"]: row for row in data["instances"]}
    assert set(by_id) == {ids["idle"], ids["busy"], ids["dark"], ids["nobody"]}  # what that target's sweep judged
    assert by_id[ids["idle"]]["owner"] == "ana" and by_id[ids["idle"]]["type"] == "g5.xlarge"
    assert by_id[ids["idle"]]["state"] == "running at last sweep"

    for command in (["status", *HUB, "--target", "333333333333/us-east-1"],
                    ["idle", "status", *HUB, "--target", "333333333333/us-east-1"]):  # fmt: skip
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "333333333333" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status"], "--table NAME"),
        (["status", "--table", TABLE, "--target", "2222/us-east-1"], "--target '2222/us-east-1'"),
        (["status", "--stack", "S", "--target", "222222222222/us-east-1"], "use it with --table"),
    ],
)
def test_bad_fleet_flags_exit_2_with_one_line(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
