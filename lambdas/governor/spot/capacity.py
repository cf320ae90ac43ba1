"""Capacity events checked against EC2 before any act, and the decisions on the capacity lifecycle.

Anyone who may invoke the function can hand it an event (issue 45.4: a forged expiry for a block that really ended
ten days later signalled both its instances). So every capacity event is compared with the reservation as
``DescribeCapacityReservations`` returns it, and with the function's own clock, before anything is sent or recorded
as true: a ``check_*`` function returns None when they agree, else a :class:`Refusal` with its reason. The instances
a block's expiry checkpoints are those EC2 lists in the reservation (``DescribeInstances`` filtered by
``capacity-reservation-id``), never a list from the event.

Then the lifecycle, each from AWS's documented sample (``tests/fixtures/capacity``): a Capacity Block delivered (its
end recorded on its instances, its owners told when it ends), a reservation's state changing (recorded; the team told
when a delayed, failed or unsupported request means capacity will not arrive as planned, or when it is active), and
an interruptible reservation's capacity reclaimed (recorded, its owner told). Pure: the handler reads, these decide.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field

from governor.domain.actions import AnyAction, Notify, Record
from governor.domain.capacity import Reservation
from governor.domain.decision import Decision, Severity
from governor.domain.fleet import Instance, ownership
from governor.domain.model import Model
from governor.policy import Policy
from governor.spot.domain import BLOCK_TERMINATION_LEAD

POLICY = "spot"
#: When a Capacity Block becomes usable; AWS's documentation spells it both ways.
DELIVERED = ("Capacity Block Delivered", "Capacity Block Reservation Delivered")
#: A future-dated reservation's state changes (``detail.state`` is the lower-case word).
STATES = ("Scheduled", "Active", "Delayed", "Unsupported", "Failed", "Expired")
STATE_EVENTS = tuple(f"EC2 Capacity Reservation {state}" for state in STATES)
#: To the owner of the source reservation, once the capacity it lent is back.
RECLAMATION = "EC2 Interruptible Capacity Reservation Allocation Reclamation Completed"
#: Ledger kinds: a block's end recorded on each instance in it (key: the instance id); a reservation's last state.
BLOCK_KIND = "capacity-block"
RESERVATION_KIND = "capacity-reservation"
RULE_DELIVERED = "capacity-block-delivered"
RULE_STATE = "capacity-reservation-state"
RULE_RECLAIMED = "capacity-reclamation"

#: How early AWS sends the expiration warning, and the slack allowed for delivery and Lambda's retries.
BLOCK_WARNING_LEAD = dt.timedelta(minutes=40)
BLOCK_SLACK = dt.timedelta(minutes=5)
#: How early the interruptible reservation's warning comes, and its slack.
RESERVATION_WARNING_LEAD = dt.timedelta(minutes=2)
RESERVATION_SLACK = dt.timedelta(minutes=1)
#: A termination time this long past is a stale event: the instance is gone or going either way.
LATE_GRACE = dt.timedelta(minutes=2)
#: End dates compared to the minute (the event and the API render the same instant, possibly differently rounded).
END_TOLERANCE = dt.timedelta(minutes=1)
#: States after which a reservation offers nothing any more.
ENDED = frozenset({"expired", "cancelled", "cancelling", "payment-failed"})
#: EC2 reflects a change up to five minutes late and an event may arrive after the next one: a state one step before
#: or after the event's, on the reservation's path, agrees with it.
NEIGHBOURS: Mapping[str, frozenset[str]] = {
    "scheduled": frozenset({"assessing", "delayed", "active", "cancelled", "cancelling", "failed"}),
    "delayed": frozenset({"scheduled", "active", "cancelled", "cancelling", "failed"}),
    "active": frozenset({"scheduled", "delayed", "pending", "expired", "cancelled", "cancelling"}),
    "expired": frozenset({"active"}),
    "failed": frozenset({"assessing", "scheduled", "delayed"}),
    "unsupported": frozenset({"assessing"}),
}
#: What each state means for the team, and how loudly to say it (None: recorded only).
MEANING: Mapping[str, tuple[str, Severity | None]] = {
    "scheduled": ("approved and scheduled for delivery on its start date", None),
    "active": ("active: the capacity is available for use", "info"),
    "delayed": ("delayed: EC2 hit a delay provisioning it, so plan for the capacity arriving late", "warning"),
    "unsupported": ("unsupported: EC2 will not deliver the request as made; the capacity will not come", "warning"),
    "failed": ("failed (request parameters, capacity or instance limits): no capacity will be delivered", "warning"),
    "expired": ("expired: the reserved capacity is no longer available", None),
}


class _Detail(Model):
    model_config = ConfigDict(extra="allow", frozen=True)


class ReservationStateDetail(_Detail):
    """``detail`` of "EC2 Capacity Reservation <State>" (the detail-type names the state too)."""

    capacity_reservation_id: str = Field(alias="capacity-reservation-id", pattern=r"^cr-[0-9a-f]{8,32}$")
    state: Literal["scheduled", "active", "delayed", "unsupported", "failed", "expired"]


class ReclamationDetail(_Detail):
    """``detail`` of the reclamation completed event, sent to the source reservation's owner (AWS's field names)."""

    source_reservation_id: str = Field(alias="sourceCapacityReservationId", pattern=r"^cr-[0-9a-f]{8,32}$")
    instance_type: str | None = Field(None, alias="instanceType")
    zone_id: str | None = Field(None, alias="availabilityZoneId")
    total: int | None = Field(None, alias="TotalInstanceCount", ge=0)
    reclaimed: int | None = Field(None, alias="ReclaimedInstanceCount", ge=0)
    target: int | None = Field(None, alias="targetInstanceCount", ge=0)


@dataclass(frozen=True)
class Refusal:
    """Why a capacity event is not acted on. ``mismatch``: it contradicts EC2 (forged, or about something else), and
    people are told; otherwise it is merely late (the block already ended), and only recorded."""

    reason: str
    mismatch: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)


# --- checks: the event against EC2 and the clock -----------------------------------------------------------------


def _stamp(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _read(reservation: Reservation | None, reservation_id: str) -> dict[str, Any]:
    """What EC2 reported, for the record of a refusal or an agreement."""
    if reservation is None:
        return {"reservation_id": reservation_id, "ec2": None}
    return {
        "reservation_id": reservation_id,
        "ec2": {
            "state": reservation.state,
            "type": reservation.reservation_type,
            "end_date": _stamp(reservation.end_date),
            "interruptible": reservation.interruptible,
            "zone_id": reservation.zone_id,
        },
    }


def _unknown(reservation_id: str, reservation: Reservation | None) -> Refusal | None:
    if reservation is None or reservation.id != reservation_id:
        why = f"EC2 has no capacity reservation {reservation_id} in this account and region"
        return Refusal(why, evidence=_read(None, reservation_id))
    return None


def _block(reservation_id: str, end: dt.datetime, reservation: Reservation | None) -> Refusal | None:
    """The event's block against EC2's: it exists, is a Capacity Block, and ends when the event says."""
    refusal = _unknown(reservation_id, reservation)
    if refusal is not None or reservation is None:
        return refusal
    seen = {**_read(reservation, reservation_id), "event_end_date": _stamp(end)}
    if not reservation.capacity_block:
        return Refusal(f"{reservation_id} is not a Capacity Block (EC2: {reservation.reservation_type})", evidence=seen)
    if reservation.end_date is None or abs(reservation.end_date - end) > END_TOLERANCE:
        ec2_end = _stamp(reservation.end_date) or "no end date"
        return Refusal(f"the event says {reservation_id} ends {end.isoformat()}, EC2 says {ec2_end}", evidence=seen)
    return None


def check_block_expiry(
    reservation_id: str, end: dt.datetime, reservation: Reservation | None, now: dt.datetime
) -> Refusal | None:
    """A Capacity Block's expiration warning agrees with EC2 when EC2 has that block, active, ending when the event
    says, and that end is at most 40 minutes (plus delivery slack) after the function's own clock: a forged warning
    about a block that really ends in ten days is refused, whatever time it claims to have been sent at."""
    refusal = _block(reservation_id, end, reservation)
    if refusal is not None or reservation is None or reservation.end_date is None:
        return refusal
    seen = {**_read(reservation, reservation_id), "event_end_date": _stamp(end), "checked_at": now.isoformat()}
    ends = reservation.end_date
    if reservation.state in ENDED or now >= ends:
        return Refusal(f"{reservation_id} already ended ({reservation.state})", mismatch=False, evidence=seen)
    if reservation.state != "active":
        return Refusal(f"{reservation_id} is {reservation.state}, not an active block about to end", evidence=seen)
    if ends - now > BLOCK_WARNING_LEAD + BLOCK_SLACK:
        minutes = round((ends - now).total_seconds() / 60)
        return Refusal(
            f"EC2 says {reservation_id} ends {ends.isoformat()}, {minutes} minutes from now: the expiration warning "
            "comes 40 minutes before the end",
            evidence=seen,
        )
    return None


def check_delivered(
    reservation_id: str, end: dt.datetime, reservation: Reservation | None, now: dt.datetime
) -> Refusal | None:
    """A block's delivery agrees with EC2 when EC2 has that block, active (delivered), ending when the event says."""
    refusal = _block(reservation_id, end, reservation)
    if refusal is not None or reservation is None or reservation.end_date is None:
        return refusal
    seen = {**_read(reservation, reservation_id), "checked_at": now.isoformat()}
    if reservation.state in ENDED or now >= reservation.end_date:
        return Refusal(f"{reservation_id} already ended ({reservation.state})", mismatch=False, evidence=seen)
    if reservation.state != "active":
        return Refusal(f"{reservation_id} is {reservation.state}, not delivered", evidence=seen)
    return None


