"""What the governor itself cost in the report's period, beside what it found: "the governor cost $X this period; it
found $Y".

The figure is ``governor cost``'s model (``governor.footprint``) for the fleet the period's ledger shows: the
instances the idle sweep judged, in the accounts and regions its decisions came from, swept as many times as it
recorded, with the warnings it raised as the period's idle episodes. It prices the governor's own resources (its
functions, tables, bus, queries and trail), not the CloudWatch agent's metrics on the instances, which
``governor cost`` adds; settings the report's function does not read (the audit lake's, Security Hub's) count at
their defaults.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from governor.domain.times import parse_time
from governor.registry import REGISTRY


def governor_cost(
    items: Iterable[Mapping[str, Any]], policy: Any, start: dt.datetime, end: dt.datetime
) -> tuple[float, str] | None:
    """The governor's cost for [start, end) and the words saying what it covers; None when no sweep was recorded."""
    from governor.footprint.estimate import estimate
    from governor.footprint.usage import MONTH_HOURS, Fleet

    idle_time = REGISTRY.idle_time()
    sweeper = next(c for c in REGISTRY.values() if c.idle_time)
    instances: set[str] = set()
    sweeps: set[str] = set()
    places: set[tuple[str, str]] = set()
    warned = 0
    for item in items:
        at = parse_time(item.get("at"))
        if at is None or not (start <= at < end) or not idle_time.decided(item):
            continue
        instances.add(str(item.get("resource")))
        sweeps.add(str(item.get("event_id")))
        places.add((str(item.get("account") or "-"), str(item.get("region") or "-")))
        warned += item.get("rule") in sweeper.episode_starts
    if not instances:
        return None
    hours = (end - start).total_seconds() / 3600
    per_month = MONTH_HOURS / hours if hours else 0.0
    fleet = Fleet(
        instances=len(instances),
        accounts=len({account for account, _ in places}),
        regions=len({region for _, region in places}),
        idle_episodes=warned / len(instances) * per_month,
    )
    observed = {f"{sweeper.name}.{t.id}": float(len(sweeps)) for t in sweeper.triggers if t.kind == "schedule"}
    found = estimate(policy, fleet, hours=hours, observed=observed)
    basis = (
        f"its own AWS usage for {len(instances):,} GPU instances swept {len(sweeps):,} times, priced as "
        f"governor cost prices it (us-east-1 list prices); the CloudWatch agent's metrics are extra"
    )
    return round(found.total, 2), basis
