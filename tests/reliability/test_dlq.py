"""``governor dlq list|replay`` on moto: every kind of parked message is readable, and replay deletes only what
Lambda accepted."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor_cli.dlq_admin import parse_message
from governor_cli.main import main
from governor_cli.testing import events
from governor_cli.testing.faults import FaultInjector

REGION = "us-east-1"
SPOT_EVENT = events.envelope(
    "EC2 Spot Instance Interruption Warning",
    "aws.ec2",
    {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"},
    event_id="7bf73129-1428-4cd3-a780-95db273d1602",
    time="2026-11-30T12:00:00Z",
    region=REGION,
)


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def lambda_handler(event, context):\n    return event\n")
    return buffer.getvalue()


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17"}))
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="GpuFleetGovernor-SpotDlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        lam = boto3.client("lambda", region_name=REGION)
        lam.create_function(
            FunctionName="GpuFleetGovernor-SpotFunction1A2B3C",
            Runtime="python3.12",
            Role=role["Role"]["Arn"],
            Handler="index.lambda_handler",
            Code={"ZipFile": _zip()},
            Environment={"Variables": {"GOVERNOR_FUNCTION": "spot"}},
        )
        lam.put_function_event_invoke_config(
            FunctionName="GpuFleetGovernor-SpotFunction1A2B3C",
            DestinationConfig={"OnFailure": {"Destination": arn}},
        )
        rejected = {"id": "bad-1", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"}
        sqs.send_message(
            QueueUrl=url,
            MessageBody=json.dumps(rejected),
            MessageAttributes={
                "ErrorMessage": {"DataType": "String", "StringValue": "invalid SpotEvent: detail: must be an object"},
                "RejectedBy": {"DataType": "String", "StringValue": "governor-validation"},
            },
        )
        on_failure = {
            "version": "1.0",
            "timestamp": "2026-11-30T12:00:05.000Z",
            "requestContext": {"requestId": "r1", "condition": "RetriesExhausted", "approximateInvokeCount": 3},
            "requestPayload": SPOT_EVENT,
            "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
            "responsePayload": {"errorMessage": "An error occurred (RequestLimitExceeded)", "errorType": "ClientError"},
        }
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(on_failure))
        undelivered = dict(SPOT_EVENT, id="9c0e-undelivered")
        sqs.send_message(
            QueueUrl=url,
            MessageBody=json.dumps(undelivered),
            MessageAttributes={
                "ERROR_CODE": {"DataType": "String", "StringValue": "SDK_CLIENT_ERROR"},
                "ERROR_MESSAGE": {"DataType": "String", "StringValue": "Lambda throttled the invocation"},
                "RULE_ARN": {"DataType": "String", "StringValue": "arn:aws:events:us-east-1:123456789012:rule/x"},
            },
        )
        yield {"url": url, "sqs": sqs}


def test_list_shows_every_parked_event_with_its_reason(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dlq", "list", "spot", "--region", REGION]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 event(s) in the DLQ of GpuFleetGovernor-SpotFunction1A2B3C")
    assert "invalid SpotEvent: detail: must be an object" in out and "[governor-validation]" in out
    assert "RetriesExhausted: An error occurred (RequestLimitExceeded)" in out and "[lambda-on-failure]" in out
    assert "SDK_CLIENT_ERROR: Lambda throttled the invocation" in out and "[eventbridge]" in out
    assert main(["dlq", "list", "spot", "--region", REGION, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["event_id"] for r in rows} == {"bad-1", SPOT_EVENT["id"], "9c0e-undelivered"}
    assert next(r for r in rows if r["origin"] == "lambda-on-failure")["event"] == SPOT_EVENT


def test_list_by_queue_url_leaves_messages_in_place(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        assert main(["dlq", "list", "anything", "--queue-url", world["url"], "--region", REGION]) == 0
        assert capsys.readouterr().out.startswith("3 event(s)")


def test_replay_one_event_invokes_the_function_with_the_original_and_deletes_only_it(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultInjector() as recorder, recorder.label("replay"):
        code = main(["dlq", "replay", "spot", "--region", REGION, "--id", SPOT_EVENT["id"]])
    assert code == 0
    out = capsys.readouterr().out
    assert "re-drove 1 of 1 event(s) to GpuFleetGovernor-SpotFunction1A2B3C" in out
    invokes = [c for c in recorder.calls if c.operation == "Invoke"]
    assert len(invokes) == 1 and invokes[0].ok
    assert invokes[0].params["InvocationType"] == "Event"
    assert json.loads(invokes[0].params["Payload"]) == SPOT_EVENT
    assert main(["dlq", "list", "spot", "--region", REGION, "--json"]) == 0
    left = {json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()}
    assert left == {"bad-1", "9c0e-undelivered"}


def test_replay_keeps_the_message_when_lambda_refuses(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultInjector(1.0, ["access_denied"], operations={"Invoke"}) as faults, faults.label("replay"):
        code = main(["dlq", "replay", "spot", "--region", REGION, "--queue-url", world["url"], "--id", "bad-1"])
    assert code == 1
    assert "kept in the DLQ" in capsys.readouterr().out
    assert main(["dlq", "list", "spot", "--queue-url", world["url"], "--region", REGION]) == 0
    assert capsys.readouterr().out.startswith("3 event(s)")


def test_replay_all_then_the_queue_is_empty(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dlq", "replay", "spot", "--region", REGION]) == 0
    assert "re-drove 3 of 3" in capsys.readouterr().out
    assert main(["dlq", "list", "spot", "--region", REGION]) == 0
    assert capsys.readouterr().out.startswith("0 event(s)")


def test_unknown_function_and_unknown_id_are_reported(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dlq", "list", "nosuch", "--region", REGION]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Lambda function named 'nosuch'" in err
    assert main(["dlq", "replay", "spot", "--region", REGION, "--id", "not-there"]) == 1
    assert "not-there: not in the DLQ" in capsys.readouterr().out


def test_aws_errors_are_one_line_exit_2(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    with FaultInjector(1.0, ["access_denied"], services={"lambda"}) as faults, faults.label("list"):
        assert main(["dlq", "list", "spot", "--region", REGION]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "AccessDenied" in err and "Traceback" not in err


def test_opaque_message_is_still_listed() -> None:
    letter = parse_message({"MessageId": "m", "ReceiptHandle": "h", "Body": "not json"})
    assert letter.event == "not json" and letter.reason == "no reason recorded" and letter.kind == "unknown"


def _park(world: dict[str, Any], count: int) -> None:
    for n in range(count):
        world["sqs"].send_message(
            QueueUrl=world["url"],
            MessageBody=json.dumps(dict(SPOT_EVENT, id=f"many-{n}")),
            MessageAttributes={"ErrorMessage": {"DataType": "String", "StringValue": "fuzz"}},
        )


def test_list_pages_through_every_message_and_leaves_them_all(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    _park(world, 25)  # 28 in all: more than one receive (10) can show
    for _ in range(2):  # a second listing sees the same 28: the first one hid nothing for long
        assert main(["dlq", "list", "spot", "--region", REGION, "--json"]) == 0
        ids = [json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()]
        assert len(ids) == 28 and len(set(ids)) == 28
    assert main(["dlq", "list", "spot", "--region", REGION, "--limit", "12"]) == 0
    assert capsys.readouterr().out.startswith("12 event(s)")


def test_replay_pages_through_every_message(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    _park(world, 25)
    assert main(["dlq", "replay", "spot", "--region", REGION]) == 0
    assert "re-drove 28 of 28 event(s)" in capsys.readouterr().out
    assert main(["dlq", "list", "spot", "--region", REGION]) == 0
    assert capsys.readouterr().out.startswith("0 event(s)")


def test_an_unknown_function_suggests_the_closest_one(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dlq", "list", "spto", "--region", REGION]) == 2
    assert "did you mean 'spot'?" in capsys.readouterr().err
