"""A governor finding as an OCSF Detection Finding and as an ASFF finding for Security Hub. Pure: no AWS calls.

OCSF (schema 1.6.0, the version the current Security Hub stores; class ``Detection Finding`` 2004 in category
``Findings`` 2) is an event log: a finding opens with activity ``Create`` and status ``New``, and closes with activity
``Close`` and status ``Resolved``. ASFF is one record per finding, updated in place: its ``Id`` is unique per account,
region, policy, rule and resource, so the resolving finding archives the same record (``RecordState: ARCHIVED``).
``Workflow`` is set only when the record is first written: after that it belongs to the people triaging in Security
Hub, and BatchImportFindings ignores a provider's update of it.

Resolved means the enforcer re-read the resource after acting and saw it fixed (``Finding.verified``, set by the
runner, ``governor.domain.rereads``); an enforced action that failed, or whose re-read did not see the fix, leaves the
finding open and says why. Both records are stamped with the finding's own time, never the export's: Security Hub
ignores an import whose ``UpdatedAt`` is not later than the stored one, so a retried or replayed older finding cannot
reopen a newer resolution.

Every string goes through the one escape of this sink (:func:`governor.domain.escape.record_text`: one line, no
control characters) cut to the ASFF limit AWS documents (Title 256, Description 1,024, Remediation text 512, product
field keys 128 and values 2,048, at most 50 of them), which keeps a finding far below BatchImportFindings' 240 KB;
:func:`fits` checks that bound. The OCSF strings get the same escape and limits of the same order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from governor.domain.decision import Decision, Finding
from governor.domain.escape import record_text
from governor.domain.facts import owner_of
from governor.registry import REGISTRY

PRODUCT = "GPU Fleet Governor"
VENDOR = "gpu-fleet-governor"
OCSF_VERSION = "1.6.0"
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
#: ASFF limits (Security Hub's AwsSecurityFinding reference): Id and GeneratorId 512, Title 256, Description 1,024,
#: Remediation text 512; ProductFields at most 50 pairs, keys 128 and values 2,048 characters.
MAX_ID, TITLE, DESCRIPTION, REMEDIATION = 512, 256, 1024, 512
#: A resource id is an AWS id or ARN (ARNs run to 2,048 characters); longer is not an id.
RESOURCE_ID = 2048
MAX_FIELDS, FIELD_KEY, FIELD_VALUE = 50, 128, 2048
#: OCSF sets no lengths; these keep one event a readable log line (a 300 KB detail is cut to a paragraph).
OCSF_TITLE, OCSF_TEXT, OCSF_UID, OCSF_LABEL = 256, 2048, 2048, 256
#: An id up to this long is the readable key itself; a longer one keeps this much of it and adds the key's SHA-256
#: (``#`` and 64 hex digits: 511 characters), so two keys that share their first 500 characters never share an id.
_READABLE = MAX_ID - 66
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
    """The governor fixed it: it re-read the resource after acting and saw the problem gone (``Finding.verified``).

    An enforced fixing action alone is not enough: AWS may have refused it (``UnsupportedOperationException``), or the
    resource may be back the way it was by the time it is re-read."""
    return finding.verified is not None and finding.verified.fixed


def claimed_fix(finding: Finding) -> bool:
    """The finding is about an enforced action that fixes by itself (a stop, a revoke, a rotation...); a finding that
    reports a refused action (``enforced`` false) only names it."""
    return finding.enforced and any(
        isinstance(action, Mapping) and action.get("type") in REGISTRY.fixing_actions() and action.get("enforced")
        for action in finding.actions
    )


def resolution(finding: Finding) -> str | None:
    """What the export says about the fix: verified, refused or not seen, or never re-read; None when nothing was
    enforced (a report-only finding is simply open)."""
    verified = finding.verified
    if verified is not None:
        return f"{'fixed' if verified.fixed else 'not fixed'}: {verified.seen or 'no detail'}"
    if claimed_fix(finding):
        return "not verified: the governor did not re-read the resource after acting"
    return None


def resource_type(resource: str) -> str:
    if resource.startswith("arn:"):
        service = resource.split(":")[2] if resource.count(":") >= 2 else ""
        return _ARN_TYPES.get(service, "Other")
    return next((kind for prefix, kind in _RESOURCE_TYPES if resource.startswith(prefix)), "Other")


def product_arn(partition: str, region: str, account: str) -> str:
    """The account's own default product: the one an account may import its own findings into."""
    return f"arn:{partition}:securityhub:{region}:{account}:product/{account}/default"


