"""The Spot handler with its real adapters on moto: DynamoDB ledger and idempotency table, EC2, SSM, SQS, the bus."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.aws import client
from governor.adapters.bus import EventBusSink
from governor.adapters.capacity import CapacityReservations
from governor.adapters.dlq import SqsDeadLetters
from governor.adapters.ec2 import Ec2Reader
from governor.adapters.ledger import DynamoLedger
from governor.adapters.ssm import SsmCommands
from governor.domain.interruptions import interruption_stats
from governor.policy import parse_policy
from governor.runtime import Runtime, default_runtime
from governor.spot.handler import Adapters, handle, lambda_handler
from governor.spot.recovery import SpotRecoveryActions
from governor_cli.demo.bootstrap import LocalStack, create_shared
from governor_cli.testing.capacity import forget_reservations
from tests.adapters.test_spot_recovery import REGION, Fleet
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "spot"


def event(name: str, instance_id: str, **changes: Any) -> dict[str, Any]:
    raw = json.loads((FIXTURES / name).read_text())
    raw["detail"]["instance-id"] = instance_id
    raw["region"] = REGION
    raw.update(changes)
    return raw


class LambdaContext:
    """Enough of a Lambda context for Powertools' logger and to expire an in-progress idempotency record on time."""

    function_name = "governor-spot"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:governor-spot"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 110_000


class Deployed:
    def __init__(self, local: LocalStack, **spot: Any) -> None:
        self.local = local
        self.runtime = Runtime(
            policy=parse_policy({"spot": spot, "fleet": {"checkpoint_commands": {"train": "pkill -USR1 -f train.py"}}}),
            ledger=DynamoLedger(local.ledger_table, region=REGION),
            sink=EventBusSink(local.bus_name, REGION),
            dead_letters=SqsDeadLetters(local.dlq_urls["spot"], REGION),
            region=REGION,
        )
        self.ports = Adapters(
            Ec2Reader(REGION),
            SsmCommands(REGION),
            SpotRecoveryActions(REGION),
            reservations=CapacityReservations(REGION),
        )

    def run(self, raw: dict[str, Any], now: dt.datetime | None = None) -> dict[str, Any]:
        """The handler on ``raw``, at ``now`` on the function's clock (default: the real one)."""
        return handle(copy.deepcopy(raw), self.runtime, self.ports, LambdaContext(), now=now)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    with mock_aws():
        client.cache_clear()
        local = create_shared(REGION)
        monkeypatch.setenv("IDEMPOTENCY_TABLE", local.idempotency_table)
        yield local
    client.cache_clear()
    forget_reservations()


def commands_sent() -> list[dict[str, Any]]:
    return boto3.client("ssm", region_name=REGION).list_commands()["Commands"]


def test_duplicate_delivery_sends_the_checkpoint_once(aws: LocalStack) -> None:
    fleet = Fleet()
    (instance_id,) = fleet.launch(tags={"governor:checkpoint-command": "train"})
    deployed = Deployed(aws, enforce=True)
    warning = event("interruption-warning.json", instance_id)
    first = deployed.run(warning)
    again = deployed.run(warning)
    assert first["checkpoint"]["delivered"] and again == first
    (sent,) = commands_sent()
    assert sent["InstanceIds"] == [instance_id] and sent["Parameters"]["commands"] == ["pkill -USR1 -f train.py"]
    assert sent["Parameters"]["executionTimeout"] == ["90"]
    # issue 46.2: the same interruption warned about again under another id is its duplicate, not a second signal
    assert deployed.run(warning | {"id": "another-delivery-of-another-warning"})["status"] == "duplicate"
    assert len(commands_sent()) == 1


def test_warning_then_termination_completes_the_record_in_dynamodb(aws: LocalStack) -> None:
    fleet = Fleet()
    (instance_id,) = fleet.launch()
    deployed = Deployed(aws, enforce=True)
    deployed.run(event("interruption-warning.json", instance_id))
    fleet.ec2.terminate_instances(InstanceIds=[instance_id])
    done = deployed.run(event("state-change-terminated.json", instance_id))
    assert done["final_status"] == "terminated" and done["checkpoint_status"] == "Success"
    record = deployed.runtime.ledger.get_item("interruption", instance_id)
    assert record is not None
    assert (record["status"], record["checkpoint_status"], record["team"]) == ("terminated", "Success", "vision")
    stats = interruption_stats(deployed.runtime.ledger.query_kind("interruption"))
    assert stats.total == 1 and stats.checkpoint_delivery_rate == 1.0 and stats.checkpoint_success_rate == 1.0
    assert stats.by_pool_week[0].zone == "us-east-1a" and stats.by_pool_week[0].instance_type == "g5.xlarge"


