"""The keys handler end to end on moto: a sweep 100 days from now, and a DisableKeyRotation event."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.keys.handler import Adapters, handle
from governor.keys.iam_keys import IamAccessKeys
from governor.keys.kms import KmsKeys
from governor.keys.secrets import SecretsRotation
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import FixedClock, MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_keys_adapters import REGION, rotation_function
from tests.conftest import ROOT


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield


def runtime(**keys: Any) -> Runtime:
    return Runtime(
        policy=parse_policy({"keys": keys}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def adapters(days_ahead: int = 0) -> Adapters:
    clock = FixedClock(dt.datetime.now(dt.UTC) + dt.timedelta(days=days_ahead))
    return Adapters(
        kms=KmsKeys(REGION), iam=IamAccessKeys(sleep=lambda _: None), secrets=SecretsRotation(REGION), clock=clock
    )


SWEEP = events.scheduled(event_id="sched-1", time="2026-12-01T00:00:00Z", region=REGION)


def test_enforcing_sweep_fixes_keys_access_keys_and_secrets(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    iam = boto3.client("iam")
    sm = boto3.client("secretsmanager", region_name=REGION)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    iam.create_user(UserName="alice", Tags=[{"Key": "owner", "Value": "alice@example.com"}])
    access_key = iam.create_access_key(UserName="alice")["AccessKey"]["AccessKeyId"]
    secret = sm.create_secret(Name="training-db", SecretString="x")["ARN"]
    sm.rotate_secret(
        SecretId=secret,
        RotationLambdaARN=rotation_function(),
        RotationRules={"AutomaticallyAfterDays": 365},
        RotateImmediately=False,
    )
    rt = runtime(enforce=True)
    result = handle(SWEEP, rt, adapters(days_ahead=100))  # every credential is 100 days old by then
    assert result["status"] == "ok" and result["failed_actions"] == 0
    assert kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"] is True
    assert iam.list_access_keys(UserName="alice")["AccessKeyMetadata"][0]["Status"] == "Inactive"
    assert sm.describe_secret(SecretId=secret)["RotationRules"] == {"AutomaticallyAfterDays": 90}
    assert isinstance(rt.sink, MemorySink)
    by_rule = {f.rule: f for f in rt.sink.findings}
    assert {"keys.kms.rotation_off", "keys.access_key.too_old", "keys.secret.rotation_interval_too_long"} <= set(
        by_rule
    )
    assert by_rule["keys.access_key.too_old"].owner == "alice@example.com"
    assert by_rule["keys.access_key.too_old"].resource == access_key


def test_report_only_sweep_changes_nothing(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    rt = runtime()
    result = handle(SWEEP, rt, adapters())
    assert result["actions"] == 0 and result["findings"] == 1
    assert kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"] is False


def test_disable_key_rotation_event_turns_it_back_on(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    meta = kms.create_key()["KeyMetadata"]
    kms.enable_key_rotation(KeyId=meta["KeyId"])
    kms.disable_key_rotation(KeyId=meta["KeyId"])
    record = json.loads((ROOT / "tests/fixtures/keys/disable_key_rotation.json").read_text())
    record["requestParameters"]["keyId"] = meta["KeyId"]
    record["responseElements"]["keyId"] = meta["Arn"]
    event = events.cloudtrail(record, event_id="evt-disable", account="123456789012", region=REGION)
    result = handle(event, runtime(enforce_kms=True), adapters())
    assert result["actions"] == 1
    assert kms.get_key_rotation_status(KeyId=meta["KeyId"])["KeyRotationEnabled"] is True


class _Context:
    function_name = "keys"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:keys"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_lambda_handler_wires_the_ledger_bus_and_dlq_from_its_environment(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from governor.keys import handler
    from governor.runtime import default_runtime
    from governor_cli.demo.bootstrap import create_ledger_table

    create_ledger_table("ledger", REGION)
    boto3.client("events", region_name=REGION).create_event_bus(Name="governor")
    queue = boto3.client("sqs", region_name=REGION).create_queue(QueueName="keys-dlq")["QueueUrl"]
    for name, value in {
        "GOVERNOR_POLICY": json.dumps({"keys": {"enforce": True}}),
        "LEDGER_TABLE": "ledger",
        "BUS_NAME": "governor",
        "DLQ_URL": queue,
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    kms = boto3.client("kms", region_name=REGION)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    default_runtime.cache_clear()
    handler._adapters.cache_clear()
    try:
        result = handler.lambda_handler(SWEEP, _Context())
        rejected = handler.lambda_handler({"id": "bad-1", "source": "aws.kms"}, _Context())
    finally:
        default_runtime.cache_clear()
        handler._adapters.cache_clear()
    assert result["status"] == "ok" and result["actions"] == 1
    assert kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"] is True
    items = boto3.resource("dynamodb", region_name=REGION).Table("ledger").scan()["Items"]
    assert {i["kind"] for i in items} == {"decision", "action", "action-intent", "outbox", "outbox-event"}
    assert all(i.get("sent_at") for i in items if i["kind"] == "outbox")  # the finding was accepted by the bus
    assert rejected["status"] == "rejected"
    [message] = boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=queue, MessageAttributeNames=["All"])[
        "Messages"
    ]
    assert json.loads(message["Body"]) == {"id": "bad-1", "source": "aws.kms"}
    assert "invalid GovernorEvent" in message["MessageAttributes"]["ErrorMessage"]["StringValue"]