def finding_uid(finding: Finding, account: str, region: str) -> str:
    """Stable per account, region, policy, rule and resource: a later finding about the same problem updates it.

    Unique whatever the length: a key longer than :data:`_READABLE` (two long secret ARNs sharing their first 500
    characters) becomes its first characters plus the SHA-256 of all of it, and no readable key is that long."""
    key = f"{VENDOR}/{account}/{region}/{finding.policy}/{finding.rule}/{finding.resource}"
    if len(key) <= _READABLE:
        return key
    return f"{key[:_READABLE]}#{hashlib.sha256(key.encode()).hexdigest()}"


def _millis(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def owner_named(finding: Finding) -> str | None:
    """The owner as every surface names them (``facts.owner_of``: a role ARN or an address is the person's name),
    so Security Hub, the report and the messages agree (issue 48); None when the finding names nobody."""
    return owner_of(finding.owner).name if finding.owner else None


def _labels(finding: Finding) -> list[str]:
    """``owner:`` and ``team:`` labels, each one line: a CR or LF in a tag never becomes a label of its own."""
    return [
        record_text(f"{key}:{value}", OCSF_LABEL)
        for key, value in (("owner", owner_named(finding)), ("team", finding.team))
        if value
    ]


def detection_finding(
    finding: Finding, *, account: str, region: str, partition: str, remediation: str | None
) -> dict[str, Any]:
    """The OCSF 1.6.0 Detection Finding event for ``finding``: Create/New, or Close/Resolved once the governor saw it
    fixed; timed by the finding itself, so a replayed event says when it was true, not when it was written."""
    closed = resolved(finding)
    activity, status = (CLOSE, RESOLVED) if closed else (CREATE, NEW)
    severity_id, severity = _OCSF_SEVERITY[finding.severity]
    uid = finding_uid(finding, account, region)
    resource: dict[str, Any] = {
        "uid": record_text(finding.resource, OCSF_UID),
        "type": resource_type(finding.resource),
        "region": region,
        "cloud_partition": partition,
    }
    labels = _labels(finding)
    if labels:
        resource["labels"] = labels
    title = record_text(finding.title, OCSF_TITLE)
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
        "time": _millis(finding.at),
        "message": title,
        "metadata": {
            "version": OCSF_VERSION,
            "product": {"name": PRODUCT, "vendor_name": VENDOR, "uid": VENDOR},
            "event_code": record_text(finding.rule, OCSF_TITLE),
            "uid": record_text(finding.id, OCSF_UID) if finding.id else uid,
            "profiles": ["cloud"],
        },
        "finding_info": {
            "uid": uid,
            "title": title,
            "desc": record_text(finding.detail, OCSF_TEXT),
            "types": [record_text(finding.policy, OCSF_TITLE), record_text(finding.rule, OCSF_TITLE)],
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
            "policy": record_text(finding.policy, OCSF_TITLE),
            "owner": record_text(owner_named(finding), OCSF_LABEL) if finding.owner else None,
            "team": record_text(finding.team, OCSF_LABEL) if finding.team else None,
            "enforced": finding.enforced,
            "actions": [record_text(a.get("type"), OCSF_TITLE) for a in finding.actions if isinstance(a, Mapping)],
        },
    }
    said = resolution(finding)
    if said:
        event["status_detail"] = record_text(said, OCSF_TEXT)
    if remediation:
        event["remediation"] = {"desc": record_text(remediation, OCSF_TEXT)}
    return event


