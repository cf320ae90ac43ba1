"""The idle circuit breaker's state, one ledger item between sweeps (``idle-breaker`` / ``fleet``).

Shared: the idle sweep trips and clears it, the organisation fan-out (``governor.fanout``) reads every target's to
decide the organisation-wide one, and ``governor idle status|rearm`` shows and re-arms it. Pure, so a function that
only reads it does not load the idle policy's domain.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.domain.times import parse_time

BREAKER_KIND = "idle-breaker"
BREAKER_KEY = "fleet"


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


@dataclass(frozen=True)
class Breaker:
    """The circuit breaker's state, kept between sweeps (one ledger item): which instances it holds and why.

    ``anomaly_start`` is when the first held instance turned idle; ``cleared_at`` is when no more than the trip share
    of them was still idle (it then waits one window of fresh data before releasing the rest). ``released`` are
    instances an operator let go; they are not held again while they stay idle.
    """

    tripped_at: dt.datetime | None = None
    anomaly_start: dt.datetime | None = None
    held: frozenset[str] = frozenset()
    cleared_at: dt.datetime | None = None
    released: frozenset[str] = frozenset()

    @property
    def open(self) -> bool:
        return self.tripped_at is not None

    def to_item(self) -> dict[str, Any]:
        return {
            "tripped_at": _iso(self.tripped_at),
            "anomaly_start": _iso(self.anomaly_start),
            "held": sorted(self.held),
            "cleared_at": _iso(self.cleared_at),
            "released": sorted(self.released),
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Breaker:
        if not item:
            return cls()
        tripped = parse_time(item.get("tripped_at"))
        return cls(
            tripped_at=tripped,
            anomaly_start=parse_time(item.get("anomaly_start")) if tripped else None,
            held=frozenset(str(i) for i in item.get("held") or ()) if tripped else frozenset(),
            cleared_at=parse_time(item.get("cleared_at")) if tripped else None,
            released=frozenset(str(i) for i in item.get("released") or ()),
        )

    def rearmed(self) -> Breaker:
        """What an operator's re-arm leaves: closed, with the held instances released."""
        return Breaker(released=self.released | self.held)
