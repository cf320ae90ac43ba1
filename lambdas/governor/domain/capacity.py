"""How an instance's capacity was bought, and what that means for idle GPU-hours.

A Capacity Block for ML is prepaid and cannot be cancelled; an On-Demand Capacity Reservation is billed whether an
instance runs in it or not. Stopping an idle instance in either saves nothing (the block or reservation stays paid
for) and may lose capacity the team cannot get back, so their idle GPU-hours are "paid for, unused", not savings.
Interruptible capacity reservations are lent capacity that its owner can reclaim. Values are EC2's own
(``InstanceLifecycle``, ``DescribeCapacityReservations``: ``ReservationType`` default | capacity-block,
``InstanceMatchCriteria`` open | targeted), as botocore's ec2 service model lists them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Purchase = Literal[
    "on-demand",
    "spot",
    "capacity-block",
    "capacity-reservation",
    "interruptible-reservation",
    "scheduled",
    "hyperpod",
    "unknown",
]
#: Purchase models whose hours are paid for whether the instance works or not.
PAID_FOR = frozenset({"capacity-block", "capacity-reservation"})
#: Purchase models the idle policy never stops for savings by default.
RESERVED = frozenset(
    {"capacity-block", "capacity-reservation", "interruptible-reservation", "scheduled", "hyperpod", "unknown"}
)


@dataclass(frozen=True)
class Reservation:
    """One capacity reservation as DescribeCapacityReservations reports it (the fields the governor uses)."""

    id: str
    instance_type: str
    reservation_type: str = "default"  # "default" (On-Demand Capacity Reservation) or "capacity-block"
    match: str = "targeted"  # InstanceMatchCriteria: "open" or "targeted"
    state: str = "active"
    zone: str | None = None
    end_date: dt.datetime | None = None
    total: int = 0
    available: int = 0
    interruptible: bool = False
    owner_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    #: The zone's id (``use1-az1``), which capacity events name (``azId``, ``availabilityZoneId``).
    zone_id: str | None = None
    #: An interruptible reservation's source (``InterruptionInfo.SourceCapacityReservationId``).
    source_id: str | None = None
    #: ``InstancePlatform`` (``Linux/UNIX``, ``Windows``...) and ``Tenancy`` (``default`` or ``dedicated``): with the
    #: type and zone, what an instance must match to run in it.
    platform: str | None = None
    tenancy: str | None = None

    @property
    def capacity_block(self) -> bool:
        return self.reservation_type == "capacity-block"


class ReservationReader(Protocol):
    """Capacity reservations by id (the adapter batches them into one paginated DescribeCapacityReservations)."""

    def reservations(self, ids: list[str]) -> dict[str, Reservation]: ...

    def active(self) -> list[Reservation]: ...


class Purchased(Protocol):
    """What the purchase model needs of an instance (``governor.domain.fleet.Instance`` has it)."""

    @property
    def lifecycle(self) -> str: ...

    @property
    def capacity_reservation_id(self) -> str | None: ...

    @property
    def capacity_reservation_preference(self) -> str | None: ...

    @property
    def reservation(self) -> Reservation | None: ...

    @property
    def hyperpod_cluster(self) -> str | None: ...


@dataclass(frozen=True)
class PurchaseModel:
    """The instance's purchase model, recorded with every idle decision (``evidence.purchase``)."""

    kind: Purchase
    reservation_id: str | None = None
    match: str | None = None
    ends_at: dt.datetime | None = None
    lifecycle: str = "on-demand"
    cluster: str | None = None  # the SageMaker HyperPod cluster (its owner: nodes are removed through SageMaker)

    @property
    def paid_for(self) -> bool:
        """Its hours are billed whether it works or not: idle hours are paid for, unused."""
        return self.kind in PAID_FOR

    def evidence(self) -> dict[str, Any]:
        found: dict[str, Any] = {"kind": self.kind, "lifecycle": self.lifecycle}
        if self.reservation_id:
            found["reservation_id"] = self.reservation_id
        if self.match:
            found["match"] = self.match
        if self.ends_at:
            found["ends_at"] = self.ends_at.isoformat()
        if self.cluster:
            found["cluster"] = self.cluster
        return found

    def describe(self) -> str:
        """In words, for reasons and findings."""
        ends = f", ends {self.ends_at:%Y-%m-%d %H:%M} UTC" if self.ends_at else ""
        if self.kind == "capacity-block":
            return f"Capacity Block {self.reservation_id or '(reservation id not reported)'} (prepaid{ends})"
        if self.kind == "capacity-reservation":
            return f"On-Demand Capacity Reservation {self.reservation_id} ({self.match or 'match unknown'}{ends})"
        if self.kind == "hyperpod":
            return f"a node of SageMaker HyperPod cluster {self.cluster}"
        if self.kind == "interruptible-reservation":
            return f"interruptible capacity reservation {self.reservation_id or ''}".rstrip()
        return {"scheduled": "a Scheduled Instance", "unknown": f"purchase model {self.lifecycle!r}"}.get(
            self.kind, self.kind
        )


