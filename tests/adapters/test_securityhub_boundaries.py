"""The Security Hub export's boundaries on moto, through the real handlers (docs/security.md, "Security Hub export"):

- resolution by re-read: a fix AWS refused stays open in Security Hub and says why; a fix the enforcer re-read and saw
  done archives the record;
- export integrity: a finding no governor function recorded (a direct invoke with a forged 'fixed' finding) is
  refused, recorded and parked, never exported; two long resource ids get two records;
- ordering: a retried or replayed older finding never turns a resolved record back;
- escaping: CR/LF and a forged ``owner:`` label stay one line, a 300 KB detail is cut.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from governor.adapters.aws import client
from governor.domain.decision import Finding
from governor.keys.handler import Adapters as KeysAdapters
from governor.keys.handler import handle as keys_handle
from governor.keys.iam_keys import IamAccessKeys
from governor.keys.kms import KmsKeys
from governor.keys.secrets import SecretsRotation
from governor.network.handler import handle as network_handle
from governor.outbox import Outbox
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor.securityhub.handler import handle
from governor_cli.testing import events
from governor_cli.testing.memory import FixedClock, MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_network_aws import authorize, new_group
from tests.adapters.test_network_aws import aws as network_aws

ACCOUNT, REGION = events.ACCOUNT, "us-east-1"
BUCKET = "security-lake-custom-source"
NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def hub() -> Iterator[Any]:
    with mock_aws():
        client.cache_clear()
        securityhub = boto3.client("securityhub", region_name=REGION)
        securityhub.enable_security_hub()
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield securityhub
        client.cache_clear()


def runtime(**sections: Any) -> Runtime:
    """One ledger for every function, as in the stack (the enforcers' outbox is what the export checks)."""
    policy = {"securityhub": {"enforce": True, "asff": True, "ocsf_bucket": BUCKET}, **sections}
    return Runtime(
        policy=parse_policy(policy),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def on_the_bus(finding: Finding, event_id: str) -> dict[str, Any]:
    return events.finding(finding.model_dump(mode="json"), event_id=event_id, region=REGION)


def published(rt: Runtime, finding: Finding, event_id: str) -> dict[str, Any]:
    """A finding as a governor function publishes it: staged in its outbox, then put on the bus."""
    box = Outbox(rt.ledger, MemorySink(), event_id=event_id)
    [staged] = box.add([finding])
    box.flush()
    return on_the_bus(staged, event_id)


def export(event: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    return handle(event, rt, now=NOW, account=ACCOUNT)


def records(securityhub: Any) -> dict[str, dict[str, Any]]:
    return {f["Resources"][0]["Id"]: f for f in securityhub.get_findings()["Findings"]}


def ocsf_objects() -> list[dict[str, Any]]:
    s3 = boto3.client("s3", region_name=REGION)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    return [json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) for key in sorted(keys)]


def world_open(resource: str = "sg-0123", **changes: Any) -> Finding:
    body: dict[str, Any] = {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": resource,
        "title": f"Security group {resource} opened port 22 to the world",
        "detail": "0.0.0.0/0 on 22/tcp",
        "team": "vision",
        "at": NOW - dt.timedelta(minutes=10),
        **changes,
    }
    return Finding.model_validate(body)


REVOKED = [{"type": "revoke_ingress", "enforced": True}]
#: What the network enforcer's re-read after a revoke reports (``Finding.verified``).
SEEN_GONE = {"fixed": True, "seen": "rule(s) gone from sg-0123"}


# --- resolution by re-read ------------------------------------------------------------------------------------------


def _refuse_enable_key_rotation(kms: KmsKeys) -> None:
    """KMS answers EnableKeyRotation with UnsupportedOperationException (imported key material, a custom key store),
    as AWS does; every other KMS call goes to moto."""

    def refuse(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "UnsupportedOperationException", "Message": "This key does not support automatic rotation."}
        return AWSResponse("https://kms", 400, {}, None), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}

    for kms_client in {id(kms._kms): kms._kms, id(kms._once): kms._once}.values():
        kms_client.meta.events.register("before-call.kms.EnableKeyRotation", refuse)


def test_a_key_rotation_aws_refused_stays_open_in_security_hub_and_says_why(hub: Any) -> None:
    """Issue 45.2: the keys enforcer's EnableKeyRotation is refused; its finding must not archive the record nor close
    the OCSF finding while rotation stays off."""
    key_id = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["KeyId"]
    rt = runtime(keys={"enforce": True})
    kms = KmsKeys(REGION)
    _refuse_enable_key_rotation(kms)
    clock = FixedClock(dt.datetime.now(dt.UTC))
    adapters = KeysAdapters(
        kms=kms, iam=IamAccessKeys(sleep=lambda _: None), secrets=SecretsRotation(REGION), clock=clock
    )
    sweep = events.scheduled({"kinds": ["kms"]}, event_id="sched-1", region=REGION)
    assert keys_handle(sweep, rt, adapters)["failed_actions"] == 1
    assert boto3.client("kms", region_name=REGION).get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"] is False
    [rotation_off] = [f for f in rt.sink.findings if f.rule == "keys.kms.rotation_off"]  # type: ignore[attr-defined]
    for n, found in enumerate(rt.sink.findings):  # type: ignore[attr-defined]
        assert export(on_the_bus(found, f"bus-{n}"), rt)["status"] == "exported"
    [record] = [r for r in hub.get_findings()["Findings"] if r["GeneratorId"].endswith("/keys.kms.rotation_off")]
    assert record["RecordState"] == "ACTIVE" and record["Workflow"]["Status"] == "NEW"
    assert record["Description"].startswith("not fixed: enable_key_rotation failed: UnsupportedOperationException")
    [ocsf] = [o for o in ocsf_objects() if o["finding_info"]["uid"] == record["Id"]]
    assert (ocsf["status"], ocsf["activity_name"]) == ("New", "Create")
    assert rotation_off.verified is not None and not rotation_off.verified.fixed


def test_a_revoke_the_enforcer_re_read_and_saw_done_archives_the_record(hub: Any) -> None:
    """The other side of 45.2: the network enforcer revokes the world-open rules, re-reads the group, sees them gone,
    and only then is the Security Hub record archived and the OCSF finding closed."""
    ec2 = boto3.client("ec2", region_name=REGION)
    _, group = new_group(ec2, tags={"team": "vision"})
    rt = runtime(network={"scope": "all", "enforce": True})
    network_handle(authorize(ec2, group), rt, network_aws())
    [found] = rt.sink.findings  # type: ignore[attr-defined]
    assert export(on_the_bus(found, "bus-1"), rt)["record_state"] == "ARCHIVED"
    assert records(hub)[group]["RecordState"] == "ARCHIVED"
    [ocsf] = ocsf_objects()
    assert (ocsf["status"], ocsf["activity_name"]) == ("Resolved", "Close")
    assert found.verified is not None and found.verified.fixed and f"gone from {group}" in found.verified.seen


# --- export integrity -----------------------------------------------------------------------------------------------


def test_a_forged_fixed_finding_invoked_directly_is_refused_recorded_and_parked(hub: Any) -> None:
    """Issue 45.3: whoever may invoke the function can write a 'fixed' finding with the bus rule's source and account;
    it names a finding no governor function recorded, so it is refused, and the real record stays ACTIVE."""
    rt = runtime()
    assert export(published(rt, world_open(), "e-1"), rt)["record_state"] == "ACTIVE"
    forged = world_open(id="forged-1", at=NOW, actions=REVOKED, enforced=True, verified=SEEN_GONE)
    result = export(on_the_bus(forged, "e-forged"), rt)
    assert result["status"] == "rejected" and "not in the governor's outbox" in result["reason"]
    assert records(hub)["sg-0123"]["RecordState"] == "ACTIVE"
    [(_, reason)] = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert "finding refused" in reason
    refused = [d for _, d in rt.ledger.decisions if d.rule == "securityhub.refused"]  # type: ignore[attr-defined]
    assert len(refused) == 1 and refused[0].resource == "sg-0123"
    # a real finding's id with its verification changed is refused too: the outbox holds what was published
    real = world_open(at=NOW, actions=REVOKED, enforced=True)
    event = published(rt, real, "e-2")
    event["detail"]["verified"] = SEEN_GONE
    assert "differs from what the governor recorded (verified)" in export(event, rt)["reason"]
    assert records(hub)["sg-0123"]["RecordState"] == "ACTIVE" and len(ocsf_objects()) == 1


def test_two_long_secret_arns_that_share_their_first_600_characters_are_two_records(hub: Any) -> None:
    """Issue 45.3: ids were cut at 512 characters, so fixing one secret archived the other's record."""
    rt = runtime()
    prefix = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:" + "team/" * 120
    first, second = prefix + "alpha-AbCdEf", prefix + "omega-GhIjKl"
    for n, arn in enumerate((first, second)):
        at = NOW - dt.timedelta(minutes=10)
        opened = world_open(arn, policy="keys", rule="keys.secret.rotation_off", at=at)
        export(published(rt, opened, f"e-{n}"), rt)
    fixed = world_open(
        first, policy="keys", rule="keys.secret.rotation_off", actions=REVOKED, enforced=True, verified=SEEN_GONE
    )
    export(published(rt, fixed.model_copy(update={"at": NOW}), "e-fix"), rt)
    stored = records(hub)
    assert len({r["Id"] for r in stored.values()}) == 2 and all(len(r["Id"]) <= 512 for r in stored.values())
    assert (stored[first]["RecordState"], stored[second]["RecordState"]) == ("ARCHIVED", "ACTIVE")


# --- ordering -------------------------------------------------------------------------------------------------------


def test_a_retried_or_replayed_older_finding_never_reopens_a_resolved_record(hub: Any) -> None:
    """Issue 46.3: the ACTIVE import is retried (its answer was lost) after the ARCHIVED one, or the runbook replays
    the DLQ: the record stays ARCHIVED and the OCSF log is not rewritten."""
    rt = runtime()
    opened = published(rt, world_open(at=NOW - dt.timedelta(minutes=10)), "e-1")
    export(opened, rt)
    fixed = world_open(id=None, at=NOW - dt.timedelta(minutes=5), actions=REVOKED, enforced=True, verified=SEEN_GONE)
    export(published(rt, fixed, "e-2"), rt)
    assert records(hub)["sg-0123"]["RecordState"] == "ARCHIVED"
    before = ocsf_objects()
    retried = dict(opened, id="e-1-retry")  # the same finding delivered again: Lambda's retry, a DLQ replay
    assert export(retried, rt)["status"] == "stale"
    stored = records(hub)["sg-0123"]
    assert stored["RecordState"] == "ARCHIVED" and stored["UpdatedAt"] == "2026-11-20T08:55:00.000Z"
    assert ocsf_objects() == before and [o["status"] for o in before] == ["New", "Resolved"]
    assert [d.reasons[0] for _, d in rt.ledger.decisions][-1].startswith("not written: a newer finding")  # type: ignore[attr-defined]


# --- escaping -------------------------------------------------------------------------------------------------------


def test_crlf_and_a_forged_owner_label_stay_one_line_and_a_300_kb_detail_is_cut(hub: Any) -> None:
    """Issue 45.8: a tag value carrying CR/LF and ``owner:`` must not become a second label or product field line,
    and a 300 KB detail must not become a 300 KB OCSF line."""
    rt = runtime()
    hostile = world_open(
        owner="ana@example.com\r\nowner:mallory@evil.example", team="vision\u202e", detail="d" * 300_000
    )
    export(published(rt, hostile, "e-1"), rt)
    [ocsf] = ocsf_objects()
    [labels] = [r["labels"] for r in ocsf["resources"]]
    assert labels == ["owner:ana@example.com owner:mallory@evil.example", "team:vision"]
    assert len(ocsf["finding_info"]["desc"]) <= 2048 and len(json.dumps(ocsf)) < 8_000
    fields = records(hub)["sg-0123"]["ProductFields"]
    assert fields["gpu-fleet-governor/owner"] == "ana@example.com owner:mallory@evil.example"
    everything = json.dumps([ocsf, records(hub)["sg-0123"]], ensure_ascii=False)
    assert not any(c in everything for c in "\r\n\u202e")
