"""Paid-for capacity nobody uses, told once: reservations with free capacity (a decision every sweep, a finding a
day), and, with ``reserved_capacity: offer``, that capacity or an idle instance's reservation offered to another
team (claimed in the ledger, one offer a day). Report-only; the decisions are :mod:`governor.idle.capacity`'s.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.capacity import Reservation, purchase_model, unused_capacity
from governor.domain.costs import PriceBook
from governor.domain.decision import Finding
from governor.domain.fleet import Instance
from governor.events.envelopes import GovernorEvent
from governor.idle.capacity import OFFERED_STATUS, capacity_offer, unused_reservation_decision
from governor.idle.domain import sweep_interval
from governor.idle.money import paying_twice
from governor.idle.tell import finding_for
from governor.observability import metrics
from governor.outbox import finding_id
from governor.runtime import Runtime


def unused_reservations(
    event: GovernorEvent,
    runtime: Runtime,
    active: list[Reservation] | None,
    now: dt.datetime,
    instances: list[Instance] | None = None,
) -> list[Finding]:
    """Active GPU reservations with capacity nobody runs in: a decision every sweep (the report sums its hours), a
    finding once a day per reservation (its id carries the date, so the notifier sends it once); paying twice when
    On-Demand ``instances`` of its match run beside it (:func:`governor.idle.money.paying_twice`). Report-only."""
    policy = runtime.policy
    if active is None:
        return []
    book = PriceBook(policy.pricing)
    interval = sweep_interval(policy.idle)
    found = []
    for reservation in unused_capacity(active, policy.fleet.is_gpu_type):
        per_hour, source = (None, "prepaid") if reservation.capacity_block else book.paid(reservation.instance_type)
        decision, title = unused_reservation_decision(reservation, policy, per_hour, source)
        decision.evidence |= {"interval_minutes": interval.total_seconds() / 60, "judged_at": now.isoformat()}
        decision, title = paying_twice(decision, title, reservation, instances or [], runtime)
        runtime.ledger.record(decision, event_id=event.id)
        told = decision.evidence.get("notify") or decision.evidence
        finding = finding_for(decision, title, None, event, runtime).model_copy(
            update={
                "id": finding_id(f"unused-capacity#{now.date().isoformat()}", reservation.id, decision.rule or ""),
                "owner": told["owner"],
                "team": told["team"],
            }
        )
        found.append(finding)
    metrics.add_metric(name="UnusedReservations", unit="Count", value=len(found))
    return found + _offer_unused(event, runtime, active, now)


def _offer_unused(event: GovernorEvent, runtime: Runtime, active: list[Any], now: dt.datetime) -> list[Finding]:
    """``reserved_capacity: offer``: unused capacity of GPU reservations offered to the configured team."""
    idle_policy = runtime.policy.idle
    if idle_policy.reserved_capacity != "offer" or not idle_policy.offer_capacity_to:
        return []
    found = []
    for reservation in unused_capacity(active, runtime.policy.fleet.is_gpu_type):
        kind = "Capacity Block" if reservation.capacity_block else "On-Demand Capacity Reservation"
        offered = _offer(
            event,
            runtime,
            now,
            reservation_id=reservation.id,
            kind=kind,
            instance_type=reservation.instance_type,
            free=f"{reservation.available} of {reservation.total} x",
            ends_at=reservation.end_date,
            zone=reservation.zone,
            why="no instance runs in that capacity, paid for whether used or not",
        )
        found += offered
    return found


def offer_idle(event: GovernorEvent, runtime: Runtime, outcomes: list[Any], now: dt.datetime) -> list[Finding]:
    """``reserved_capacity: offer``: the reservation or block of each idle instance held as paid for, unused, offered
    to the configured team (the instance's owner keeps it: the offer says the capacity sits unused)."""
    idle_policy = runtime.policy.idle
    if idle_policy.reserved_capacity != "offer" or not idle_policy.offer_capacity_to:
        return []
    found = []
    for outcome in outcomes:
        if outcome.outcome not in ("warned", "reported"):
            continue
        purchase = purchase_model(outcome.instance)
        if not purchase.paid_for or not purchase.reservation_id:
            continue
        kind = "Capacity Block" if purchase.kind == "capacity-block" else "On-Demand Capacity Reservation"
        found += _offer(
            event,
            runtime,
            now,
            reservation_id=purchase.reservation_id,
            kind=kind,
            instance_type=outcome.instance.type,
            free=f"idle instance {outcome.instance.id}:",
            ends_at=purchase.ends_at,
            zone=None,
            why=f"its GPUs have been idle for the window ({outcome.outcome}); the capacity is paid for, unused",
        )
    return found


def _offer(event: GovernorEvent, runtime: Runtime, now: dt.datetime, **offer: Any) -> list[Finding]:
    """One offer a UTC day per reservation (claimed in the ledger, so sweeps and retries do not repeat it)."""
    team = runtime.policy.idle.offer_capacity_to or ""
    key = f"{offer['reservation_id']}#{now.date().isoformat()}"
    if not runtime.ledger.claim(OFFERED_STATUS, key, {"team": team, "at": now.isoformat()}):
        return []
    decision, title = capacity_offer(team=team, now=now, **offer)
    # Its own entry: the same sweep records this reservation's unused capacity under the sweep's event id, and a
    # decision's key is its resource, policy and event (one would overwrite the other).
    runtime.ledger.record(decision, event_id=f"{event.id}#{OFFERED_STATUS}")
    finding = finding_for(decision, title, None, event, runtime).model_copy(
        update={
            "id": finding_id(f"{OFFERED_STATUS}#{key}", offer["reservation_id"], decision.rule or ""),
            "team": team,
        }
    )
    metrics.add_metric(name="CapacityOffered", unit="Count", value=1)
    return [finding]