def test_gone_instances_are_recorded_once_and_not_retried(aws: LocalStack) -> None:
    fleet = Fleet()
    (terminated,) = fleet.launch()
    fleet.ec2.terminate_instances(InstanceIds=[terminated])
    deployed = Deployed(aws, enforce=True)
    for instance_id in (terminated, "i-0123456789abcdef0"):
        result = deployed.run(event("interruption-warning.json", instance_id, id=f"warn-{instance_id}"))
        assert result["status"] == "ignored"
    assert commands_sent() == []
    decisions = deployed.runtime.ledger.query_kind("decision")
    assert sorted(d["verdict"] for d in decisions) == ["ignored", "ignored"]


def test_malformed_event_lands_in_the_dlq_with_its_reason(aws: LocalStack) -> None:
    deployed = Deployed(aws, enforce=True)
    bad = json.loads((FIXTURES / "malformed-warning.json").read_text())
    assert deployed.run(bad)["status"] == "rejected"
    sqs = boto3.client("sqs", region_name=REGION)
    (message,) = sqs.receive_message(
        QueueUrl=aws.dlq_urls["spot"], MessageAttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    assert json.loads(message["Body"])["id"] == bad["id"]
    assert "instance-id: Field required" in message["MessageAttributes"]["ErrorMessage"]["StringValue"]
    assert commands_sent() == []


def test_enforced_replacement_relaunches_from_the_launch_template(aws: LocalStack) -> None:
    fleet = Fleet()
    (instance_id,) = fleet.launch()
    deployed = Deployed(aws, enforce=True, replacement="spot", fallback_zones=["us-east-1b"])
    result = deployed.run(event("interruption-warning.json", instance_id))
    new = fleet.instance(result["replacement_id"])
    assert new.zone == "us-east-1b" and new.lifecycle == "spot" and new.tags["governor:replaces"] == instance_id


def test_entry_point_with_the_stack_environment_checkpoints_once(
    aws: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in aws.environment("spot", parse_policy({"spot": {"enforce": True}})).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    default_runtime.cache_clear()
    try:
        fleet = Fleet()
        (instance_id,) = fleet.launch()
        warning = event("interruption-warning.json", instance_id)
        first = lambda_handler(copy.deepcopy(warning), LambdaContext())
        assert first["status"] == "acted" and first["checkpoint"]["delivered"]
        assert lambda_handler(copy.deepcopy(warning), LambdaContext()) == first
        assert len(commands_sent()) == 1
        assert (
            lambda_handler({"detail-type": "EC2 Spot Instance Interruption Warning"}, LambdaContext())["status"]
            == "rejected"
        )
    finally:
        default_runtime.cache_clear()


def test_a_spot_policy_tag_exemption_nobody_is_recorded_setting_spares_no_checkpoint(aws: LocalStack) -> None:
    """Any account user can tag another team's Spot instance ``env=prod``: with ``spot.exemptions.tags: {env:
    prod}`` that alone spared it its checkpoint (its training progress lost at the interruption). A policy tag
    exemption holds only while a person is recorded setting the tag; the decision says why this one held nothing."""
    fleet = Fleet()
    (instance_id,) = fleet.launch(tags={"governor:checkpoint-command": "train", "env": "prod"})
    deployed = Deployed(aws, enforce=True, exemptions={"tags": {"env": "prod"}})
    result = deployed.run(event("interruption-warning.json", instance_id))
    assert result["checkpoint"]["delivered"], result
    (sent,) = commands_sent()
    assert sent["InstanceIds"] == [instance_id]
    decision = next(
        item
        for item in deployed.runtime.ledger.query_kind("decision")
        if item.get("resource") == instance_id and item.get("policy") == "spot"
    )
    assert any("env='prod' ignored" in reason for reason in decision["reasons"]), decision
