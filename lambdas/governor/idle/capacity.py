"""Paid-for capacity nobody uses: a reservation with free capacity reported to its owner, and idle reserved capacity
offered to another team. Report-only decisions (nothing is cancelled, stopped or released).
"""

from __future__ import annotations

import datetime as dt

from governor.domain.actions import Notify
from governor.domain.capacity import UNUSED_STATUS, Reservation, reservation_evidence
from governor.domain.decision import Decision
from governor.domain.facts import per_day_text
from governor.domain.fleet import ownership
from governor.idle.domain import POLICY
from governor.policy import Policy


def unused_reservation_decision(
    reservation: Reservation, policy: Policy, per_hour: float | None, price_source: str
) -> tuple[Decision, str]:
    """A reservation with capacity no instance runs in: report-only, a finding for its owner (the reservation's own
    owner/team tags), never cancelled (a Capacity Block cannot be; an On-Demand Capacity Reservation someone chose)."""
    evidence = reservation_evidence(reservation, per_hour, price_source)
    who = ownership(reservation.tags, policy.fleet)
    evidence |= {"owner": who.owner, "team": who.team}
    kind = "Capacity Block" if reservation.capacity_block else "On-Demand Capacity Reservation"
    per_day = evidence["usd_per_day"]
    cost = (
        f"{per_day_text(per_day)} at {price_source}"
        if per_day is not None
        else (
            "prepaid (the block's fee is not in DescribeCapacityReservations)"
            if reservation.capacity_block
            else "unpriced"
        )
    )
    ends = f", ends {reservation.end_date:%Y-%m-%d %H:%M} UTC" if reservation.end_date else ""
    reasons = [
        f"{kind} {reservation.id} ({reservation.instance_type}, {reservation.match}{ends}): "
        f"{reservation.available} of {reservation.total} instances unused, paid for whether used or not ({cost})",
        "reported only: launch work into it, offer it to another team, or cancel it (the governor never cancels a "
        "reservation)",
    ]
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation.id,
        actions=[Notify(enforced=False, owner=who.owner, team=who.team, reason=UNUSED_STATUS)],
        reasons=reasons,
        evidence=evidence,
        severity="warning",
        rule=f"idle.{UNUSED_STATUS}",
    )
    title = f"{kind} {reservation.id}: {reservation.available} x {reservation.instance_type} paid for, unused" + (
        f" ({per_day_text(per_day)})" if per_day is not None else ""
    )
    return decision, title


#: Rule and ``evidence.status`` of an offer of idle reserved capacity to another team (``reserved_capacity: offer``).
OFFERED_STATUS = "capacity-offered"


def capacity_offer(
    *,
    reservation_id: str,
    kind: str,
    instance_type: str,
    free: str,
    ends_at: dt.datetime | None,
    zone: str | None,
    team: str,
    why: str,
    now: dt.datetime,
) -> tuple[Decision, str]:
    """Paid-for capacity nobody uses, offered to ``team`` (``idle.offer_capacity_to``) until it ends: a finding for
    that team's channel and a decision saying why; report-only (nothing is stopped, released or cancelled)."""
    until = f"until {ends_at:%Y-%m-%d %H:%M} UTC" if ends_at else "until the reservation ends (end not read)"
    left = f" ({(ends_at - now).total_seconds() / 3600:,.1f} h left)" if ends_at and ends_at > now else ""
    where = f" in {zone}" if zone else ""
    reasons = [
        f"{kind} {reservation_id}: {free} {instance_type}{where} free {until}{left}: {why}",
        f"offered to team {team} (idle.reserved_capacity: offer); launch into it with "
        f"--capacity-reservation-specification CapacityReservationTarget={{CapacityReservationId={reservation_id}}}"
        " (the owner's account, or one it is shared with); report-only: nothing is stopped or cancelled",
    ]
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation_id,
        actions=[Notify(enforced=False, team=team, reason=OFFERED_STATUS)],
        reasons=reasons,
        evidence={
            "status": OFFERED_STATUS,
            "offered_to": team,
            "instance_type": instance_type,
            "free": free,
            "zone": zone,
            "free_until": ends_at.isoformat() if ends_at else None,
            "judged_at": now.isoformat(),
        },
        severity="warning",
        rule=f"idle.{OFFERED_STATUS}",
    )
    title = f"Free GPU capacity for team {team}: {free} {instance_type} {until} ({kind} {reservation_id})"
    return decision, title
