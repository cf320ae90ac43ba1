"""Exactly once on moto: the SendCommand intent (conditional write, lookup by Comment, never a resend) and the idle
warning that must be published before its clock starts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from governor.adapters.aws import client
from governor.adapters.ledger import DynamoLedger
from governor.adapters.ssm import SsmCommands
from governor.domain.decision import Finding
from governor.domain.once import IN_FLIGHT, INTENT_KIND, send_command_once
from governor.domain.ports import PublishError
from governor.idle.domain import MARK_KIND
from governor.idle.handler import handle
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.testing.memory import MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _runtime, _state

REGION = "us-east-1"


@pytest.fixture
def aws() -> Any:
    with mock_aws():
        client.cache_clear()
        create_ledger_table("ledger")
        yield boto3.client("ec2", region_name=REGION)
    client.cache_clear()


def test_the_intent_claim_is_a_conditional_write(aws: Any) -> None:
    ledger = DynamoLedger("ledger", region=REGION)
    assert ledger.claim(INTENT_KIND, "k-1", {"token": "a"}) is True
    assert ledger.claim(INTENT_KIND, "k-1", {"token": "b"}) is False
    assert ledger.get_item(INTENT_KIND, "k-1")["token"] == "a"  # the first claim stands


class _LosesTheAnswer(SsmCommands):
    """SSM executes the first SendCommand but its answer is lost (a read timeout on the single attempt)."""

    lost = 0

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> Any:
        result = super().send(instance_id, command, timeout_seconds, comment)
        if not self.lost:
            self.lost += 1
            raise ReadTimeoutError(endpoint_url="https://ssm.us-east-1.amazonaws.com")
        return result


def test_a_retry_finds_the_command_by_its_comment_and_never_resends_it(aws: Any) -> None:
    (instance,) = _launch(aws, "g5.xlarge")
    ledger = DynamoLedger("ledger", region=REGION)
    commands = _LosesTheAnswer(REGION)
    once = {"event_id": "ev-1", "instance_id": instance, "command": "pkill -USR1 train", "timeout_seconds": 60}
    with pytest.raises(ReadTimeoutError):
        send_command_once(ledger, commands, **once)
    retried = send_command_once(ledger, commands, **once)
    again = send_command_once(ledger, commands, **once)
    listed = boto3.client("ssm", region_name=REGION).list_commands(InstanceId=instance)["Commands"]
    assert len(listed) == 1  # SSM has exactly one command for the instance
    assert retried.reused and retried.command_id == listed[0]["CommandId"] == again.command_id
    assert ledger.get_item(INTENT_KIND, _intent(instance))["command_id"] == listed[0]["CommandId"]


def _intent(instance: str) -> str:
    from governor.domain.once import intent_id

    return intent_id("ev-1", instance)


def test_an_intent_whose_send_never_arrived_is_sent_once(aws: Any) -> None:
    (instance,) = _launch(aws, "g5.xlarge")
    ledger = DynamoLedger("ledger", region=REGION)
    claimed = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)
    ledger.claim(INTENT_KIND, _intent(instance), {"token": "died-before-sending", "claimed_at": claimed.isoformat()})
    once = {"event_id": "ev-1", "instance_id": instance, "command": "true", "timeout_seconds": 60}
    # Within a minute of the claim its holder may still be sending (an overlapping invocation): nothing is sent.
    early = send_command_once(ledger, SsmCommands(REGION), **once, clock=lambda: claimed + dt.timedelta(seconds=20))
    assert not early.delivered and early.error == IN_FLIGHT
    # Lambda's retry, a minute later, finds no such command in SSM and takes the claim over: sent once.
    result = send_command_once(ledger, SsmCommands(REGION), **once, clock=lambda: claimed + dt.timedelta(seconds=70))
    assert result.delivered and not result.reused
    assert len(boto3.client("ssm", region_name=REGION).list_commands(InstanceId=instance)["Commands"]) == 1
    assert ledger.get_item(INTENT_KIND, _intent(instance))["command_id"] == result.command_id


def test_the_send_command_client_makes_one_attempt() -> None:
    commands = SsmCommands(REGION)
    config = commands._sender.meta.config
    assert config.retries["total_max_attempts"] == 1


class _DownSink(MemorySink):
    """EventBridge refuses every entry while ``down`` (FailedEntryCount, as PutEvents answers)."""

    down = True

    def publish(self, findings: list[Finding]) -> None:
        if self.down:
            raise PublishError("1 findings rejected by EventBridge: ['InternalFailure']")
        super().publish(findings)


def test_an_idle_instance_is_stopped_only_a_full_warning_period_after_its_warning_was_published(aws: Any) -> None:
    idle = _launch(aws, "g5.xlarge")[0]
    _metrics(idle, 0.3, ahead=120)
    runtime = _runtime()
    sink = runtime.sink = _DownSink()
    fleet = _aws()
    handle(_event(T0, "sweep-1"), runtime, fleet)
    assert runtime.ledger.get_item(MARK_KIND, idle)["warned_at"] is None  # decided, not delivered: no clock
    for minutes in (15, 30):
        result = handle(_event(T0 + dt.timedelta(minutes=minutes), f"sweep-{minutes}"), runtime, fleet)
        assert "acted" not in result["outcomes"] and _state(aws, idle) == "running"
    sink.down = False
    handle(_event(T0 + dt.timedelta(minutes=45), "sweep-45"), runtime, fleet)
    (warning,) = sink.findings
    assert "will be stopped" in warning.title
    assert runtime.ledger.get_item(MARK_KIND, idle)["warned_at"].startswith((T0 + dt.timedelta(minutes=45)).isoformat())
    handle(_event(T0 + dt.timedelta(minutes=60), "sweep-60"), runtime, fleet)
    assert _state(aws, idle) == "running"  # 15 minutes after the published warning: still waiting
    done = handle(_event(T0 + dt.timedelta(minutes=75), "sweep-75"), runtime, fleet)
    assert done["outcomes"]["acted"] == 1 and _state(aws, idle) in ("stopping", "stopped")
    ids = [f.id for f in sink.findings]
    assert len(ids) == len(set(ids))  # every finding published once