def check_reservation_warning(
    instance: Instance, reservation: Reservation | None, deadline: dt.datetime, az_id: str | None, now: dt.datetime
) -> Refusal | None:
    """An interruptible reservation's warning about a running interruptible instance agrees with EC2 when the
    reservation EC2 reports it in exists and is interruptible, lies in the zone the event names, and the termination
    time is about two minutes after the function's clock (not hours ahead, not long past)."""
    reservation_id = instance.capacity_reservation_id
    if not reservation_id:
        return Refusal(f"EC2 reports {instance.id} in no capacity reservation", evidence={"instance_id": instance.id})
    refusal = _unknown(reservation_id, reservation)
    if refusal is not None or reservation is None:
        return refusal
    seen = {**_read(reservation, reservation_id), "event_az_id": az_id, "terminates_at": deadline.isoformat()}
    seen["checked_at"] = now.isoformat()
    if not reservation.interruptible:
        return Refusal(f"{reservation_id}, which {instance.id} runs in, is not interruptible", evidence=seen)
    if az_id and reservation.zone_id and az_id != reservation.zone_id:
        return Refusal(f"the event names zone {az_id}, {reservation_id} is in {reservation.zone_id}", evidence=seen)
    if deadline - now > RESERVATION_WARNING_LEAD + RESERVATION_SLACK:
        ahead = round((deadline - now).total_seconds())
        return Refusal(
            f"the termination time {deadline.isoformat()} is {ahead}s ahead: the warning comes two minutes before",
            evidence=seen,
        )
    if now - deadline > LATE_GRACE:
        return Refusal(f"the termination time {deadline.isoformat()} has passed", mismatch=False, evidence=seen)
    return None


