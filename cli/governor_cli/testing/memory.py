"""In-memory implementations of the runtime's ports (ledger, findings sink, dead letters, clock) for the tests and the
benchmarks; not in the Lambda code asset."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.domain.decision import Decision, Finding


@dataclass
class MemoryLedger:
    """A ledger kept in a list; ``decisions`` keeps (event_id, decision) in recording order."""

    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None) -> str:
        self.decisions.append((event_id, decision))
        return str(uuid.uuid4())

    def record_many(self, decisions: Sequence[Decision], *, event_id: str, at: dt.datetime | None = None) -> list[str]:
        return [self.record(decision, event_id=event_id, at=at) for decision in decisions]

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        self.items[(kind, key)] = dict(item)

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self.items.get((kind, key))
        return dict(found) if found is not None else None

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        return [dict(v) for (k, _), v in self.items.items() if k == kind]

    def claim(self, kind: str, key: str, item: dict[str, Any]) -> bool:
        if (kind, key) in self.items:
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


@dataclass
class FixedClock:
    at: dt.datetime

    def now(self) -> dt.datetime:
        return self.at

    def advance(self, delta: dt.timedelta) -> None:
        self.at = self.at + delta
