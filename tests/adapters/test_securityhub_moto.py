"""The Security Hub export on the emulator (moto): the function's own clients import ASFF findings that GetFindings
returns, archive the same record when the governor's fix arrives, call BatchImportFindings in batches of at most 100,
stop on FailedFindings, and write the OCSF object to the named bucket."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from py_ocsf_models.events.findings.detection_finding import DetectionFinding

from governor.adapters.aws import client
from governor.domain.decision import Finding
from governor.domain.verification import Verification
from governor.outbox import Outbox
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor.securityhub import domain
from governor.securityhub.handler import handle
from governor.securityhub.hub import ImportFailed, SecurityHub
from governor_cli.testing.events import ACCOUNT, REGION, finding
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
BUCKET = "security-lake-custom-source"


@pytest.fixture
def aws() -> Iterator[Any]:
    with mock_aws():
        client.cache_clear()
        hub = boto3.client("securityhub", region_name=REGION)
        hub.enable_security_hub()
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield hub
        client.cache_clear()


def runtime(**section: Any) -> Runtime:
    return Runtime(
        policy=parse_policy({"securityhub": {"enforce": True, "asff": True, **section}}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def body(**changes: Any) -> dict[str, Any]:
    return {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": "sg-0123",
        "title": "Security group sg-0123 opened port 22 to the world",
        "id": "f-1",
        "at": (NOW - dt.timedelta(minutes=5)).isoformat(),
        **changes,
    }


def published(rt: Runtime, body_: dict[str, Any], event_id: str) -> dict[str, Any]:
    """As a governor function publishes a finding: staged in the outbox (the shared ledger), then put on the bus."""
    box = Outbox(rt.ledger, MemorySink(), event_id=event_id)
    [staged] = box.add([Finding.model_validate(body_)])
    box.flush()
    return finding(staged.model_dump(mode="json"), event_id=event_id)


def findings(hub: Any) -> list[dict[str, Any]]:
    return list(hub.get_findings()["Findings"])


def test_a_finding_lands_in_security_hub_and_its_fix_archives_the_same_record(aws: Any) -> None:
    rt = runtime(ocsf_bucket=BUCKET)
    assert handle(published(rt, body(), "e-1"), rt, now=NOW, account=ACCOUNT)["status"] == "exported"
    [stored] = findings(aws)
    assert stored["ProductArn"] == f"arn:aws:securityhub:{REGION}:{ACCOUNT}:product/{ACCOUNT}/default"
    assert stored["RecordState"] == "ACTIVE" and stored["Severity"]["Label"] == "CRITICAL"
    # the revoke was re-read and seen done (the runner's verification): the same record is archived, at the fix's time
    seen = Verification(fixed=True, seen="rule(s) gone from sg-0123").model_dump()
    fixed = body(actions=[{"type": "revoke_ingress", "enforced": True}], enforced=True, id="f-2", verified=seen)
    fixed["at"] = (NOW - dt.timedelta(minutes=1)).isoformat()
    handle(published(rt, fixed, "e-2"), rt, now=NOW + dt.timedelta(minutes=1), account=ACCOUNT)
    [updated] = findings(aws)
    assert updated["Id"] == stored["Id"] and updated["RecordState"] == "ARCHIVED"
    assert updated["UpdatedAt"] == "2026-11-20T08:59:00.000Z"
    keys = [o["Key"] for o in boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert [k.rsplit("/", 1)[-1] for k in sorted(keys)] == ["f-1-1.json", "f-2-3.json"]  # Create, then Close
    obj = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=sorted(keys)[1])
    assert DetectionFinding.model_validate(json.loads(obj["Body"].read())).status_id.value == 4


def test_250_findings_go_in_three_calls_of_at_most_100(aws: Any) -> None:
    hub = SecurityHub(REGION)
    calls: list[int] = []
    hub._hub.meta.events.register(
        "provide-client-params.securityhub.BatchImportFindings",
        lambda params, **_: calls.append(len(params["Findings"])),
    )
    shape: dict[str, Any] = {"account": ACCOUNT, "region": REGION, "partition": "aws", "remediation": None}
    records = [
        domain.security_finding(Finding.model_validate(body(resource=f"i-{n:04d}")), **shape) for n in range(250)
    ]
    assert hub.import_findings(records) == 250
    assert calls == [100, 100, 50]
    pages = aws.get_paginator("get_findings").paginate(PaginationConfig={"PageSize": 100})
    assert sum(len(page["Findings"]) for page in pages) == 250


def test_a_refused_finding_raises_so_the_event_is_retried(aws: Any) -> None:
    hub = SecurityHub(REGION)
    record = domain.security_finding(
        Finding.model_validate(body()),
        account=ACCOUNT,
        region=REGION,
        partition="aws",
        remediation=None,
    )
    with pytest.raises(ImportFailed, match="refused 1 finding"):
        hub.import_findings([{**record, "Resources": []}])  # Security Hub requires at least one resource


def test_a_finding_over_240_kb_is_never_sent(aws: Any) -> None:
    with pytest.raises(ImportFailed, match="240 KB"):
        SecurityHub(REGION).import_findings([{"Id": "x", "Pad": "x" * (241 * 1024)}])
    assert findings(aws) == []