def check_state(reservation_id: str, state: str, reservation: Reservation | None) -> Refusal | None:
    """A state event agrees when EC2 reports the same state, or one step before or after it (:data:`NEIGHBOURS`)."""
    refusal = _unknown(reservation_id, reservation)
    if refusal is not None or reservation is None:
        return refusal
    if reservation.state == state or reservation.state in NEIGHBOURS.get(state, frozenset()):
        return None
    return Refusal(
        f"the event says {reservation_id} is {state}, EC2 says {reservation.state}",
        evidence={**_read(reservation, reservation_id), "event_state": state},
    )


def check_reclamation(detail: ReclamationDetail, reservation: Reservation | None, account: str) -> Refusal | None:
    """A reclamation agrees when EC2 has the source reservation, owned by this account (the event goes to the owner)
    and not itself interruptible, of the instance type and in the zone the event names."""
    source = detail.source_reservation_id
    refusal = _unknown(source, reservation)
    if refusal is not None or reservation is None:
        return refusal
    seen = {**_read(reservation, source), "event_instance_type": detail.instance_type, "event_zone_id": detail.zone_id}
    if reservation.owner_id and reservation.owner_id != account:
        return Refusal(f"{source} belongs to account {reservation.owner_id}, not {account}", evidence=seen)
    if reservation.interruptible:
        return Refusal(f"{source} is itself interruptible, not a source of lent capacity", evidence=seen)
    if detail.instance_type and detail.instance_type != reservation.instance_type:
        return Refusal(
            f"the event names {detail.instance_type}, {source} reserves {reservation.instance_type}", evidence=seen
        )
    if detail.zone_id and reservation.zone_id and detail.zone_id != reservation.zone_id:
        return Refusal(f"the event names zone {detail.zone_id}, {source} is in {reservation.zone_id}", evidence=seen)
    return None


def refused(resource: str, refusal: Refusal, rule: str, what: str) -> Decision:
    """The decision recorded for an event EC2 contradicts (or that came too late): nothing sent, the reason kept."""
    return Decision(
        policy=POLICY,
        verdict="ignored",
        resource=resource,
        reasons=[f"{what} refused: {refusal.reason}; nothing was sent or changed"],
        evidence={"status": "refused", "mismatch": refusal.mismatch, **refusal.evidence},
        severity="warning" if refusal.mismatch else "info",
        rule=rule,
    )


# --- the lifecycle -------------------------------------------------------------------------------------------------


def _describe(reservation: Reservation) -> str:
    where = f" in {reservation.zone}" if reservation.zone else ""
    count = f"{reservation.total} x " if reservation.total else ""
    return f"{count}{reservation.instance_type or 'unknown type'}{where}"


