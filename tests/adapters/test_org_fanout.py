"""Organisation sweep fan-out (issue 23) on moto: the planner lists the OU's accounts and enqueues one target per
(account, region); the idle function's targets queue runs each in its own account and region through the spoke role;
a target that fails every attempt becomes a finding while the others complete.

moto keeps resources per account and lets STS assume roles across accounts; the Lambda event source mapping is
played by the test, which receives from the moto queue and hands the records to the handler, attempt by attempt.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor import fanout
from governor.adapters.aws import Organization, client
from governor.adapters.ledger import DynamoLedger
from governor.adapters.organization import OrganizationAccounts, TargetQueue
from governor.idle import handler as idle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.demo.emulator import filter_wildcards
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.org_accounts import account_session
from tests.adapters.test_spot_moto import LambdaContext

HUB = "123456789012"  # moto's default account, the organisation's management account here
REGIONS = ("us-east-1", "us-west-2")
NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)


@pytest.fixture(autouse=True)
def _clock_at_test_start() -> None:
    """The wall clock when each test starts, not at collection: a slow run must not make the sweep's event stale."""
    global NOW
    NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)


TAGS = {"owner": "ana@example.com", "team": "vision", "gpu-fleet": "true"}


def spoke_roles(account: str) -> None:
    iam = account_session(account, REGIONS[0]).client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{HUB}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    for region in REGIONS:
        iam.create_role(RoleName=f"GovernorSpoke-{region}", AssumeRolePolicyDocument=json.dumps(trust))


def launch(session: boto3.session.Session, util: float) -> str:
    ec2 = session.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    found = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in TAGS.items()]}],
    )
    instance_id = str(found["Instances"][0]["InstanceId"])
    cloudwatch = session.client("cloudwatch")
    for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", 100.0)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": NOW - dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(0, 120)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])
    return instance_id


class Org:
    """Three accounts (the hub and two members of one OU), two regions, a targets queue, the idle runtime."""

    def __init__(self) -> None:
        self.local = create_shared(REGIONS[0])
        organizations = boto3.client("organizations", region_name=REGIONS[0])
        organizations.create_organization(FeatureSet="ALL")
        root = organizations.list_roots()["Roots"][0]["Id"]
        self.ou = organizations.create_organizational_unit(ParentId=root, Name="gpu")["OrganizationalUnit"]["Id"]
        nested = organizations.create_organizational_unit(ParentId=self.ou, Name="research")["OrganizationalUnit"]
        self.members = []
        for name, parent in (("training", self.ou), ("research", nested["Id"])):
            status = organizations.create_account(AccountName=name, Email=f"{name}@example.com")
            account = status["CreateAccountStatus"]["AccountId"]
            organizations.move_account(AccountId=account, SourceParentId=root, DestinationParentId=parent)
            spoke_roles(account)
            self.members.append(account)
        self.accounts = [HUB, *self.members]
        sqs = boto3.client("sqs", region_name=REGIONS[0])
        self.queue_url = sqs.create_queue(QueueName="idle-targets")["QueueUrl"]
        self.config = fanout.FanoutConfig(
            queue_url=self.queue_url, regions=REGIONS, home_account=HUB, ou_ids=(self.ou,), attempts=3
        )
        self.runtime = Runtime(
            policy=parse_policy({"idle": {"enforce": False, "launch_grace_minutes": 0}}),
            ledger=DynamoLedger(self.local.ledger_table, region=REGIONS[0]),
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region=REGIONS[0],
            extras={"fanout": self.config},
        )

    def schedule(self, event_id: str = "round-1") -> dict[str, Any]:
        return events.scheduled(event_id=event_id, account=HUB, region=REGIONS[0], time=NOW)

    def receive(self) -> list[dict[str, Any]]:
        """What the event source mapping would hand the function: one record per message, with its receive count."""
        sqs = boto3.client("sqs", region_name=REGIONS[0])
        got = sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
        ).get("Messages", [])
        return [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m["Attributes"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:idle-targets",
                "awsRegion": REGIONS[0],
            }
            for m in got
        ]

    def drain(self, handler: Any = None) -> list[dict[str, Any]]:
        """Run the event source mapping until the queue is empty: a record the handler reports failed is delivered
        again (its receive count grows), one it does not is deleted."""
        sqs = boto3.client("sqs", region_name=REGIONS[0])
        results: list[dict[str, Any]] = []
        for _ in range(50):
            records = self.receive()
            if not records:
                return results
            for record in records:
                answer = (handler or idle.lambda_handler)({"Records": [record]}, LambdaContext())  # batch size 1
                results.extend(answer["results"])
                if not answer["batchItemFailures"]:
                    sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
        raise AssertionError("the targets queue never drained")


@pytest.fixture
def org(monkeypatch: pytest.MonkeyPatch) -> Iterator[Org]:
    with mock_aws(), filter_wildcards():  # the emulator matches wildcard filter values as AWS does
        client.cache_clear()
        built = Org()
        monkeypatch.setenv("IDEMPOTENCY_TABLE", built.local.idempotency_table)
        client.configure(Organization("GovernorSpoke", HUB))
        monkeypatch.setattr(idle, "default_runtime", lambda: built.runtime)
        yield built
        client.configure(None)
    client.cache_clear()


