"""In-memory implementations of the runtime's ports (ledger, findings sink, dead letters, clock) for the tests and the
benchmarks; not in the Lambda code asset."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.domain.decision import Decision, Finding
from governor.domain.ports import note_parked


@dataclass
class MemoryLedger:
    """A ledger kept in a list; ``decisions`` keeps (event_id, decision) in recording order.

    It honours the same conditions as ``adapters.ledger.DynamoLedger``: a "no action" entry does not replace an "act"
    entry of the same resource, policy and event (unless ``held`` and that entry records no outcome), and ``claim``
    writes only when no item (or, ``replacing``, the expected one) is there. A write DynamoDB would refuse is not
    appended to ``decisions``, so a test sees what the real ledger would hold."""

    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    entries: dict[tuple[str, str, str], Decision] = field(default_factory=dict)

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None, held: bool = False) -> str:
        key = (decision.resource, decision.policy, event_id)
        existing = self.entries.get(key)
        if (
            decision.verdict != "act"
            and existing is not None
            and existing.verdict == "act"
            and not (held and "done" not in existing.evidence)
        ):
            return str(uuid.uuid4())  # ConditionalCheckFailed: the "act" entry stays
        self.entries[key] = decision
        self.decisions.append((event_id, decision))
        return str(uuid.uuid4())

    def entry(self, resource: str, policy: str, event_id: str) -> Decision | None:
        """What the ledger holds for this key now (DynamoDB's item; ``decisions`` is the history of writes)."""
        return self.entries.get((resource, policy, event_id))

    def record_many(self, decisions: Sequence[Decision], *, event_id: str, at: dt.datetime | None = None) -> list[str]:
        return [self.record(decision, event_id=event_id, at=at) for decision in decisions]

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        self.items[(kind, key)] = dict(item)

    def put_many(self, items: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        for kind, key, item in items:
            self.put_item(kind, key, item)

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self.items.get((kind, key))
        return dict(found) if found is not None else None

    def get_many(self, kind: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        found = {key: self.get_item(kind, key) for key in keys}
        return {key: item for key, item in found.items() if item is not None}

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        return [dict(v) for (k, _), v in self.items.items() if k == kind]

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool:
        if replacing is not None:
            current = self.items.get((kind, key))
            if current is None or current.get(replacing[0]) != replacing[1]:  # None: the field is absent
                return False
        elif (kind, key) in self.items:
            return False
        self.items[(kind, key)] = dict(item)
        return True


@dataclass
class MemorySink:
    findings: list[Finding] = field(default_factory=list)

    def publish(self, findings: list[Finding]) -> None:
        self.findings.extend(findings)


@dataclass
class MemoryDeadLetters:
    messages: list[tuple[Any, str]] = field(default_factory=list)

    def send(self, event: Any, reason: str) -> None:
        self.messages.append((event, reason))
        note_parked(reason)


@dataclass
class FixedClock:
    at: dt.datetime

    def now(self) -> dt.datetime:
        return self.at

    def advance(self, delta: dt.timedelta) -> None:
        self.at = self.at + delta
