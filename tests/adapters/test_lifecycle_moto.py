"""The lifecycle function against moto (EC2 tags, the DynamoDB ledger), the ledger export, and the Price List adapter."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from governor.adapters.aws import client
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ledger import DynamoLedger
from governor.domain.costs import PriceBook, gpu_hours_and_cost
from governor.lifecycle.handler import Adapters, default_capabilities, handle, lambda_handler
from governor.lifecycle.pricing import ENDPOINT_REGION, PriceListPrices, parse_product
from governor.policy import parse_policy
from governor.runtime import Runtime, default_runtime
from governor_cli.demo.bootstrap import LocalStack, create_shared
from governor_cli.demo.bootstrap import create_ledger_table as create_table
from governor_cli.main import main
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.unit.lifecycle_data import as_gpu_launch, envelope, one

TABLE = "governor-ledger"
REGION = "us-east-1"
CREATOR = "arn:aws:iam::123837392027:user/bert-jan"
IMAGE = "ami-12c6146b"
ASSUMED = one("Client.VcpuLimitExceeded", "AssumedRole")


def create_ledger_table() -> None:
    create_table(TABLE, REGION)


def launch_record(instance_id: str, *, assumed_role: bool = False) -> dict[str, Any]:
    """A real successful RunInstances record, pointed at a moto instance (and, optionally, the real assumed-role caller)."""
    record = as_gpu_launch(one(None, "IAMUser"))
    record["responseElements"]["instancesSet"]["items"][0]["instanceId"] = instance_id
    if assumed_role:
        record["userIdentity"] = copy.deepcopy(ASSUMED["userIdentity"])
    return record


def state_event(instance_id: str, state: str, at: str) -> dict[str, Any]:
    return events.envelope(
        "EC2 Instance State-change Notification",
        "aws.ec2",
        {"instance-id": instance_id, "state": state},
        event_id=f"{instance_id}-{state}-{at}",
        time=at,
        account="123837392027",
        region=REGION,
    )


def tags_of(ec2: Any, instance_id: str) -> dict[str, str]:
    found = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [instance_id]}])["Tags"]
    return {t["Key"]: t["Value"] for t in found}


class Fleet:
    def __init__(self, enforce: bool = True) -> None:
        create_ledger_table()
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.image = IMAGE  # moto accepts any AMI id; listing its catalogue costs seconds
        policy = parse_policy({"lifecycle": {"enforce": enforce}})
        self.ledger = DynamoLedger(TABLE, region=REGION)
        self.sink = MemorySink()
        self.runtime = Runtime(policy, self.ledger, self.sink, MemoryDeadLetters(), region=REGION)
        self.now = dt.datetime(2026, 12, 2, 7, tzinfo=dt.UTC)
        self.caps = Adapters(
            reader=Ec2Reader(REGION, self.ec2, wildcard_type_filter=False),  # moto does not match wildcard filters
            tagger=Ec2Actions(REGION, self.ec2),
            prices=PriceBook(policy.pricing),
            now=lambda: self.now,
        )

    def run(self, instance_type: str = "g5.xlarge", tags: dict[str, str] | None = None) -> str:
        spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
        kwargs: dict[str, Any] = {"TagSpecifications": spec} if tags else {}
        reply = self.ec2.run_instances(ImageId=self.image, InstanceType=instance_type, MinCount=1, MaxCount=1, **kwargs)
        return str(reply["Instances"][0]["InstanceId"])

    def send(self, event: dict[str, Any]) -> dict[str, Any]:
        return handle(event, self.runtime, self.caps)


@mock_aws
def test_launch_tags_the_creator_and_keeps_the_users_own_tags() -> None:
    fleet = Fleet()
    plain = fleet.run(tags={"team": "vision"})
    own = fleet.run(tags={"team": "nlp", "governor:creator": "ana@example.com"})
    fleet.send(envelope(launch_record(plain, assumed_role=True), "e1"))
    fleet.send(envelope(launch_record(own), "e2"))
    role = ASSUMED["userIdentity"]["sessionContext"]["sessionIssuer"]["arn"]
    session = ASSUMED["userIdentity"]["arn"].rsplit("/", 1)[1]
    assert tags_of(fleet.ec2, plain)["governor:creator"] == f"{role}/{session}"
    assert tags_of(fleet.ec2, plain)["governor:launched-at"] == "2023-07-10T11:55:21Z"
    assert tags_of(fleet.ec2, own)["governor:creator"] == "ana@example.com"
    assert "governor:launched-at" in tags_of(fleet.ec2, own)
    decisions = fleet.ledger.query_kind("decision")
    assert {d["resource"] for d in decisions} == {plain, own} and all(d["verdict"] == "act" for d in decisions)


@mock_aws
def test_report_only_and_failed_launches_leave_instances_untouched() -> None:
    fleet = Fleet(enforce=False)
    instance = fleet.run(tags={"team": "vision"})
    fleet.send(envelope(launch_record(instance), "e1"))
    assert "governor:creator" not in tags_of(fleet.ec2, instance)
    assert fleet.ledger.get_item("launch", instance)["creator"] == CREATOR  # type: ignore[index]
    fleet.send(envelope(ASSUMED, "failed"))
    assert fleet.ledger.query_kind("session") == []
    assert [d["verdict"] for d in fleet.ledger.query_kind("decision") if d["event_id"] == "failed"] == ["ignored"]


@mock_aws
def test_sessions_follow_state_changes_and_reconciliation_in_dynamodb() -> None:
    fleet = Fleet()
    stopped_later = fleet.run("g5.12xlarge", tags={"team": "vision", "owner": "ana"})
    vanished = fleet.run(tags={"team": "nlp"})
    untagged = fleet.run("p3.2xlarge")
    fleet.run("t3.micro", tags={"team": "web"})
    fleet.send(state_event(stopped_later, "running", "2026-12-01T08:00:00Z"))
    fleet.send(state_event(vanished, "running", "2026-12-01T09:00:00Z"))
    fleet.ec2.stop_instances(InstanceIds=[stopped_later])
    fleet.send(state_event(stopped_later, "stopped", "2026-12-01T10:00:00Z"))
    fleet.ec2.terminate_instances(InstanceIds=[vanished])  # its event is lost
    result = fleet.send(
        {
            **state_event("i-0", "running", "2026-12-02T07:00:00Z"),
            "detail-type": "Scheduled Event",
            "source": "aws.scheduler",
            "detail": {},
            "id": "sweep",
        }
    )
    assert (result["opened"], result["closed"], result["no_team"]) == (1, 1, 1)
    sessions = {s["instance_id"]: s for s in fleet.ledger.query_kind("session")}
    assert set(sessions) == {stopped_later, vanished, untagged}
    assert sessions[stopped_later]["end"] == "2026-12-01T10:00:00+00:00" and sessions[stopped_later]["gpus"] == 4
    assert sessions[vanished]["closed_by"] == "reconcile" and sessions[vanished]["end"] == "2026-12-02T07:00:00+00:00"
    assert sessions[untagged]["opened_by"] == "reconcile" and sessions[untagged]["end"] is None
    assert [f.rule for f in fleet.sink.findings] == ["lifecycle.no-team"]
    rows = gpu_hours_and_cost(
        fleet.ledger.query_kind("session"),
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC),
    )
    vision = next(r for r in rows if r.key == "vision")
    assert (vision.instance_hours, vision.gpu_hours, vision.cost_usd) == (2.0, 8.0, round(2 * 5.672, 2))


@mock_aws
def test_ledger_export_writes_json_lines_with_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = Fleet()
    old = fleet.run(tags={"team": "vision"})
    recent = fleet.run(tags={"team": "nlp"})
    fleet.send(state_event(old, "running", "2026-10-01T08:00:00Z"))
    fleet.send(state_event(old, "stopped", "2026-10-01T09:00:00Z"))
    fleet.send(state_event(recent, "running", "2026-11-20T08:00:00Z"))  # still open on the 25th
    out = tmp_path / "ledger.jsonl"
    assert (
        main(["ledger", "export", "--table", TABLE, "--out", str(out), "--since", "2026-11-25", "--region", REGION])
        == 0
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {item["kind"] for item in lines} == {"session"}  # decisions were all before the 25th
    assert [item["instance_id"] for item in lines] == [recent]
    assert "1 items (0 decision, 1 session)" in capsys.readouterr().out
    assert main(["ledger", "export", "--table", TABLE, "--out", str(out), "--region", REGION]) == 0
    everything = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum(1 for i in everything if i["kind"] == "decision") == 3
    assert sum(1 for i in everything if i["kind"] == "session") == 2


@mock_aws
def test_ledger_export_keeps_one_accounts_decisions_and_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Decisions carry their event's account; a session follows its instance's decisions, even ones before --since."""
    fleet = Fleet()
    mine, theirs = fleet.run(tags={"team": "vision"}), fleet.run(tags={"team": "nlp"})
    other = {**state_event(theirs, "running", "2026-11-20T08:00:00Z"), "account": "222222222222"}
    fleet.send(state_event(mine, "running", "2026-11-20T08:00:00Z"))
    fleet.send(other)
    out = tmp_path / "ledger.jsonl"
    argv = ["ledger", "export", "--table", TABLE, "--out", str(out), "--region", REGION]
    assert main([*argv, "--only-account", "222222222222", "--only-region", REGION, "--since", "2026-11-25"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(i["kind"], i["instance_id"]) for i in lines] == [("session", theirs)]
    assert "1 items (0 decision, 1 session) from account 222222222222 and region us-east-1" in capsys.readouterr().out
    assert main([*argv, "--only-account", "123837392027,222222222222"]) == 0
    assert {json.loads(line).get("resource") or json.loads(line)["instance_id"] for line in out.open()} == {
        mine,
        theirs,
    }
    assert main([*argv, "--only-region", "eu-west-1"]) == 0
    assert out.read_text() == ""


@mock_aws
def test_ledger_export_of_a_missing_table_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ledger", "export", "--table", "nope", "--out", str(tmp_path / "x.jsonl"), "--region", REGION])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("governor: ledger table nope:") and "Traceback" not in err


PRODUCT = {
    "product": {"attributes": {"instanceType": "g6e.12xlarge", "gpu": "4", "regionCode": "us-east-1"}, "sku": "S"},
    "terms": {
        "OnDemand": {
            "S.JRTCKXETXF": {
                "priceDimensions": {
                    "S.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "10.4926000000"}}
                }
            }
        }
    },
}


def test_price_list_adapter_reads_the_hourly_on_demand_rate_once() -> None:
    pricing = boto3.client("pricing", region_name=ENDPOINT_REGION)
    with Stubber(pricing) as stub:
        stub.add_response(
            "get_products",
            {"PriceList": [json.dumps(PRODUCT)], "FormatVersion": "aws_v1"},
            {
                "ServiceCode": "AmazonEC2",
                "Filters": [
                    {"Type": "TERM_MATCH", "Field": f, "Value": v}
                    for f, v in [
                        ("instanceType", "g6e.12xlarge"),
                        ("regionCode", "eu-west-1"),
                        ("operatingSystem", "Linux"),
                        ("tenancy", "Shared"),
                        ("preInstalledSw", "NA"),
                        ("capacitystatus", "Used"),
                        ("licenseModel", "No License required"),
                    ]
                ],
                "FormatVersion": "aws_v1",
                "MaxResults": 10,
            },
        )
        stub.add_client_error("get_products", "ThrottlingException")
        prices = PriceListPrices(pricing)
        assert prices.on_demand("g6e.12xlarge", "eu-west-1") == (10.4926, 4)
        assert prices.on_demand("g6e.12xlarge", "eu-west-1") == (10.4926, 4) and prices.calls == 1
        assert prices.on_demand("g5.xlarge", "eu-west-1") is None  # API error: fall back to the table
    book = PriceBook(
        parse_policy({"pricing": {"use_price_list_api": True}}).pricing, region="eu-west-1", price_list=prices
    )
    assert book.price("g6e.12xlarge").per_hour == 10.4926
    assert book.price("g5.xlarge").per_hour == 1.006


def test_price_list_documents_without_an_hourly_rate() -> None:
    assert parse_product(json.dumps(PRODUCT)) == (10.4926, 4)
    upfront = copy.deepcopy(PRODUCT)
    upfront["terms"]["OnDemand"]["S.JRTCKXETXF"]["priceDimensions"]["S.JRTCKXETXF.6YS6EN2CT7"]["unit"] = "Quantity"
    assert parse_product(upfront) is None
    assert parse_product({"product": {"attributes": {"gpu": "NA"}}, "terms": {}}) is None


class LambdaContext:
    function_name = "governor-lifecycle"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:governor-lifecycle"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 290_000


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """The function's environment as the stack sets it, on moto, with the idempotency table."""
    with mock_aws():
        client.cache_clear()
        local = create_shared(REGION)
        policy = parse_policy({"lifecycle": {"enforce": True}})
        for name, value in local.environment("lifecycle", policy).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
        default_runtime.cache_clear()
        default_capabilities.cache_clear()
        yield local
    default_runtime.cache_clear()
    default_capabilities.cache_clear()
    client.cache_clear()


def test_entry_point_acts_once_per_event_id_and_parks_bad_input(deployed: LocalStack) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    image = IMAGE
    instance = ec2.run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    launch = envelope(launch_record(instance), "launch-1")
    running = state_event(instance, "running", "2026-12-01T08:00:00Z")
    first = lambda_handler(launch, LambdaContext())
    assert first["tagged"] == 1 and tags_of(ec2, instance)["governor:creator"] == CREATOR
    assert lambda_handler(copy.deepcopy(launch), LambdaContext()) == first  # duplicate delivery: the stored result
    lambda_handler(running, LambdaContext())
    lambda_handler(copy.deepcopy(running), LambdaContext())
    ledger = DynamoLedger(deployed.ledger_table, region=REGION)
    [session] = ledger.query_kind("session")
    assert session["owner"] == CREATOR and session["team"] == "unknown"
    assert len(ledger.query_kind("decision")) == 3  # launch, session, no-team: each once
    rejected = lambda_handler({**running, "id": "bad", "detail": {"instance-id": instance}}, LambdaContext())
    assert rejected["status"] == "rejected"
    [message] = boto3.client("sqs", region_name=REGION).receive_message(
        QueueUrl=deployed.dlq_urls["lifecycle"], MessageAttributeNames=["All"]
    )["Messages"]
    assert "state" in message["MessageAttributes"]["ErrorMessage"]["StringValue"]
    assert json.loads(message["Body"])["id"] == "bad"
