"""A governor finding as an OCSF Detection Finding and as an ASFF finding for Security Hub. Pure: no AWS calls.

OCSF (schema 1.5.0, class ``Detection Finding`` 2004 in category ``Findings`` 2, the format Prowler emits and the
current Security Hub stores) is an event log: a finding opens with activity ``Create`` and status ``New``, and the
governor's fix closes it with activity ``Close`` and status ``Resolved``. ASFF is one record per finding, updated in
place: its ``Id`` is stable per account, region, policy, rule and resource, so the resolving finding archives the
same record (``RecordState: ARCHIVED``). ``Workflow`` is set only when the record is first written: after that it
belongs to the people triaging in Security Hub, and BatchImportFindings ignores a provider's update of it.

Every string is cut to the ASFF limit AWS documents (Title 256, Description 1,024, Remediation text 512, product
field values 2,048), which keeps a finding far below BatchImportFindings' 240 KB; :func:`fits` checks that bound.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from governor.domain.actions import FIXING_ACTIONS
from governor.domain.decision import Decision, Finding

PRODUCT = "GPU Fleet Governor"
VENDOR = "gpu-fleet-governor"
OCSF_VERSION = "1.5.0"
DETECTION_FINDING = 2004
FINDINGS_CATEGORY = 2
#: OCSF activity ids of a Detection Finding (type_uid = class_uid * 100 + activity_id).
CREATE, CLOSE = 1, 3
#: OCSF status ids.
NEW, RESOLVED = 1, 4
_OCSF_SEVERITY = {"info": (1, "Informational"), "warning": (3, "Medium"), "critical": (5, "Critical")}
_ASFF_SEVERITY = {"info": "INFORMATIONAL", "warning": "MEDIUM", "critical": "CRITICAL"}
SCHEMA_VERSION = "2018-10-08"
#: BatchImportFindings: at most 100 findings per call, 240 KB per finding, 6 MB per call (Security Hub partner guide).
MAX_BATCH = 100
MAX_FINDING_BYTES = 240 * 1024
MAX_BATCH_BYTES = 6 * 1024 * 1024
ASFF_TYPE = "Software and Configuration Checks/AWS Security Best Practices"
#: Resource types Security Hub knows, by the shape of the resource id the governor reports.
_RESOURCE_TYPES = (
    ("i-", "AwsEc2Instance"),
    ("sgr-", "AwsEc2SecurityGroup"),
    ("sg-", "AwsEc2SecurityGroup"),
    ("eni-", "AwsEc2NetworkInterface"),
    ("eipalloc-", "AwsEc2Eip"),
    ("AKIA", "AwsIamAccessKey"),
    ("ASIA", "AwsIamAccessKey"),
)
_ARN_TYPES = {"kms": "AwsKmsKey", "secretsmanager": "AwsSecretsManagerSecret", "iam": "AwsIamUser"}


def resolved(finding: Finding) -> bool:
    """The governor fixed it: an enforced action that fixes by itself (a stop, a revoke, a rotation...)."""
    return any(
        isinstance(action, Mapping) and action.get("type") in FIXING_ACTIONS and action.get("enforced")
        for action in finding.actions
    )


def resource_type(resource: str) -> str:
    if resource.startswith("arn:"):
        service = resource.split(":")[2] if resource.count(":") >= 2 else ""
        return _ARN_TYPES.get(service, "Other")
    return next((kind for prefix, kind in _RESOURCE_TYPES if resource.startswith(prefix)), "Other")


def product_arn(partition: str, region: str, account: str) -> str:
    """The account's own default product: the one an account may import its own findings into."""
    return f"arn:{partition}:securityhub:{region}:{account}:product/{account}/default"


def finding_uid(finding: Finding, account: str, region: str) -> str:
    """Stable per account, region, policy, rule and resource: a later finding about the same problem updates it."""
    return f"{VENDOR}/{account}/{region}/{finding.policy}/{finding.rule}/{finding.resource}"[:512]


