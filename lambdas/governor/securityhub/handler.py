"""The ``securityhub`` function: every finding on the governor bus, exported as an OCSF Detection Finding and (with
``securityhub.asff``) imported into Security Hub.

It subscribes to the bus as the notifier does (source ``gpu-fleet-governor``, detail-type ``Governor Finding``, this
account only), and trusts no more than that: a finding is exported only if the governor's outbox holds it exactly as
delivered (``provenance``), so a direct invoke with a forged 'fixed' finding is refused, recorded and parked in the
DLQ with its reason. Report-only (``securityhub.enforce: false``, the default) builds both records and records the
decision in the ledger, writing nothing. Enforcing, it writes a finding only if it is the newest its record has seen
(``ordering``: a retried or replayed older finding never turns a resolved record back), then logs the OCSF event
(one JSON line), writes it to ``ocsf_bucket`` when one is named and, with ``asff``, imports the ASFF finding into this
account's default product; a finding the governor saw fixed archives the same Security Hub record. A write that
still fails after its retries raises, so Lambda retries the event and finally parks it in the DLQ.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from governor.adapters.aws import partition_of, per_session
from governor.domain.decision import Decision, Finding
from governor.events.envelopes import InvalidEventError
from governor.events.findings import FindingEvent, parse_finding_event
from governor.observability import logger, metrics
from governor.registry import REGISTRY
from governor.runtime import Handler, Invocation, Runtime
from governor.securityhub.domain import detection_finding, export_decision, finding_uid, security_finding
from governor.securityhub.hub import OcsfArchive, SecurityHub
from governor.securityhub.ordering import claim_newest
from governor.securityhub.policy import SecurityHubPolicy
from governor.securityhub.provenance import refusal


class Hub(Protocol):
    def import_findings(self, records: Any) -> int: ...


class Archive(Protocol):
    bucket: str

    def put(self, key: str, body: bytes) -> str: ...


@dataclass(frozen=True)
class Adapters:
    """Where the export writes: Security Hub (only with ``asff``) and the OCSF bucket (only with ``ocsf_bucket``),
    both only when enforcing; tests pass fakes."""

    hub: Hub | None = None
    archive: Archive | None = None


@per_session
def _hub(region: str | None) -> SecurityHub:
    return SecurityHub(region)


@per_session
def _archive(bucket: str, region: str | None) -> OcsfArchive:
    return OcsfArchive(bucket, region)


def parse(raw: Any, account: str | None = None) -> FindingEvent:
    return parse_finding_event(raw, account, "Security Hub export")


def remediation(finding: Finding, runtime: Runtime) -> str | None:
    """The sentence the report shows for this finding: its capability's own words (``governor.<name>.findings``)."""
    decision = {
        "policy": finding.policy,
        "rule": finding.rule,
        "severity": finding.severity,
        "reasons": [finding.detail or finding.title],
        "actions": finding.actions,
    }
    found = REGISTRY.problems_of(decision, runtime.policy)
    return found[0].remediation if found else None


def ocsf_key(prefix: str, event: dict[str, Any], account: str, region: str, event_id: str) -> str:
    day = dt.datetime.fromtimestamp(event["time"] / 1000, dt.UTC).strftime("%Y%m%d")
    return (
        f"{prefix.strip('/')}/class_uid={event['class_uid']}/region={region}/account={account}/day={day}/"
        f"{event_id}-{event['activity_id']}.json"
    )


