"""The bill's lines for what the governor keeps and moves: DynamoDB, the findings bus and its archive, queues,
KMS, Athena, S3, the CloudTrail trail, Secrets Manager and Security Hub. Each line's units come from the measured
model (``usage``) or a documented rule it names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from governor.footprint.compute import (
    KEY_CACHE_CALLS_PER_HOUR,
    TABLES,
    TRAIL_OBJECTS_PER_DAY,
    Line,
    line,
    measured,
    total,
)
from governor.footprint.prices import ATHENA_MINIMUM_BYTES, GB, SCHEDULER_FREE, SECURITY_HUB_FREE
from governor.footprint.usage import DAYS_PER_MONTH, MONTH_HOURS, Fleet, Work


def dynamodb_lines(
    work: Mapping[str, Work], model: Mapping[str, Any], policy: Any, fleet: Fleet, share: float
) -> list[Line]:
    months_kept = policy.ledger.retention_days / DAYS_PER_MONTH
    table = (total(work, "ledger_new_bytes") / share) * months_kept if share else 0.0
    index = (total(work, "ledger_index_new_bytes") / share) * months_kept if share else 0.0
    idempotency = total(work, "idempotency_new_bytes") / share / DAYS_PER_MONTH if share else 0.0  # one day kept
    reads = total(work, "dynamodb_rru") - total(work, "dynamodb_query_rru.by-kind") + _report_reads(work, model, share)
    return [
        line(
            "dynamodb_writes",
            "DynamoDB writes (ledger, its by-kind index, idempotency)",
            total(work, "dynamodb_wru"),
            "WRU",
            "dynamodb_wru",
            measured(model, "item sizes written per run"),
        ),
        line(
            "dynamodb_reads",
            "DynamoDB reads",
            reads,
            "RRU",
            "dynamodb_rru",
            measured(model, "item sizes read per run") + "; the report's period reads derived from them",
        ),
        line(
            "dynamodb_storage",
            f"DynamoDB storage at steady state ({policy.ledger.retention_days}-day retention)",
            (table + index + idempotency) / GB * share,
            "GB-months",
            "dynamodb_storage",
            "derived: a month's new items (measured sizes + 100 B each) times the months kept",
        ),
        line(
            "dynamodb_pitr",
            "DynamoDB point-in-time recovery",
            (table + idempotency) / GB * share,
            "GB-months",
            "dynamodb_pitr",
            "derived: the table's size at steady state (indexes not billed)",
        ),
    ]


def _report_reads(work: Mapping[str, Work], model: Mapping[str, Any], share: float) -> float:
    """The report's ledger reads over its window (eventually consistent queries on the by-kind index): every item of
    the kinds it reads, written in the window, at its measured size."""
    reads = 0.0
    windows: Mapping[str, Mapping[str, float]] = model.get("report_windows", {})
    for month in work.values():
        for key, runs in month.runs.items():
            for kind, days in windows.get(key, {}).items():
                per_day = total(work, f"ledger_bytes.{kind}") / (DAYS_PER_MONTH * share) if share else 0.0
                reads += runs * math.ceil(per_day * days / 4096) * 0.5
    return reads


def event_lines(
    work: Mapping[str, Work], model: Mapping[str, Any], policy: Any, fleet: Fleet, share: float
) -> list[Line]:
    events = total(work, "events_put")
    archived = total(work, "events_bytes") / GB
    scheduled = total(work, "scheduled_runs")
    kept = policy.ledger.retention_days / DAYS_PER_MONTH
    lines = [
        line(
            "events",
            "EventBridge: findings published to the governor bus",
            events,
            "events",
            "events",
            measured(model, "findings per run"),
        ),
        line(
            "events_archived",
            "EventBridge archive: findings archived",
            archived,
            "GB",
            "events_archived",
            measured(model, "finding sizes"),
        ),
        line(
            "events_archive_stored",
            "EventBridge archive stored (kept as long as the ledger)",
            archived * kept,
            "GB-months",
            "events_archive_stored",
            "derived: a month's findings times the months kept",
        ),
        line(
            "sqs",
            "SQS (dead-letter queues, organisation fan-out)",
            total(work, "sqs_requests"),
            "requests",
            "sqs",
            measured(model, "queue requests per run"),
        ),
        line(
            "scheduler",
            "EventBridge Scheduler invocations beyond the free 14 million",
            max(0.0, scheduled - SCHEDULER_FREE * share),
            "invocations",
            "scheduler",
            f"derived: {scheduled:,.0f} scheduled runs",
        ),
    ]
    keys = float(model.get("resources", {}).get("kms_keys", 1)) * max(1, fleet.regions) * share
    lines.append(
        line("kms_keys", "KMS: the project key", keys, "key-months", "kms_keys", "measured: keys in the stack")
    )
    lines.append(
        line(
            "kms_requests",
            "KMS requests",
            _kms_requests(work, model, fleet, share),
            "requests",
            "kms_requests",
            "derived: table keys cached 5 min per function, one decrypt per cold start, "
            "one per trail object Athena reads, plus the keys sweep's own calls (measured)",
        )
    )
    return lines


def _kms_requests(work: Mapping[str, Work], model: Mapping[str, Any], fleet: Fleet, share: float) -> float:
    hours = MONTH_HOURS * share
    requests = total(work, "kms_requests")
    for month in work.values():
        runs = month.invocations
        requests += min(runs, KEY_CACHE_CALLS_PER_HOUR * hours) * TABLES + runs
    requests += _athena(work, model, fleet, share)[1]
    return requests


def _trail_events(work: Mapping[str, Work], fleet: Fleet, share: float) -> float:
    """Management events the trail records in the period: the governor's own calls and the accounts' others."""
    return total(work, "management_events") + fleet.account_events * fleet.targets * share


def _athena(work: Mapping[str, Work], model: Mapping[str, Any], fleet: Fleet, share: float) -> tuple[float, float]:
    """Bytes the report's queries scan in the period (10 MB at least each), and the trail objects they read."""
    athena = model.get("athena", {})
    per_day = _trail_events(work, fleet, share) / (DAYS_PER_MONTH * share) if share else 0.0
    gzip_bytes = float(model.get("cloudtrail_gzip_bytes_per_event", 150.0))
    scanned = objects = 0.0
    for key, days in athena.get("scan_days", {}).items():
        runs = sum(month.runs.get(key, 0.0) for month in work.values()) / max(1, fleet.regions)  # the audit region only
        queries = runs * float(athena.get("queries", 0)) * 2  # this period and the one before
        scanned += queries * max(ATHENA_MINIMUM_BYTES, days * per_day * gzip_bytes)
        objects += queries * days * TRAIL_OBJECTS_PER_DAY * fleet.targets
    return scanned, objects