def _product_fields(finding: Finding) -> dict[str, str]:
    """The governor's own fields, keys and values escaped and within ASFF's limits (at most 50 pairs)."""
    fields = {
        "policy": finding.policy,
        "rule": finding.rule,
        "enforced": str(finding.enforced).lower(),
        "owner": owner_named(finding),
        "team": finding.team,
        "id": finding.id,
        "account": finding.account,
        "region": finding.region,
        "resolution": resolution(finding),
    }
    return {
        record_text(f"{VENDOR}/{key}", FIELD_KEY): record_text(value, FIELD_VALUE)
        for key, value in list(fields.items())[:MAX_FIELDS]
        if value
    }


def security_finding(
    finding: Finding, *, account: str, region: str, partition: str, remediation: str | None
) -> dict[str, Any]:
    """The ASFF finding for ``finding`` in this account's default product: ACTIVE, or ARCHIVED once the governor saw
    it fixed. ``UpdatedAt`` is the finding's own time, so Security Hub keeps the newest of two imports whatever order
    they arrive in (it ignores one whose ``UpdatedAt`` is not later than the stored one)."""
    closed = resolved(finding)
    severity = {"Label": _ASFF_SEVERITY[finding.severity], "Original": finding.severity}
    said = resolution(finding)
    detail = finding.detail or finding.title
    description = f"{said}. {detail}" if said and not closed else detail
    record: dict[str, Any] = {
        "SchemaVersion": SCHEMA_VERSION,
        "Id": finding_uid(finding, account, region),
        "ProductArn": product_arn(partition, region, account),
        "GeneratorId": record_text(f"{VENDOR}/{finding.policy}/{finding.rule}", MAX_ID),
        "AwsAccountId": account,
        "Types": [ASFF_TYPE],
        "CreatedAt": _iso(finding.at),
        "FirstObservedAt": _iso(finding.at),
        "UpdatedAt": _iso(finding.at),
        "Severity": severity,
        "FindingProviderFields": {"Severity": severity, "Types": [ASFF_TYPE]},
        "Title": record_text(finding.title, TITLE),
        "Description": record_text(description, DESCRIPTION),
        "ProductFields": _product_fields(finding),
        "Resources": [
            {
                "Type": resource_type(finding.resource),
                "Id": record_text(finding.resource, RESOURCE_ID),
                "Partition": partition,
                "Region": region,
            }
        ],
        "RecordState": "ARCHIVED" if closed else "ACTIVE",
    }
    if remediation:
        record["Remediation"] = {"Recommendation": {"Text": record_text(remediation, REMEDIATION)}}
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


def export_decision(
    finding: Finding, *, uid: str, enforce: bool, asff: bool, written: Sequence[str] = (), stale: bool = False
) -> Decision:
    """What the export did with one finding, for the ledger (the report leaves info-level decisions out of findings)."""
    closed = resolved(finding)
    if not enforce:
        reason = (
            "report-only (securityhub.enforce is false): built the OCSF finding"
            + (" and the ASFF finding" if asff else "")
            + ", wrote nothing"
        )
    elif stale:
        reason = "not written: a newer finding about the same problem was exported already"
    else:
        reason = "exported to " + ", ".join(written) if written else "nothing written"
    said = resolution(finding)
    return Decision(
        policy="securityhub",
        verdict="act" if enforce and not stale else "ok",
        resource=finding.resource,
        rule="securityhub.export",
        reasons=[reason, *([said] if said else [])],
        evidence={
            "finding": uid,
            "source_policy": finding.policy,
            "status": "resolved" if closed else "new",
            "finding_at": finding.at.isoformat(),
        },
    )
