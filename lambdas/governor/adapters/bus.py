"""Findings onto the project's own EventBridge bus, in batches of ten (the PutEvents limit).

PutEvents answers 200 even when some entries were refused (``FailedEntryCount`` and an ``ErrorCode`` per entry);
those findings are not accepted, and :class:`PublishError` says which ones were, so the outbox marks only those sent.
PutEvents takes no client token: a resent call publishes twice, which the finding's deterministic ``id`` makes
recognisable downstream (the notifier delivers one id once).
"""

from __future__ import annotations

from governor.adapters.aws import client
from governor.domain.decision import Finding
from governor.domain.ports import PublishError
from governor.events.findings import DETAIL_TYPE, SOURCE

IAM_ACTIONS = frozenset({"events:PutEvents"})

__all__ = ["DETAIL_TYPE", "IAM_ACTIONS", "SOURCE", "EventBusSink", "PublishError"]


class EventBusSink:
    def __init__(self, bus_name: str, region: str | None = None) -> None:
        self._bus = bus_name
        self._events = client("events", region)

    def publish(self, findings: list[Finding]) -> None:
        accepted: list[str] = []
        refused: list[str] = []
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
            try:
                response = self._events.put_events(Entries=entries)
            except Exception as error:
                raise PublishError(f"PutEvents failed: {error}", accepted) from error
            answers = response.get("Entries") or []
            for index, finding in enumerate(batch):
                answer = answers[index] if index < len(answers) else {}
                if response.get("FailedEntryCount") and (answer.get("ErrorCode") or not answer.get("EventId")):
                    refused.append(str(answer.get("ErrorCode") or "no EventId"))
                else:
                    accepted.append(finding.id or "")
        if refused:
            raise PublishError(f"{len(refused)} findings rejected by EventBridge: {sorted(set(refused))}", accepted)
