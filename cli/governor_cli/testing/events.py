"""EventBridge events as AWS delivers them to a Lambda, for tests, the soak and the benchmarks: one builder each.

Every event the governor accepts arrives in the same envelope (``version``, ``id``, ``detail-type``, ``source``,
``account``, ``time``, ``region``, ``resources``, ``detail``; see "Amazon EventBridge events" in the EventBridge
User Guide). :func:`envelope` builds it; :func:`cloudtrail` wraps a CloudTrail record the way EventBridge does
("AWS API Call via CloudTrail": the source is the record's service, the time its ``eventTime``, the region its
``awsRegion``); :func:`scheduled` is what an EventBridge Scheduler schedule delivers to the sweeping functions; and
:func:`finding` is a governor finding on the project's bus (what the notifier receives).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, Unpack

ACCOUNT = "123456789012"
REGION = "us-east-1"
CLOUDTRAIL = "AWS API Call via CloudTrail"
SCHEDULED = "Scheduled Event"
FINDING = "Governor Finding"
FINDING_SOURCE = "gpu-fleet-governor"


def timestamp(at: dt.datetime | str | None = None) -> str:
    """EventBridge's time format (UTC, whole seconds, ``Z``); now when ``at`` is None; a string is kept as it is."""
    if isinstance(at, str):
        return at
    moment = (at or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Where(TypedDict, total=False):
    """Where and when an event happened, and its id: each defaults as :func:`envelope` says."""

    event_id: str | None
    time: dt.datetime | str | None
    account: str
    region: str
    resources: Iterable[str]


def envelope(detail_type: str, source: str, detail: Any, **where: Unpack[Where]) -> dict[str, Any]:
    """One EventBridge event; a fresh UUID for ``id``, the current time, :data:`ACCOUNT` and :data:`REGION`, and no
    resources unless ``where`` says otherwise."""
    return {
        "version": "0",
        "id": where.get("event_id") or str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": where.get("account", ACCOUNT),
        "time": timestamp(where.get("time")),
        "region": where.get("region", REGION),
        "resources": list(where.get("resources", ())),
        "detail": detail,
    }


def cloudtrail(record: Mapping[str, Any], **where: Unpack[Where]) -> dict[str, Any]:
    """A CloudTrail record as EventBridge delivers it: source ``aws.<service>`` from ``eventSource``, time and
    region from the record (``awsRegion``), account from ``recipientAccountId``, unless ``where`` says otherwise."""
    service = str(record.get("eventSource", "ec2.amazonaws.com")).split(".", 1)[0]
    placed: Where = {
        "time": record.get("eventTime"),
        "account": str(record.get("recipientAccountId") or ACCOUNT),
        "region": str(record.get("awsRegion") or REGION),
    }
    placed.update(where)
    return envelope(CLOUDTRAIL, f"aws.{service}", dict(record), **placed)


def scheduled(detail: Any = None, **where: Unpack[Where]) -> dict[str, Any]:
    """What a schedule delivers to a sweeping function (``aws.scheduler``, "Scheduled Event")."""
    return envelope(SCHEDULED, "aws.scheduler", {} if detail is None else detail, **where)


def finding(body: Mapping[str, Any], **where: Unpack[Where]) -> dict[str, Any]:
    """A governor finding on the project's bus, as the notifier receives it."""
    return envelope(FINDING, FINDING_SOURCE, dict(body), **where)