def test_the_planner_enqueues_every_account_of_the_ou_in_every_region(org: Org) -> None:
    listed = OrganizationAccounts(REGIONS[0])
    assert listed.accounts([org.ou]) == sorted(org.members)  # the nested OU's account too

    answer = idle.lambda_handler(org.schedule(), LambdaContext())

    assert answer == {
        "status": "planned",
        "event_id": "round-1",
        "sweep": "idle",
        "targets": 6,
        "accounts": 3,
        "regions": 2,
        "breaker": "closed",
    }
    bodies = [json.loads(r["body"]) for r in org.receive()]
    assert sorted((b["account"], b["region"]) for b in bodies) == sorted((a, r) for a in org.accounts for r in REGIONS)
    assert {b["sweep"] for b in bodies} == {"idle"} and not any(b["hold"] for b in bodies)


def test_an_idle_sweep_runs_in_each_of_3_accounts_and_2_regions(org: Org) -> None:
    launched: dict[str, tuple[str, str]] = {}
    for account in org.accounts:
        for region in REGIONS:
            session = boto3.session.Session(region_name=region) if account == HUB else account_session(account, region)
            launched[launch(session, util=1.0)] = (account, region)

    idle.lambda_handler(org.schedule(), LambdaContext())
    results = org.drain()

    assert sorted(r["status"] for r in results) == ["swept"] * 6
    assert all(r["instances"] == 1 for r in results)  # each target saw only its own account and region
    decided = {d["resource"]: (d["account"], d["region"]) for d in org.runtime.ledger.query_kind("decision")}
    assert {i: decided.get(i) for i in launched} == launched  # one decision each, stamped where it was made
    assert client.roles_assumed >= 4  # two members x two regions through the spoke role; the hub with its own


def test_one_broken_account_becomes_a_finding_and_the_others_complete(org: Org) -> None:
    broken = org.members[1]
    iam = account_session(broken, REGIONS[0]).client("iam")
    iam.delete_role(RoleName=f"GovernorSpoke-{REGIONS[1]}")  # the spoke was never deployed there
    for account in org.accounts:
        session = (
            boto3.session.Session(region_name=REGIONS[0]) if account == HUB else account_session(account, REGIONS[0])
        )
        launch(session, util=1.0)
    real = client._assumed

    def refuse(organization: Any, account: str, region: Any, *args: Any) -> Any:
        if account == broken and region == REGIONS[1]:  # moto does not check the role exists; AWS refuses
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "AssumeRole")
        return real(organization, account, region, *args)

    client._assumed = refuse  # type: ignore[method-assign]
    try:
        idle.lambda_handler(org.schedule(), LambdaContext())
        results = org.drain()
    finally:
        del client._assumed

    assert sorted(r["status"] for r in results) == ["failed"] + ["swept"] * 5
    (failed,) = [r for r in results if r["status"] == "failed"]
    assert (failed["account"], failed["region"]) == (broken, REGIONS[1])
    (finding,) = [f for f in org.runtime.sink.findings if f.rule == fanout.SWEEP_FAILED]
    assert (finding.account, finding.region, finding.policy) == (broken, REGIONS[1], "idle")
    assert "failed 3 time(s)" in finding.detail or "AccessDenied" in finding.detail
    (recorded,) = [d for d in org.runtime.ledger.query_kind("decision") if d.get("rule") == fanout.SWEEP_FAILED]
    assert recorded["account"] == broken and recorded["evidence"]["attempts"] == 3


def test_the_organisation_breaker_holds_every_target_report_only(org: Org) -> None:
    for account, region in ((HUB, "us-east-1"), (org.members[0], "us-west-2")):
        org.runtime.ledger.put_item(
            "idle-breaker",
            f"fleet#{account}#{region}",
            {"tripped_at": NOW.isoformat(), "target": f"{account}#{region}"},
        )
    org.runtime.extras["fanout"] = org.config.model_copy(update={"breaker_targets": 2})

    answer = idle.lambda_handler(org.schedule(), LambdaContext())

    assert answer["breaker"] == "open"
    assert all(json.loads(r["body"])["hold"] for r in org.receive())
    (alarm,) = [f for f in org.runtime.sink.findings if f.rule == fanout.ORG_BREAKER]
    assert alarm.severity == "critical"


def test_a_single_account_deployment_sweeps_as_before(org: Org) -> None:
    org.runtime.extras.clear()
    assert fanout.dispatch(org.schedule(), org.runtime, "idle", lambda e, r: {}) is None


def test_a_queue_that_refuses_targets_fails_the_plan(org: Org) -> None:
    class Refusing:
        def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
            return {"Failed": [{"Id": e["Id"], "Message": "throttled"} for e in kwargs["Entries"]]}

    with pytest.raises(RuntimeError, match="refused"):
        TargetQueue("url", sqs=Refusing()).send([{"n": 1}])


def test_the_keys_sweep_runs_per_account_and_region_and_access_keys_once_per_account(
    org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    from governor.keys import handler as keys

    runtime = Runtime(**{**org.runtime.__dict__, "policy": parse_policy({})})  # keys report-only (the default)
    monkeypatch.setattr(keys, "default_runtime", lambda: runtime)
    org.runtime = runtime
    member = org.members[0]
    unrotated = account_session(member, REGIONS[1]).client("kms").create_key()["KeyMetadata"]["KeyId"]

    answer = keys.lambda_handler(org.schedule(), LambdaContext())
    results = org.drain(keys.lambda_handler)

    assert answer["targets"] == 6 and sorted(r["status"] for r in results) == ["ok"] * 6
    assert (
        sorted(tuple(r["kinds"]) for r in results) == [("kms", "access_keys", "secrets")] * 3 + [("kms", "secrets")] * 3
    )
    (decision,) = [d for d in runtime.ledger.query_kind("decision") if unrotated in str(d["resource"])]
    assert (decision["account"], decision["region"], decision["verdict"]) == (member, REGIONS[1], "act")
    assert not [f for f in runtime.sink.findings if f.rule == fanout.SWEEP_FAILED]