def _millis(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def detection_finding(
    finding: Finding, *, account: str, region: str, partition: str, remediation: str | None, now: dt.datetime
) -> dict[str, Any]:
    """The OCSF 1.5.0 Detection Finding event for ``finding``: Create/New, or Close/Resolved once the governor fixed
    it."""
    closed = resolved(finding)
    activity, status = (CLOSE, RESOLVED) if closed else (CREATE, NEW)
    severity_id, severity = _OCSF_SEVERITY[finding.severity]
    resource: dict[str, Any] = {
        "uid": finding.resource,
        "type": resource_type(finding.resource),
        "region": region,
        "cloud_partition": partition,
    }
    labels = [f"{key}:{value}" for key, value in (("owner", finding.owner), ("team", finding.team)) if value]
    if labels:
        resource["labels"] = labels
    event: dict[str, Any] = {
        "activity_id": activity,
        "activity_name": "Close" if closed else "Create",
        "category_uid": FINDINGS_CATEGORY,
        "category_name": "Findings",
        "class_uid": DETECTION_FINDING,
        "class_name": "Detection Finding",
        "type_uid": DETECTION_FINDING * 100 + activity,
        "type_name": f"Detection Finding: {'Close' if closed else 'Create'}",
        "severity_id": severity_id,
        "severity": severity,
        "status_id": status,
        "status": "Resolved" if closed else "New",
        "time": _millis(now),
        "message": finding.title,
        "metadata": {
            "version": OCSF_VERSION,
            "product": {"name": PRODUCT, "vendor_name": VENDOR, "uid": VENDOR},
            "event_code": finding.rule,
            "uid": finding.id or finding_uid(finding, account, region),
            "profiles": ["cloud"],
        },
        "finding_info": {
            "uid": finding_uid(finding, account, region),
            "title": finding.title,
            "desc": finding.detail,
            "types": [finding.policy, finding.rule],
            "created_time": _millis(finding.at),
            "first_seen_time": _millis(finding.at),
        },
        "cloud": {
            "provider": "AWS",
            "region": region,
            "account": {"uid": account, "name": account, "type": "AWS Account", "type_id": 10},
        },
        "resources": [resource],
        "unmapped": {
            "policy": finding.policy,
            "owner": finding.owner,
            "team": finding.team,
            "enforced": finding.enforced,
            "actions": [a.get("type") for a in finding.actions if isinstance(a, Mapping)],
        },
    }
    if remediation:
        event["remediation"] = {"desc": remediation}
    return event


def security_finding(
    finding: Finding, *, account: str, region: str, partition: str, remediation: str | None, now: dt.datetime
) -> dict[str, Any]:
    """The ASFF finding for ``finding`` in this account's default product: ACTIVE, or ARCHIVED once fixed."""
    closed = resolved(finding)
    severity = {"Label": _ASFF_SEVERITY[finding.severity], "Original": finding.severity}
    fields = {
        f"{VENDOR}/policy": finding.policy,
        f"{VENDOR}/rule": finding.rule,
        f"{VENDOR}/enforced": str(finding.enforced).lower(),
        **{
            f"{VENDOR}/{k}": v
            for k, v in (
                ("owner", finding.owner),
                ("team", finding.team),
                ("id", finding.id),
                ("account", finding.account),
                ("region", finding.region),
            )
            if v
        },
    }
    record: dict[str, Any] = {
        "SchemaVersion": SCHEMA_VERSION,
        "Id": finding_uid(finding, account, region),
        "ProductArn": product_arn(partition, region, account),
        "GeneratorId": f"{VENDOR}/{finding.policy}/{finding.rule}"[:512],
        "AwsAccountId": account,
        "Types": [ASFF_TYPE],
        "CreatedAt": _iso(finding.at),
        "FirstObservedAt": _iso(finding.at),
        "UpdatedAt": _iso(now),
        "Severity": severity,
        "FindingProviderFields": {"Severity": severity, "Types": [ASFF_TYPE]},
        "Title": _cut(finding.title, 256),
        "Description": _cut(finding.detail or finding.title, 1024),
        "ProductFields": {k: _cut(str(v), 2048) for k, v in fields.items()},
        "Resources": [
            {"Type": resource_type(finding.resource), "Id": finding.resource, "Partition": partition, "Region": region}
        ],
        "RecordState": "ARCHIVED" if closed else "ACTIVE",
    }
    if remediation:
        record["Remediation"] = {"Recommendation": {"Text": _cut(remediation, 512)}}
    if not closed:
        record["Workflow"] = {"Status": "NEW"}
    return record


def size(record: Mapping[str, Any]) -> int:
    return len(json.dumps(record, separators=(",", ":")).encode())


def fits(record: Mapping[str, Any]) -> bool:
    return size(record) <= MAX_FINDING_BYTES


def batches(records: Iterable[Mapping[str, Any]]) -> Iterator[list[Mapping[str, Any]]]:
    """Records in BatchImportFindings-sized calls: at most 100 findings and 6 MB each, in order."""
    batch: list[Mapping[str, Any]] = []
    total = 0
    for record in records:
        weight = size(record)
        if batch and (len(batch) == MAX_BATCH or total + weight > MAX_BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(record)
        total += weight
    if batch:
        yield batch


def export_decision(finding: Finding, *, uid: str, enforce: bool, asff: bool, written: Sequence[str] = ()) -> Decision:
    """What the export did with one finding, for the ledger (the report leaves info-level decisions out of findings)."""
    closed = resolved(finding)
    if not enforce:
        reason = (
            "report-only (securityhub.enforce is false): built the OCSF finding"
            + (" and the ASFF finding" if asff else "")
            + ", wrote nothing"
        )
    else:
        reason = "exported to " + ", ".join(written) if written else "nothing written"
    return Decision(
        policy="securityhub",
        verdict="act" if enforce else "ok",
        resource=finding.resource,
        rule="securityhub.export",
        reasons=[reason],
        evidence={"finding": uid, "source_policy": finding.policy, "status": "resolved" if closed else "new"},
    )
