"""Paying twice: On-Demand instances running beside a targeted reservation or Capacity Block of their match that has
unused capacity (issue 49, item 1). Pure: the sweep hands in what it read and records what this returns.

An On-Demand Capacity Reservation is billed at the On-Demand rate whether an instance runs in it or not, and a
Capacity Block is prepaid; an On-Demand instance of the same type, platform, tenancy and zone running outside it is
billed again. An *open* reservation takes a matching running instance by itself, so only targeted reservations and
Capacity Blocks (targeted too) can be paid twice. EC2 cannot move a running instance into a reservation (its
reservation settings change only while it is stopped: ``ModifyInstanceCapacityReservationAttributes``), so the remedy
is to say so, with the money and the fix. Report-only: nothing is stopped, moved, released or lent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from governor.domain.actions import Notify
from governor.domain.capacity import Reservation, purchase_model
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, Ownership
from governor.idle.domain import POLICY

#: Rule (``idle.paying-twice``) and ``evidence.status`` of the finding.
PAYING_TWICE = "paying-twice"
#: What EC2 reports when an instance or reservation leaves a field out.
_DEFAULT_PLATFORM = "Linux/UNIX"
_DEFAULT_TENANCY = "default"


@dataclass(frozen=True)
class PaidTwice:
    """One reservation with unused capacity and the On-Demand instances of its match that run beside it."""

    reservation: Reservation
    instances: tuple[Instance, ...]


def _matches(reservation: Reservation, instance: Instance) -> bool:
    """EC2's match for a reservation: instance type, platform, tenancy and Availability Zone."""
    return (
        instance.type == reservation.instance_type
        and instance.zone is not None
        and instance.zone == reservation.zone
        and (instance.platform or _DEFAULT_PLATFORM) == (reservation.platform or _DEFAULT_PLATFORM)
        and (instance.tenancy or _DEFAULT_TENANCY) == (reservation.tenancy or _DEFAULT_TENANCY)
    )


def paid_twice(
    instances: Iterable[Instance], reservations: Iterable[Reservation], is_gpu: Callable[[str], bool]
) -> list[PaidTwice]:
    """Active targeted reservations and Capacity Blocks of GPU types with unused capacity, each with the running
    On-Demand instances (no reservation, no other purchase model) of its match; reservations without one left out."""
    on_demand = [i for i in instances if i.state == "running" and purchase_model(i).kind == "on-demand"]
    found = []
    for reservation in sorted(reservations, key=lambda r: r.id):
        targeted = reservation.capacity_block or reservation.match == "targeted"
        if reservation.state != "active" or reservation.available <= 0 or not targeted or reservation.interruptible:
            continue
        if not is_gpu(reservation.instance_type):
            continue
        beside = tuple(sorted((i for i in on_demand if _matches(reservation, i)), key=lambda i: i.id))
        if beside:
            found.append(PaidTwice(reservation, beside))
    return found


def lendable(reservation: Reservation) -> bool:
    """Whether its unused part may be lent as an interruptible Capacity Reservation: an active On-Demand Capacity
    Reservation with no end date, in the owner's own account (AWS's prerequisites for
    ``CreateInterruptibleCapacityReservationAllocation``); never a Capacity Block."""
    return not reservation.capacity_block and reservation.end_date is None and reservation.state == "active"


def _fix(reservation: Reservation, instance_ids: list[str]) -> list[str]:
    """The ways out, in the order a team would try them."""
    rid = reservation.id
    fixes = [
        f"launch into it: CapacityReservationSpecification {{CapacityReservationTarget: {{CapacityReservationId: "
        f"{rid}}}}} on the launch template (run-instances --capacity-reservation-specification "
        f"CapacityReservationTarget={{CapacityReservationId={rid}}}); a running instance cannot be moved: stop "
        f"{', '.join(instance_ids)}, then aws ec2 modify-instance-capacity-reservation-attributes --instance-id <id> "
        f"--capacity-reservation-specification CapacityReservationTarget={{CapacityReservationId={rid}}}, and start it",
    ]
    if reservation.capacity_block:
        fixes.append("a Capacity Block cannot be cancelled: move the On-Demand work into it before it ends")
    else:
        fixes.append(f"or release the reservation if nobody needs it (aws ec2 cancel-capacity-reservation {rid})")
    if lendable(reservation):
        fixes.append(
            f"or lend its {reservation.available} unused instance(s) to other teams as an interruptible Capacity "
            f"Reservation (aws ec2 create-interruptible-capacity-reservation-allocation --capacity-reservation-id "
            f"{rid} --instance-count {reservation.available}), which the owner reclaims when needed (instances "
            "running in it are then terminated)"
        )
    return fixes