def audit_lines(
    work: Mapping[str, Work], model: Mapping[str, Any], policy: Any, fleet: Fleet, share: float
) -> list[Line]:
    scanned, _ = _athena(work, model, fleet, share)
    events = _trail_events(work, fleet, share)
    gzip_bytes = float(model.get("cloudtrail_gzip_bytes_per_event", 150.0))
    kept = (policy.audit.expire_after_days or 365) / DAYS_PER_MONTH
    copies = events if policy.audit.create_trail and not fleet.first_trail else 0.0
    return [
        line(
            "athena",
            "Athena: the reports' audit queries",
            scanned / (1024**4),
            "TB",
            "athena",
            f"derived: {model.get('athena', {}).get('queries', 0)} queries x 2 periods a report over the trail's days "
            "(gzip size per event measured on real CloudTrail files)",
        ),
        line(
            "cloudtrail",
            "CloudTrail: the governor trail's management events (a second copy)",
            copies,
            "events",
            "cloudtrail_copy",
            "measured: the governor's own management-event calls + --account-events",
        ),
        line(
            "s3_trail",
            "S3: trail objects kept (a year when never expired)",
            events * gzip_bytes / GB * kept,
            "GB-months",
            "s3_storage",
            "derived: events x gzip bytes per event x months kept",
        ),
        line(
            "s3_reports_put",
            "S3: report archive writes",
            total(work, "s3_put"),
            "PUT",
            "s3_put",
            measured(model, "objects per report"),
        ),
        line(
            "s3_reports_get",
            "S3: report archive reads",
            total(work, "s3_get"),
            "GET",
            "s3_get",
            measured(model, "reads per report"),
        ),
        line(
            "s3_reports",
            "S3: report archives kept (a year)",
            total(work, "s3_new_bytes") / GB * 12,
            "GB-months",
            "s3_storage",
            measured(model, "bytes archived per report"),
        ),
    ]


def security_lines(work: Mapping[str, Work], policy: Any, fleet: Fleet, share: float) -> list[Line]:
    from governor.registry import REGISTRY

    secrets = {
        name
        for capability in REGISTRY.values()
        if any(t.when is None or t.when(policy) for t in capability.triggers)
        for name in capability.secret_names(policy)
    }
    # A section exporting findings to Security Hub says so with ``asff`` (and imports only when it enforces).
    exports = any(
        getattr(getattr(policy, c.section, None), "asff", False) and c.enforces(policy) for c in REGISTRY.values()
    )
    imported = total(work, "events_put") if exports else 0.0
    billed = max(0.0, imported - SECURITY_HUB_FREE * fleet.targets * share)
    return [
        line(
            "secrets",
            "Secrets Manager: the Slack secrets the policy names",
            len(secrets) * max(1, fleet.regions) * share,
            "secret-months",
            "secrets",
            "derived: the registry's secret names under the policy, per region",
        ),
        line(
            "secrets_requests",
            "Secrets Manager requests",
            total(work, "secrets_requests"),
            "requests",
            "secrets_requests",
            "measured: GetSecretValue per run (cached in a warm container)",
        ),
        line(
            "security_hub_findings",
            "Security Hub: findings imported (asff)",
            billed,
            "findings",
            "securityhub_findings",
            "derived: every finding, beyond the free 10,000 an account and region",
        ),
    ]
