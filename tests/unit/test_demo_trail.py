"""The demo's CloudTrail writer lays records out as CloudTrail delivers them, and wraps them as EventBridge does."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

from governor.events.envelopes import normalise
from governor_cli.demo.trail import Principal, Trail


def test_records_land_in_awslogs_layout_by_delivery_time(tmp_path: Path) -> None:
    trail = Trail()
    late = dt.datetime(2026, 12, 1, 23, 58, tzinfo=dt.UTC)
    trail.call(late, Principal("ana"), "ec2.amazonaws.com", "RunInstances", {"instanceType": "g5.xlarge"})
    trail.call(
        late - dt.timedelta(hours=1), Principal("ci", "AssumedRole", "deployer"), "kms.amazonaws.com", "CreateKey"
    )
    files = trail.write(tmp_path)
    days = sorted(str(p.relative_to(tmp_path).parent) for p in files)
    # delivered at 00:00 the next day: the key's date is the delivery date, not the event date
    assert days == [
        "AWSLogs/123456789012/CloudTrail/us-east-1/2026/12/01",
        "AWSLogs/123456789012/CloudTrail/us-east-1/2026/12/02",
    ]
    names = {r["eventName"] for p in files for r in json.loads(gzip.decompress(p.read_bytes()))["Records"]}
    assert names == {"RunInstances", "CreateKey"}


def test_envelope_is_accepted_as_a_cloudtrail_event() -> None:
    trail = Trail()
    record = trail.call(dt.datetime(2026, 12, 1, tzinfo=dt.UTC), Principal("ana"), "ec2.amazonaws.com", "StopInstances")
    event = normalise(trail.envelope(record))
    assert event.kind == "StopInstances" and event.source == "aws.ec2" and event.cloudtrail is not None
    assert event.cloudtrail.user_identity.arn == "arn:aws:iam::123456789012:user/ana"
