"""Issue 46.2: one checkpoint per interruption of an instance, not per event id, through the real Spot handler on
moto (DynamoDB ledger and idempotency table, EC2, SSM).

An interruption is the end of one run of an instance (its id and EC2's ``LaunchTime``): every notice announcing that
end is the same interruption. A rebalance recommendation announces no end: the Spot warning after it checkpoints
again, because the job has moved on since the early checkpoint.
"""

from __future__ import annotations

import boto3

from governor_cli.demo.bootstrap import LocalStack
from tests.adapters.test_spot_moto import Deployed, commands_sent, event
from tests.adapters.test_spot_moto import aws as aws  # the fixture
from tests.adapters.test_spot_recovery import REGION, Fleet


def test_two_spot_warnings_with_different_ids_send_one_checkpoint(aws: LocalStack) -> None:
    (instance_id,) = Fleet().launch()
    deployed = Deployed(aws, enforce=True)
    first = deployed.run(event("interruption-warning.json", instance_id, id="warning-1"))
    second = deployed.run(event("interruption-warning.json", instance_id, id="warning-2", time="2026-12-01T10:15:20Z"))
    assert len(commands_sent()) == 1, "the second warning signalled the job again"
    (sent,) = commands_sent()
    assert first["checkpoint"]["command_id"] == sent["CommandId"]
    assert second["status"] == "duplicate" and second["duplicate_of"] == "warning-1"
    assert f"command {sent['CommandId']} stands" in second["reason"]
    decisions = {
        d["event_id"]: d for d in deployed.runtime.ledger.query_kind("decision") if d["resource"] == instance_id
    }
    assert (
        decisions["warning-2"]["verdict"] == "ignored"
        and decisions["warning-2"]["evidence"]["duplicate_of"] == "warning-1"
    )
    record = deployed.runtime.ledger.get_item("interruption", instance_id)
    assert record is not None and record["event_id"] == "warning-1"  # the first warning's record stands


def test_a_racing_second_warning_that_finds_no_record_still_sends_nothing(aws: LocalStack) -> None:
    """The second delivery ran before the first wrote anything it could read (no record, no owner): the checkpoint's
    at-most-once intent is the interruption's, so the command the first sent is found, not sent again."""
    (instance_id,) = Fleet().launch()
    deployed = Deployed(aws, enforce=True)
    first = deployed.run(event("interruption-warning.json", instance_id, id="warning-1"))
    table = boto3.client("dynamodb", region_name=REGION)
    owners = deployed.runtime.ledger.query_kind("once-owner")  # governor.domain.once.OWNER_KIND
    for item in [*owners, {"pk": f"interruption#{instance_id}"}]:
        table.delete_item(TableName=aws.ledger_table, Key={"pk": {"S": item["pk"]}, "sk": {"S": "item"}})
    second = deployed.run(event("interruption-warning.json", instance_id, id="warning-2"))
    assert len(commands_sent()) == 1
    assert second["checkpoint"]["command_id"] == first["checkpoint"]["command_id"]


def test_a_rebalance_then_a_spot_warning_checkpoint_twice_but_a_rebalance_again_does_not(aws: LocalStack) -> None:
    (instance_id,) = Fleet().launch()
    deployed = Deployed(aws, enforce=True)
    early = deployed.run(event("rebalance-recommendation.json", instance_id, id="rebalance-1"))
    again = deployed.run(event("rebalance-recommendation.json", instance_id, id="rebalance-2"))
    warned = deployed.run(event("interruption-warning.json", instance_id, id="warning-1"))
    assert early["checkpoint"]["delivered"] and again["status"] == "duplicate"
    assert warned["checkpoint"]["delivered"] and warned["checkpoint"]["command_id"] != early["checkpoint"]["command_id"]
    assert len(commands_sent()) == 2