def paying_twice_decision(
    found: PaidTwice,
    owners: dict[str, Ownership],
    prices: dict[str, tuple[float | None, str]],
    reservation_owner: Ownership,
) -> tuple[Decision, str]:
    """The report-only decision about one reservation paid twice: dollars a day wasted (the rate actually paid for
    each On-Demand instance that could have run in the unused capacity, dearest first, x 24), the reservation, the
    instances, their owners and the fix."""
    reservation = found.reservation
    dearest = sorted(found.instances, key=lambda i: (-(prices[i.id][0] or 0.0), i.id))
    could = dearest[: reservation.available]
    rates = [prices[i.id][0] for i in could]
    per_day = round(sum(r for r in rates if r is not None) * 24, 2) if any(r is not None for r in rates) else None
    kind = "Capacity Block" if reservation.capacity_block else "targeted On-Demand Capacity Reservation"
    first = owners[dearest[0].id]
    rows: list[dict[str, Any]] = [
        {
            "instance_id": i.id,
            "instance_type": i.type,
            "owner": owners[i.id].owner,
            "team": owners[i.id].team,
            "price_per_hour": prices[i.id][0],
            "price_source": prices[i.id][1],
            "could_use_reservation": i in could,
        }
        for i in dearest
    ]
    ids = [i.id for i in dearest]
    money = f"${per_day:,.2f} a day wasted at {prices[could[0].id][1]}" if per_day is not None else "unpriced"
    where = f"{reservation.instance_type}, {reservation.platform or _DEFAULT_PLATFORM}, "
    where += f"{reservation.tenancy or _DEFAULT_TENANCY} tenancy, {reservation.zone}"
    reasons = [
        f"paying twice: {kind} {reservation.id} ({where}) has {reservation.available} of {reservation.total} "
        f"instances unused while {len(ids)} On-Demand instance(s) of its match run beside it ({', '.join(ids)}, "
        f"owners {', '.join(sorted({owners[i].owner for i in ids}))}): {money}",
        *_fix(reservation, ids),
        "reported only: the governor never stops, moves, releases or lends anything for this finding",
    ]
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation.id,
        actions=[Notify(enforced=False, owner=first.owner, team=first.team, reason=PAYING_TWICE)],
        reasons=reasons,
        evidence={
            "status": PAYING_TWICE,
            "instance_type": reservation.instance_type,
            "reservation": {
                "id": reservation.id,
                "kind": "capacity-block" if reservation.capacity_block else "capacity-reservation",
                "match": reservation.match,
                "zone": reservation.zone,
                "platform": reservation.platform or _DEFAULT_PLATFORM,
                "tenancy": reservation.tenancy or _DEFAULT_TENANCY,
                "unused_instances": reservation.available,
                "total_instances": reservation.total,
                "ends_at": reservation.end_date.isoformat() if reservation.end_date else None,
                "owner": reservation_owner.owner,
                "team": reservation_owner.team,
                "lendable": lendable(reservation),
            },
            "instances": rows,
            "usd_per_day": per_day,
            "owner": first.owner,
            "team": first.team,
        },
        severity="warning",
        rule=f"idle.{PAYING_TWICE}",
    )
    title = f"Paying twice: {len(ids)} On-Demand {reservation.instance_type} beside {kind} {reservation.id}" + (
        f" with {reservation.available} unused (${per_day:,.2f}/day)" if per_day is not None else ""
    )
    return decision, title
