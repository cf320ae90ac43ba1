"""The real RunInstances records of the CloudTrail dataset, and EventBridge wrappers, for the lifecycle tests."""

from __future__ import annotations

import copy
import json
from typing import Any

from governor_cli.testing import events
from tests.conftest import CLOUDTRAIL_DIR


def _run_instances() -> list[dict[str, Any]]:
    found = []
    for path in sorted(CLOUDTRAIL_DIR.glob("*.json")):
        text = path.read_text()
        if '"RunInstances"' in text:
            found.extend(r for r in json.loads(text)["Records"] if r["eventName"] == "RunInstances")
    return found


RECORDS = _run_instances()


def one(error: str | None, user_type: str) -> dict[str, Any]:
    """The first real RunInstances record with this outcome (errorCode or None) and caller type; a copy."""
    found = next(r for r in RECORDS if r.get("errorCode") == error and r["userIdentity"]["type"] == user_type)
    return copy.deepcopy(found)


def as_gpu_launch(record: dict[str, Any], instance_type: str = "g5.xlarge") -> dict[str, Any]:
    """The real successful launch, with a GPU type (the dataset's successful launches are t3.micro)."""
    gpu = copy.deepcopy(record)
    gpu["requestParameters"]["instanceType"] = instance_type
    for item in gpu["responseElements"]["instancesSet"]["items"]:
        item["instanceType"] = instance_type
    return gpu


def envelope(record: dict[str, Any], event_id: str = "evt-1") -> dict[str, Any]:
    """The record as EventBridge delivers it ("AWS API Call via CloudTrail")."""
    return events.cloudtrail(record, event_id=event_id)
