"""The Security Hub export's records and handler on fakes: OCSF Detection Findings that Prowler's own OCSF models
(py-ocsf-models) accept, ASFF within Security Hub's limits, batching, report-only, the policy section from the
capability's package, and the registry entry that is all the rest of the governor knows of it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from py_ocsf_models.events.findings.detection_finding import DetectionFinding

from governor.domain.decision import Finding
from governor.outbox import Outbox
from governor.policy import Policy, PolicyError, parse_policy
from governor.registry import REGISTRY
from governor.runtime import Runtime
from governor.securityhub import domain
from governor.securityhub.handler import handle, ocsf_key
from governor.securityhub.policy import SecurityHubPolicy
from governor_cli.testing.events import ACCOUNT, REGION, finding
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit import ocsf_1_6

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
MINUTES_5 = dt.timedelta(minutes=5)
SHAPE: dict[str, Any] = {
    "account": ACCOUNT,
    "region": "eu-west-1",
    "partition": "aws",
    "remediation": "Remove the rule.",
}


def a_finding(**changes: Any) -> Finding:
    body: dict[str, Any] = {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": "sg-0123",
        "title": "Security group sg-0123 opened port 22 to the world",
        "detail": "0.0.0.0/0 on 22/tcp",
        "owner": "ana@example.com",
        "team": "vision",
        "id": "f-1",
        "at": NOW - dt.timedelta(minutes=5),
        **changes,
    }
    return Finding.model_validate(body)


FIXED = [{"type": "revoke_ingress", "enforced": True}]
#: What the runner's re-read after a revoke reports (``Finding.verified``).
SEEN_FIXED = {"fixed": True, "seen": "rule(s) gone from sg-0123"}


def test_an_open_finding_is_an_ocsf_detection_finding_prowlers_models_accept() -> None:
    event = domain.detection_finding(a_finding(), **SHAPE)
    parsed = DetectionFinding.model_validate(event)
    assert (parsed.class_uid, parsed.category_uid, parsed.type_uid.value) == (2004, 2, 200401)
    assert (event["activity_name"], event["status"], event["severity"]) == ("Create", "New", "Critical")
    assert parsed.finding_info.uid == f"gpu-fleet-governor/{ACCOUNT}/eu-west-1/network/network.world-open/sg-0123"
    assert event["resources"][0] == {
        "uid": "sg-0123",
        "type": "AwsEc2SecurityGroup",
        "region": "eu-west-1",
        "cloud_partition": "aws",
        "labels": ["owner:ana", "team:vision"],  # the one name every surface gives the owner (issue 48)
    }
    assert event["cloud"]["account"]["uid"] == ACCOUNT and event["remediation"] == {"desc": "Remove the rule."}
    # OCSF 1.6.0, and timed by the finding itself (five minutes before the export ran), not by the export
    assert event["metadata"]["version"] == "1.6.0" and event["time"] == int((NOW - MINUTES_5).timestamp() * 1000)


def test_the_governors_fix_closes_the_ocsf_finding_and_archives_the_asff_record() -> None:
    fixed = a_finding(actions=FIXED, enforced=True, verified=SEEN_FIXED)
    event = domain.detection_finding(fixed, **SHAPE)
    DetectionFinding.model_validate(event)
    assert (event["activity_id"], event["type_uid"], event["status_id"]) == (3, 200403, 4)
    record = domain.security_finding(fixed, **SHAPE)
    assert record["RecordState"] == "ARCHIVED" and "Workflow" not in record
    opened = domain.security_finding(a_finding(), **SHAPE)
    assert opened["RecordState"] == "ACTIVE" and opened["Workflow"] == {"Status": "NEW"}
    assert opened["Id"] == record["Id"]  # the same Security Hub record, updated in place


def test_a_warning_that_only_tells_someone_does_not_resolve() -> None:
    told = a_finding(actions=[{"type": "notify", "enforced": True}, {"type": "stop", "enforced": False}])
    assert not domain.resolved(told)


def test_the_asff_finding_has_every_required_field_in_the_default_product() -> None:
    record = domain.security_finding(a_finding(), **SHAPE)
    required = {
        "SchemaVersion",
        "Id",
        "ProductArn",
        "GeneratorId",
        "AwsAccountId",
        "Types",
        "CreatedAt",
        "UpdatedAt",
        "Severity",
        "Title",
        "Description",
        "Resources",
    }
    assert required <= set(record)
    assert record["ProductArn"] == f"arn:aws:securityhub:eu-west-1:{ACCOUNT}:product/{ACCOUNT}/default"
    assert record["Severity"] == {"Label": "CRITICAL", "Original": "critical"}
    assert record["Resources"] == [
        {"Type": "AwsEc2SecurityGroup", "Id": "sg-0123", "Partition": "aws", "Region": "eu-west-1"}
    ]
    # UpdatedAt is the finding's own time: Security Hub then keeps the newer of two imports in any arrival order
    assert record["CreatedAt"] == "2026-11-20T08:55:00.000Z" and record["UpdatedAt"] == "2026-11-20T08:55:00.000Z"


def test_long_texts_are_cut_to_the_asff_limits_and_the_finding_fits_240_kb() -> None:
    huge = a_finding(title="t" * 5000, detail="d" * 300_000, owner="o" * 5000)
    record = domain.security_finding(huge, **{**SHAPE, "remediation": "r" * 5000})
    assert len(record["Title"]) == 256 and len(record["Description"]) == 1024
    assert len(record["Remediation"]["Recommendation"]["Text"]) == 512
    assert all(len(v) <= 2048 for v in record["ProductFields"].values())
    assert domain.fits(record) and domain.size(record) < 30_000


def test_batches_hold_at_most_100_findings_and_6_mb() -> None:
    records = [{"Id": str(i)} for i in range(250)]
    assert [len(b) for b in domain.batches(records)] == [100, 100, 50]
    big = [{"Id": str(i), "Pad": "x" * 200_000} for i in range(70)]
    sizes = [sum(domain.size(r) for r in b) for b in domain.batches(big)]
    assert all(s <= domain.MAX_BATCH_BYTES for s in sizes) and sum(len(b) for b in domain.batches(big)) == 70


@pytest.mark.parametrize(
    ("resource", "kind"),
    [
        ("i-0abc", "AwsEc2Instance"),
        ("sgr-01", "AwsEc2SecurityGroup"),
        ("arn:aws:kms:eu-west-1:123456789012:key/1", "AwsKmsKey"),
        ("arn:aws:secretsmanager:eu-west-1:123456789012:secret:x", "AwsSecretsManagerSecret"),
        ("AKIAIOSFODNN7EXAMPLE", "AwsIamAccessKey"),
        ("team:vision", "Other"),
    ],
)
def test_resource_types(resource: str, kind: str) -> None:
    assert domain.resource_type(resource) == kind


# --- the policy section, declared in the capability's package ---------------------------------------------------


def test_the_section_is_part_of_the_policy_with_its_defaults() -> None:
    assert SecurityHubPolicy.of(Policy()) == SecurityHubPolicy()
    assert SecurityHubPolicy.of(parse_policy({"securityhub": {"enforce": True, "asff": True}})).asff is True
    assert "securityhub" in REGISTRY.sections()


def test_a_wrong_field_names_its_path() -> None:
    with pytest.raises(PolicyError, match=r"securityhub\.asf: unknown field \(did you mean 'asff'\?\)"):
        parse_policy({"securityhub": {"asf": True}})
    with pytest.raises(PolicyError, match=r"securityhub\.ocsf_bucket"):
        parse_policy({"securityhub": {"ocsf_bucket": "Not A Bucket"}})


# --- the handler on fakes ------------------------------------------------------------------------------------------


@dataclass
class FakeHub:
    imported: list[Mapping[str, Any]] = field(default_factory=list)

    def import_findings(self, records: Sequence[Mapping[str, Any]]) -> int:
        self.imported.extend(records)
        return len(records)


@dataclass
class FakeArchive:
    bucket: str = "lake"
    objects: dict[str, bytes] = field(default_factory=dict)

    def put(self, key: str, body: bytes) -> str:
        self.objects[key] = body
        return f"s3://{self.bucket}/{key}"


def runtime(**section: Any) -> Runtime:
    policy = parse_policy({"securityhub": section})
    return Runtime(
        policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters(), region=REGION
    )


def bus_event(rt: Runtime, event_id: str = "e-1", **changes: Any) -> dict[str, Any]:
    """A finding as a governor function publishes it: staged in the outbox (the ledger) first, then on the bus."""
    box = Outbox(rt.ledger, MemorySink(), event_id=event_id)
    [staged] = box.add([a_finding(**changes)])
    box.flush()
    return finding(staged.model_dump(mode="json"), event_id=event_id, time=NOW.isoformat())


def test_report_only_builds_both_records_and_writes_nothing() -> None:
    rt, hub, archive = runtime(asff=True), FakeHub(), FakeArchive()
    result = handle(bus_event(rt), rt, hub, archive, NOW, account=ACCOUNT)
    assert result["status"] == "report-only" and result["asff"]["RecordState"] == "ACTIVE"
    assert hub.imported == [] and archive.objects == {}
    decision = rt.ledger.decisions[-1][1]  # type: ignore[attr-defined]
    assert decision.policy == "securityhub" and decision.verdict == "ok" and "report-only" in decision.reasons[0]


def test_enforcing_writes_the_ocsf_object_and_imports_the_asff_finding() -> None:
    rt, hub, archive = runtime(enforce=True, asff=True, ocsf_bucket="lake"), FakeHub(), FakeArchive()
    result = handle(bus_event(rt), rt, hub, archive, NOW, account=ACCOUNT)
    assert result["status"] == "exported" and len(hub.imported) == 1
    [(key, body)] = archive.objects.items()
    assert key == f"ocsf/class_uid=2004/region={REGION}/account={ACCOUNT}/day=20261120/f-1-1.json"
    DetectionFinding.model_validate(json.loads(body))
    assert rt.ledger.decisions[-1][1].verdict == "act"  # type: ignore[attr-defined]


def test_without_asff_nothing_goes_to_security_hub() -> None:
    rt, hub = runtime(enforce=True), FakeHub()
    assert handle(bus_event(rt), rt, hub, None, NOW, account=ACCOUNT)["written"] == ["log"]
    assert hub.imported == []


def test_a_finding_from_another_account_is_parked_not_exported() -> None:
    rt, hub = runtime(enforce=True, asff=True), FakeHub()
    raw = finding(a_finding().model_dump(mode="json"), account="210987654321")
    assert handle(raw, rt, hub, None, NOW, account=ACCOUNT)["status"] == "rejected"
    assert hub.imported == [] and len(rt.dead_letters.messages) == 1  # type: ignore[attr-defined]


def test_the_ocsf_key_is_partitioned_by_region_account_and_day() -> None:
    event = domain.detection_finding(a_finding(), **SHAPE)
    assert ocsf_key("lake/ocsf/", event, ACCOUNT, "eu-west-1", "f-1").startswith(
        "lake/ocsf/class_uid=2004/region=eu-west-1/account=123456789012/day=20261120/"
    )


def test_a_member_accounts_finding_is_imported_into_the_callers_own_product() -> None:
    rt, hub = runtime(enforce=True, asff=True), FakeHub()
    handle(bus_event(rt, account="210987654321", region="eu-west-1"), rt, hub, None, NOW, account=ACCOUNT)
    [record] = hub.imported
    assert record["AwsAccountId"] == ACCOUNT and f":{ACCOUNT}:product/{ACCOUNT}/default" in record["ProductArn"]
    assert record["ProductFields"]["gpu-fleet-governor/account"] == "210987654321"


# --- OCSF 1.6.0, resolution by re-read --------------------------------------------------------------------------------

FAILED = {"fixed": False, "seen": "enable_key_rotation failed: UnsupportedOperationException: Imported key."}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"actions": FIXED, "enforced": True, "verified": SEEN_FIXED},
        {"actions": FIXED, "enforced": True, "verified": FAILED},
        {"owner": None, "team": None, "detail": ""},
    ],
    ids=["open", "fixed", "failed", "bare"],
)
def test_every_ocsf_event_the_export_builds_is_an_ocsf_1_6_detection_finding(changes: dict[str, Any]) -> None:
    """Security Hub's current version stores OCSF 1.6.0; the events say so and hold only what 1.6.0 defines."""
    rt = runtime(asff=True)
    event = handle(bus_event(rt, **changes), rt, FakeHub(), None, NOW, account=ACCOUNT)["ocsf"]
    assert ocsf_1_6.problems(event) == []
    DetectionFinding.model_validate(event)  # and Prowler's 1.5.0 models still read it