def owners(instances: Sequence[Instance], reservation: Reservation, policy: Policy) -> dict[tuple[str, str], list[str]]:
    """Who to tell: each owner and team of the instances running in it, with their instances; with none running,
    the reservation's own owner and team tags."""
    found: dict[tuple[str, str], list[str]] = {}
    for instance in sorted(instances, key=lambda i: i.id):
        who = ownership(instance.tags, policy.fleet)
        found.setdefault((who.owner, who.team), []).append(instance.id)
    if not found:
        who = ownership(reservation.tags, policy.fleet)
        found[(who.owner, who.team)] = []
    return found


def decide_delivered(
    reservation: Reservation, instances: Sequence[Instance], policy: Policy, at: dt.datetime
) -> Decision:
    """A Capacity Block delivered (as EC2 reports it): its end recorded on each instance in it, and each owner told
    when it ends and when EC2 starts terminating its instances (30 minutes before)."""
    end = reservation.end_date or at
    enforce = policy.spot.enforce
    groups = owners(instances, reservation, policy)
    actions: list[AnyAction] = [Record(enforced=enforce, kind=BLOCK_KIND, item=reservation.id)]
    actions += [Notify(enforced=enforce, owner=owner, team=team) for owner, team in groups]
    running = sorted(i.id for i in instances)
    reasons = [
        f"Capacity Block {reservation.id} delivered: {_describe(reservation)} until {end:%Y-%m-%d %H:%M} UTC; EC2 "
        f"warns 40 minutes before the end and terminates its instances from {end - BLOCK_TERMINATION_LEAD:%H:%M} UTC",
        f"{len(running)} instance(s) run in it now" if running else "no instance runs in it yet",
    ]
    evidence = {
        "reservation_id": reservation.id,
        "end_date": end.isoformat(),
        "terminates_at": (end - BLOCK_TERMINATION_LEAD).isoformat(),
        "instance_type": reservation.instance_type,
        "zone": reservation.zone,
        "total_instances": reservation.total,
        "instances": running,
        "owners": [{"owner": o, "team": t, "instances": ids} for (o, t), ids in groups.items()],
    }
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation.id,
        actions=actions,
        reasons=reasons,
        evidence=evidence,
        severity="info",
        rule=RULE_DELIVERED,
    )


def decide_reservation_state(reservation: Reservation, state: str, policy: Policy) -> Decision:
    """A reservation's state change (as EC2 agrees): recorded; its team told when the capacity will not arrive as
    planned (delayed, failed, unsupported) or has arrived (active)."""
    meaning, severity = MEANING.get(state, (state, None))
    who = ownership(reservation.tags, policy.fleet)
    actions: list[AnyAction] = [Record(enforced=policy.spot.enforce, kind=RESERVATION_KIND, item=reservation.id)]
    if severity is not None:
        actions.append(Notify(enforced=policy.spot.enforce, owner=who.owner, team=who.team))
    noted = "" if reservation.state == state else f" (EC2 reports it {reservation.state} already)"
    return Decision(
        policy=POLICY,
        verdict="act" if severity else "ok",
        resource=reservation.id,
        actions=actions,
        reasons=[f"capacity reservation {reservation.id} ({_describe(reservation)}) is {meaning}{noted}"],
        evidence={**_read(reservation, reservation.id), "state": state, "owner": who.owner, "team": who.team},
        severity=severity or "info",
        rule=RULE_STATE,
    )


def decide_reclamation(detail: ReclamationDetail, reservation: Reservation, policy: Policy) -> Decision:
    """The capacity an interruptible reservation lent is back in its source (as EC2 agrees): recorded, owner told."""
    who = ownership(reservation.tags, policy.fleet)
    enforce = policy.spot.enforce
    count = "" if detail.reclaimed is None else f"{detail.reclaimed} instance(s) of "
    now_holds = "" if detail.total is None else f"; it holds {detail.total} now"
    target = "" if detail.target is None else f" (interruptible allocation now {detail.target})"
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation.id,
        actions=[
            Record(enforced=enforce, kind=RESERVATION_KIND, item=reservation.id),
            Notify(enforced=enforce, owner=who.owner, team=who.team),
        ],
        reasons=[
            f"reclamation completed: {count}{detail.instance_type or reservation.instance_type} capacity lent from "
            f"{reservation.id} is back in it{now_holds}{target}"
        ],
        evidence={
            **_read(reservation, reservation.id),
            "reclaimed": detail.reclaimed,
            "total": detail.total,
            "target": detail.target,
            "owner": who.owner,
            "team": who.team,
        },
        severity="info",
        rule=RULE_RECLAIMED,
    )


#: The refusal when EC2's record could not be had at all (no reader: a test's fakes, or a misbuilt adapter bundle).
UNREAD = Refusal("EC2's record of the reservation was not read, so the event cannot be checked")