def purchase_model(instance: Purchased) -> PurchaseModel:
    """From EC2's ``InstanceLifecycle`` first, then the reservation the instance runs in (if any)."""
    reservation = instance.reservation
    rid = instance.capacity_reservation_id
    if instance.hyperpod_cluster:  # whatever capacity it runs on, the cluster owns it
        return PurchaseModel("hyperpod", rid, lifecycle=instance.lifecycle, cluster=instance.hyperpod_cluster)
    ends = reservation.end_date if reservation else None
    lifecycle = instance.lifecycle
    if lifecycle == "spot":
        return PurchaseModel("spot", lifecycle=lifecycle)
    if lifecycle == "capacity-block" or (reservation is not None and reservation.capacity_block):
        return PurchaseModel("capacity-block", rid, ends_at=ends, lifecycle=lifecycle)
    if lifecycle == "interruptible-capacity-reservation" or (reservation is not None and reservation.interruptible):
        return PurchaseModel("interruptible-reservation", rid, ends_at=ends, lifecycle=lifecycle)
    if lifecycle in ("scheduled", "unknown"):
        return PurchaseModel(lifecycle, rid, lifecycle=lifecycle)  # type: ignore[arg-type]
    if rid:
        # Without the reservation read, its match criteria are unknown: treated as targeted (never stopped).
        match = reservation.match if reservation else None
        return PurchaseModel("capacity-reservation", rid, match, ends, lifecycle=lifecycle)
    return PurchaseModel("on-demand", lifecycle=lifecycle)


def idle_hold(purchase: PurchaseModel, reserved_capacity: str) -> str | None:
    """Why the idle policy only reports this instance (its capacity is paid for or lent), or None: it may act.

    ``reserved_capacity`` is ``idle.reserved_capacity``: ``report`` (the default) never stops reserved capacity;
    ``stop_if_open`` lets an instance in an *open* On-Demand Capacity Reservation be stopped (the reservation stays
    billed, but its slot is free for any matching instance of the account). Capacity Blocks, targeted reservations
    and interruptible ones are never stopped for savings.
    """
    if purchase.kind not in RESERVED:
        return None
    what = purchase.describe()
    if purchase.kind == "capacity-block":
        return (
            f"runs in {what}: stopping saves nothing and may lose the slot for the rest of the block, so its idle "
            "GPU-hours are reported as paid for, unused"
        )
    if purchase.kind == "capacity-reservation":
        if purchase.match == "open" and reserved_capacity == "stop_if_open":
            return None
        why = "idle.reserved_capacity is report" if purchase.match == "open" else "a targeted reservation"
        return (
            f"runs in {what}: the reservation is billed whether used or not ({why}), so its idle GPU-hours are "
            "reported as paid for, unused"
        )
    if purchase.kind == "hyperpod":
        return (
            f"{what}: HyperPod replaces a node stopped through EC2; remove it through SageMaker "
            "(BatchDeleteClusterNodes or a smaller instance group), reported only"
        )
    if purchase.kind == "interruptible-reservation":
        return f"runs in {what}: capacity lent by its owner, which stopping would hand back; reported only"
    return f"{what}: not a purchase model the idle policy stops; reported only"


