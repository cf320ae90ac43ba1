"""``governor status``: healthy on a healthy deployment, degraded (exit 1) with the reason when a schedule is
disabled or a dead-letter queue holds a message; on moto. ``make deploy-local`` runs it on a stack the real CDK CLI
deployed onto the emulator."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.policy import load_policy
from governor_cli.commands import status
from governor_cli.main import main
from tests.conftest import ROOT

REGION = "us-east-1"


def _resources() -> list[dict[str, Any]]:
    """A stack of one function, one schedule and one DLQ, made through the services' own APIs."""
    iam = boto3.client("iam")
    role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    fn = boto3.client("lambda").create_function(
        FunctionName="GpuFleetGovernor-IdleFunction",
        Runtime="python3.12",
        Role=role,
        Handler="h.h",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )["FunctionArn"]
    queue = boto3.client("sqs").create_queue(QueueName="GpuFleetGovernor-IdleDlq")["QueueUrl"]
    boto3.client("scheduler").create_schedule(
        Name="GpuFleetGovernor-IdleSweep",
        ScheduleExpression="rate(15 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": fn, "RoleArn": role},
    )
    return [
        {"LogicalResourceId": "IdleFunction", "ResourceType": "AWS::Lambda::Function",
         "PhysicalResourceId": "GpuFleetGovernor-IdleFunction"},
        {"LogicalResourceId": "IdleDlq", "ResourceType": "AWS::SQS::Queue", "PhysicalResourceId": queue},
        {"LogicalResourceId": "IdleSweep", "ResourceType": "AWS::Scheduler::Schedule",
         "PhysicalResourceId": "GpuFleetGovernor-IdleSweep"},
    ]  # fmt: skip


def _checks(resources: list[dict[str, Any]]) -> list[status.Check]:
    aws = status.Aws(REGION)
    now = datetime.now(UTC)
    return [
        *status.functions(aws, resources, now),
        *status.schedules(aws, resources),
        *status.queues(aws, resources),
    ]


@mock_aws
def test_a_healthy_deployment_reads_healthy() -> None:
    checks = _checks(_resources())
    assert [c.state for c in checks] == [status.OK, status.OK, status.OK]
    assert "not invoked in 24 h" in checks[0].reason and checks[2].reason == "empty"


@mock_aws
def test_a_disabled_schedule_and_a_dead_letter_are_degraded_with_the_reason() -> None:
    resources = _resources()
    scheduler = boto3.client("scheduler")
    current = scheduler.get_schedule(Name="GpuFleetGovernor-IdleSweep")
    scheduler.update_schedule(
        Name="GpuFleetGovernor-IdleSweep",
        ScheduleExpression=current["ScheduleExpression"],
        FlexibleTimeWindow=current["FlexibleTimeWindow"],
        Target=current["Target"],
        State="DISABLED",
    )
    boto3.client("sqs").send_message(QueueUrl=resources[1]["PhysicalResourceId"], MessageBody="{}")
    checks = {c.area: c for c in _checks(resources)}
    assert checks["schedule"].state == status.DEGRADED and checks["schedule"].reason.startswith("DISABLED")
    assert checks["dlq"].state == status.DEGRADED and "1 message waiting" in checks["dlq"].reason
    assert "DEGRADED" in checks["dlq"].line()


@mock_aws
def test_the_command_exits_1_when_degraded_and_2_for_an_unknown_stack(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["status", "--stack", "Nope", "--region", REGION, "--policy", str(ROOT / "governor.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("governor: stack Nope in us-east-1:") and err.count("\n") == 1
    template = {"Resources": {"Dlq": {"Type": "AWS::SQS::Queue"}}}
    boto3.client("cloudformation").create_stack(StackName="Gov", TemplateBody=json.dumps(template))
    (queue,) = boto3.client("sqs").list_queues()["QueueUrls"]
    boto3.client("sqs").send_message(QueueUrl=queue, MessageBody="{}")
    code = main(["status", "--stack", "Gov", "--region", REGION, "--policy", str(ROOT / "governor.yaml"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["healthy"] is False
    assert {"area": "stack", "subject": "Gov", "state": "ok", "reason": "CREATE_COMPLETE"} in out["checks"]
    assert any(c["area"] == "dlq" and c["state"] == "degraded" for c in out["checks"])


def test_status_without_a_stack_asks_for_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 2
    assert "--stack" in capsys.readouterr().err


def test_the_shipped_policy_loads_for_status() -> None:
    assert load_policy(ROOT / "governor.yaml").notifications.slack_secret_name
