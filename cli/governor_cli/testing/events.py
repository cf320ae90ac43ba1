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
from typing import Any

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


def envelope(
    detail_type: str,
    source: str,
    detail: Any,
    *,
    event_id: str | None = None,
    time: dt.datetime | str | None = None,
    account: str = ACCOUNT,
    region: str = REGION,
    resources: Iterable[str] = (),
) -> dict[str, Any]:
    """One EventBridge event; a fresh UUID for ``id`` and the current time unless given."""
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": timestamp(time),
        "region": region,
        "resources": list(resources),
        "detail": detail,
    }


def cloudtrail(
    record: Mapping[str, Any],
    *,
    event_id: str | None = None,
    account: str | None = None,
    region: str | None = None,
) -> dict[str, Any]:
    """A CloudTrail record as EventBridge delivers it: source ``aws.<service>`` from ``eventSource``, time and
    region from the record (``awsRegion``, else ``region``), account from ``recipientAccountId`` unless given."""
    service = str(record.get("eventSource", "ec2.amazonaws.com")).split(".", 1)[0]
    return envelope(
        CLOUDTRAIL,
        f"aws.{service}",
        dict(record),
        event_id=event_id,
        time=record.get("eventTime"),
        account=account or str(record.get("recipientAccountId") or ACCOUNT),
        region=region or str(record.get("awsRegion") or REGION),
    )


def scheduled(
    detail: Any = None,
    *,
    event_id: str | None = None,
    time: dt.datetime | str | None = None,
    account: str = ACCOUNT,
    region: str = REGION,
    resources: Iterable[str] = (),
) -> dict[str, Any]:
    """What a schedule delivers to a sweeping function (``aws.scheduler``, "Scheduled Event")."""
    return envelope(
        SCHEDULED,
        "aws.scheduler",
        {} if detail is None else detail,
        event_id=event_id,
        time=time,
        account=account,
        region=region,
        resources=resources,
    )


def finding(
    body: Mapping[str, Any],
    *,
    event_id: str | None = None,
    time: dt.datetime | str | None = None,
    account: str = ACCOUNT,
    region: str = REGION,
) -> dict[str, Any]:
    """A governor finding on the project's bus, as the notifier receives it."""
    return envelope(FINDING, FINDING_SOURCE, dict(body), event_id=event_id, time=time, account=account, region=region)