def export(
    parsed: FindingEvent, runtime: Runtime, hub: Hub | None, archive: Archive | None, account: str
) -> dict[str, Any]:
    """Build both records, record the decision, then (enforcing) write the OCSF event and import the ASFF finding."""
    section = SecurityHubPolicy.of(runtime.policy)
    finding = parsed.detail
    # Security Hub takes findings for the caller's own account and region only (default product): a member account's
    # finding (organisation mode) is imported into the hub's, naming the member account in its product fields.
    region = runtime.region or parsed.region or finding.region or "us-east-1"
    shape: dict[str, Any] = {
        "region": region,
        "partition": partition_of(region),
        "remediation": remediation(finding, runtime),
    }
    uid = finding_uid(finding, account, region)
    refused = refusal(finding, runtime.ledger)
    if refused is not None:
        _refuse(finding, uid, refused, parsed.id, runtime)
    ocsf = detection_finding(finding, account=finding.account or account, **shape)
    asff = security_finding(finding, account=account, **shape) if section.asff else None
    if not section.enforce:
        runtime.ledger.record(export_decision(finding, uid=uid, enforce=False, asff=section.asff), event_id=parsed.id)
        logger.info("report-only: not exported", extra={"finding": uid, "asff": section.asff})
        return {"status": "report-only", "finding": uid, "ocsf": ocsf, "asff": asff}
    if asff is not None and hub is None:
        raise RuntimeError("securityhub.asff is on but the function has no Security Hub client")
    if not claim_newest(runtime.ledger, uid, finding):
        stale = export_decision(finding, uid=uid, enforce=True, asff=section.asff, stale=True)
        runtime.ledger.record(stale, event_id=parsed.id)
        metrics.add_metric(name="SecurityHubStaleFindings", unit="Count", value=1)
        logger.info("stale finding: a newer one was exported", extra={"finding": uid})
        return {"status": "stale", "finding": uid}
    logger.info("ocsf detection finding", extra={"ocsf": ocsf})
    written = ["log"]
    if archive is not None:
        key = ocsf_key(section.ocsf_prefix, ocsf, account, region, finding.id or parsed.id)
        written.append(archive.put(key, json.dumps(ocsf).encode()))
    metrics.add_metric(name="OcsfFindingsWritten", unit="Count", value=1)
    if asff is not None and hub is not None:
        hub.import_findings([asff])
        metrics.add_metric(name="SecurityHubFindingsImported", unit="Count", value=1)
        written.append(asff["ProductArn"])
    runtime.ledger.record(
        export_decision(finding, uid=uid, enforce=True, asff=section.asff, written=written), event_id=parsed.id
    )
    return {"status": "exported", "finding": uid, "written": written, "record_state": (asff or {}).get("RecordState")}


def _refuse(finding: Finding, uid: str, why: str, event_id: str, runtime: Runtime) -> NoReturn:
    """Record the refusal in the ledger, then raise it: the edge parks the event in the DLQ with the reason."""
    runtime.ledger.record(
        Decision(
            policy="securityhub",
            verdict="ignored",
            resource=finding.resource,
            rule="securityhub.refused",
            severity="warning",
            reasons=[f"not exported: {why}"],
            evidence={"finding": uid, "source_policy": finding.policy, "finding_id": finding.id},
        ),
        event_id=event_id,
    )
    metrics.add_metric(name="SecurityHubFindingsRefused", unit="Count", value=1)
    raise InvalidEventError(f"finding refused: {why}", event_id)


def process(parsed: FindingEvent, runtime: Runtime, adapters: Adapters, call: Invocation) -> dict[str, Any]:
    """Once per event id (Powertools Idempotency when the stack provides the table)."""
    return export(parsed, runtime, adapters.hub, adapters.archive, call.account or parsed.account)


def adapters_for(event: Any, runtime: Runtime) -> Adapters:
    """The writers the policy asks for: none while report-only."""
    section = SecurityHubPolicy.of(runtime.policy)
    bucket = section.ocsf_bucket
    return Adapters(
        hub=_hub(runtime.region) if section.enforce and section.asff else None,
        archive=_archive(bucket, runtime.region) if section.enforce and bucket else None,
    )


def handle(
    event: Any,
    runtime: Runtime,
    hub: Hub | None = None,
    archive: Archive | None = None,
    now: dt.datetime | None = None,
    context: Any = None,
    account: str | None = None,
) -> dict[str, Any]:
    """Parse at the edge (anything but a governor finding from this account goes to the DLQ), then export."""
    built = adapters_for(event, runtime)
    chosen = Adapters(hub=hub or built.hub, archive=archive or built.archive)
    return HANDLER.handle(event, runtime, chosen, context=context, now=now, account=account)


#: The governor bus rule (source gpu-fleet-governor, detail-type Governor Finding) lands here.
HANDLER: Handler[FindingEvent, Adapters] = Handler(
    __name__, parse=lambda raw, call: parse(raw, call.account), process=process, adapters=adapters_for
)
lambda_handler = HANDLER.lambda_handler()
