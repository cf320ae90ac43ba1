"""The idle circuit breaker's state, one ledger item between sweeps (``idle-breaker`` / ``fleet``).

Shared: the idle sweep trips and clears it, the organisation fan-out (``governor.fanout``) reads every target's to
decide the organisation-wide one, and ``governor idle status|rearm`` shows and re-arms it. Pure, so a function that
only reads it does not load the idle policy's domain.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.domain.times import parse_time

BREAKER_KIND = "idle-breaker"
BREAKER_KEY = "fleet"
#: The idle sweep's last run (one item per target, key ``fleet`` like the breaker's): when, which event, what it
#: found. ``governor status`` reads it to date the fleet view and to tell an organisation target that was never swept.
LAST_SWEEP_KIND = "idle-sweep"


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _floors(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    found: dict[str, float] = {}
    for key, raw in value.items():
        try:
            found[str(key)] = float(raw)
        except (TypeError, ValueError):
            continue
    return found


@dataclass(frozen=True)
class Breaker:
    """The circuit breaker's state, kept between sweeps (one ledger item): which instances it holds and why.

    ``anomaly_start`` is when the first held instance turned idle; ``hold_until`` when the hold ends unless the
    instances still show a measurement failure's sign (it is then renewed for those, and only those); ``signature``
    says what tripped it and ``evidence`` what was seen, for the ledger and ``governor idle status``. ``released``
    are instances let go (by an operator, or when their hold ended without a sign); they are not held again while
    they stay idle.
    """

    tripped_at: dt.datetime | None = None
    anomaly_start: dt.datetime | None = None
    held: frozenset[str] = frozenset()
    hold_until: dt.datetime | None = None
    released: frozenset[str] = frozenset()
    signature: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # The lowest power each held instance drew before it turned quiet: "still drawing working power" is re-checked
    # against it after its onset has left the sweep's lookback.
    power_floor: Mapping[str, float] = field(default_factory=dict, compare=False)

    @property
    def open(self) -> bool:
        return self.tripped_at is not None

    def to_item(self) -> dict[str, Any]:
        return {
            "tripped_at": _iso(self.tripped_at),
            "anomaly_start": _iso(self.anomaly_start),
            "held": sorted(self.held),
            "hold_until": _iso(self.hold_until),
            "released": sorted(self.released),
            "signature": self.signature,
            "evidence": dict(self.evidence),
            "power_floor": {k: str(v) for k, v in self.power_floor.items()},
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Breaker:
        if not item:
            return cls()
        tripped = parse_time(item.get("tripped_at"))
        evidence = item.get("evidence")
        return cls(
            tripped_at=tripped,
            anomaly_start=parse_time(item.get("anomaly_start")) if tripped else None,
            held=frozenset(str(i) for i in item.get("held") or ()) if tripped else frozenset(),
            hold_until=parse_time(item.get("hold_until")) if tripped else None,
            released=frozenset(str(i) for i in item.get("released") or ()),
            signature=str(item.get("signature") or "") if tripped else "",
            evidence=dict(evidence) if tripped and isinstance(evidence, Mapping) else {},
            power_floor=_floors(item.get("power_floor")) if tripped else {},
        )

    def rearmed(self) -> Breaker:
        """What an operator's re-arm leaves: closed, with the held instances released."""
        return Breaker(released=self.released | self.held)


#: The item's write counter: every write names the version it read, so a sweep's write never undoes an operator's
#: re-arm (or another sweep's trip) made in between; the loser reads again and decides on what is there now.
VERSION = "version"


def read_breaker(ledger: Any, key: str = BREAKER_KEY) -> tuple[Breaker, int | None]:
    """The breaker and the version it was read at (None: no item yet; 0: an item from before versions)."""
    item = ledger.get_item(BREAKER_KIND, key)
    if not item:
        return Breaker(), None
    try:
        version = int(item.get(VERSION) or 0)
    except (TypeError, ValueError):
        version = 0
    return Breaker.from_item(item), version


def write_breaker(ledger: Any, breaker: Breaker, version: int | None, key: str = BREAKER_KEY) -> bool:
    """Write ``breaker`` only if the item is still at ``version`` (a conditional write); False when someone else
    wrote it since, and nothing was written."""
    item = {**breaker.to_item(), VERSION: (version or 0) + 1}
    if version is None:
        return ledger.claim(BREAKER_KIND, key, item)
    return ledger.claim(BREAKER_KIND, key, item, replacing=(VERSION, version or None))