def test_an_enforced_fix_the_governor_did_not_see_stays_open_and_says_why() -> None:
    """An enforced revoke, rotation or stop is not a fix until the re-read saw it: a refused one leaves the problem
    open, and both records say what happened instead."""
    rt, hub = runtime(enforce=True, asff=True), FakeHub()
    handle(bus_event(rt, actions=FIXED, enforced=True, verified=FAILED), rt, hub, None, NOW, account=ACCOUNT)
    never = handle(
        bus_event(rt, "e-2", id="f-2", at=NOW, actions=FIXED, enforced=True), rt, FakeHub(), None, NOW, account=ACCOUNT
    )
    [record] = hub.imported
    assert record["RecordState"] == "ACTIVE" and record["Workflow"] == {"Status": "NEW"}
    assert record["Description"].startswith("not fixed: enable_key_rotation failed: UnsupportedOperationException")
    assert record["ProductFields"]["gpu-fleet-governor/resolution"].startswith("not fixed: enable_key_rotation failed")
    assert never["record_state"] == "ACTIVE"
    decision = rt.ledger.decisions[-1][1]  # type: ignore[attr-defined]
    assert decision.evidence["status"] == "new" and "did not re-read" in decision.reasons[-1]


def test_the_owner_is_the_one_name_every_surface_gives_them() -> None:
    """Issue 48 item 5: a finding whose owner is a role session ARN (the creator tag) is labelled with the person's
    name in OCSF and ASFF, as the report and the messages name them, never the ARN."""
    arn = "arn:aws:sts::123456789012:assumed-role/ml-engineer/dara"
    event = domain.detection_finding(a_finding(owner=arn), **SHAPE)
    assert event["resources"][0]["labels"] == ["owner:dara", "team:vision"]
    assert event["unmapped"]["owner"] == "dara"
    asff = domain.security_finding(a_finding(owner=arn), **SHAPE)
    assert asff["ProductFields"]["gpu-fleet-governor/owner"] == "dara"
