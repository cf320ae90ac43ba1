"""Findings onto the project's own EventBridge bus, in batches of ten (the PutEvents limit)."""

from __future__ import annotations

from governor.adapters.aws import client
from governor.domain.decision import Finding

IAM_ACTIONS = frozenset({"events:PutEvents"})
SOURCE = "gpu-fleet-governor"
DETAIL_TYPE = "Governor Finding"


class PublishError(RuntimeError):
    """Some findings were not accepted by EventBridge; raised so the invocation retries rather than drops them."""


class EventBusSink:
    def __init__(self, bus_name: str, region: str | None = None) -> None:
        self._bus = bus_name
        self._events = client("events", region)

    def publish(self, findings: list[Finding]) -> None:
        for start in range(0, len(findings), 10):
            batch = findings[start : start + 10]
            entries = [
                {
                    "Source": SOURCE,
                    "DetailType": DETAIL_TYPE,
                    "Detail": finding.model_dump_json(),
                    "EventBusName": self._bus,
                    "Resources": [],
                }
                for finding in batch
            ]
            response = self._events.put_events(Entries=entries)
            if response.get("FailedEntryCount"):
                codes = {e.get("ErrorCode") for e in response.get("Entries", []) if e.get("ErrorCode")}
                raise PublishError(f"{response['FailedEntryCount']} findings rejected by EventBridge: {sorted(codes)}")