@dataclass(frozen=True)
class KnownFirst:
    """A reader that answers from reservations already read (the sweep's one read of every active reservation) and
    asks ``reader`` only for the ids it does not hold: one DescribeCapacityReservations a sweep instead of two."""

    known: Mapping[str, Reservation]
    reader: ReservationReader

    def reservations(self, ids: list[str]) -> dict[str, Reservation]:
        found = {i: self.known[i] for i in ids if i in self.known}
        missing = [i for i in ids if i not in found]
        return found | (self.reader.reservations(missing) if missing else {})

    def active(self) -> list[Reservation]:
        return list(self.known.values())


def with_reservations(instances: list[Any], reader: ReservationReader | None) -> tuple[list[Any], str | None]:
    """The instances with their reservation attached (one read for all), and why none could be read, if so."""
    import dataclasses

    ids = sorted({i.capacity_reservation_id for i in instances if i.capacity_reservation_id})
    if not ids or reader is None:
        return instances, None
    try:
        found: Mapping[str, Reservation] = reader.reservations(ids)
    except Exception as error:  # a failed read costs the end time, never the hold: lifecycle alone holds them
        return instances, f"capacity reservations not read ({type(error).__name__}: {error})"
    attached = [
        dataclasses.replace(i, reservation=found[i.capacity_reservation_id])
        if i.capacity_reservation_id in found
        else i
        for i in instances
    ]
    return attached, None


#: ``evidence.status`` of the idle sweep's decision about a reservation with capacity nobody runs in.
UNUSED_STATUS = "unused-capacity"


def unused_capacity(reservations: list[Reservation], is_gpu: Callable[[str], bool]) -> list[Reservation]:
    """Active reservations of GPU types with capacity no instance runs in (``AvailableInstanceCount`` > 0): billed
    at the instance type's rate whether used or not, so every empty slot-hour is paid for, unused."""
    return sorted(
        (r for r in reservations if r.state == "active" and r.available > 0 and is_gpu(r.instance_type)),
        key=lambda r: r.id,
    )


def reservation_evidence(reservation: Reservation, per_hour: float | None, source: str) -> dict[str, Any]:
    """What the report needs of an unused reservation, recorded with each sweep's decision about it."""
    kind = "capacity-block" if reservation.capacity_block else "capacity-reservation"
    found: dict[str, Any] = {
        "status": UNUSED_STATUS,
        "instance_type": reservation.instance_type,
        "purchase": {"kind": kind, "lifecycle": "none", "reservation_id": reservation.id, "match": reservation.match},
        "unused_instances": reservation.available,
        "total_instances": reservation.total,
        "zone": reservation.zone,
        "owner_account": reservation.owner_id,
        "price_per_hour": per_hour,
        "price_source": source,
        "usd_per_day": round(per_hour * 24 * reservation.available, 2) if per_hour is not None else None,
    }
    if reservation.end_date is not None:
        found["purchase"]["ends_at"] = reservation.end_date.isoformat()
    return found


class HyperPodReader(Protocol):
    """Instance id -> SageMaker HyperPod cluster name, from the clusters' own node lists."""

    def nodes(self) -> dict[str, str]: ...


def with_hyperpod(instances: list[Any], reader: HyperPodReader | None) -> tuple[list[Any], str | None]:
    """The instances with their HyperPod cluster attached, and why the node lists could not be read, if so."""
    import dataclasses

    if reader is None or not instances:
        return instances, None
    try:
        nodes = reader.nodes()
    except Exception as error:
        return instances, f"HyperPod cluster nodes not read ({type(error).__name__}: {error})"
    return [dataclasses.replace(i, hyperpod_cluster=nodes[i.id]) if i.id in nodes else i for i in instances], None
