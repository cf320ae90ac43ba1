"""Capacity reservations (On-Demand Capacity Reservations and Capacity Blocks for ML): one paginated read.

moto does not implement DescribeCapacityReservations; callers treat a failed read as "end time unknown", never as
"not reserved" (the instance's own ``InstanceLifecycle`` and ``CapacityReservationId`` already hold it).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.adapters.aws import client
from governor.domain.capacity import Reservation
from governor.domain.times import utc

IAM_ACTIONS = frozenset({"ec2:DescribeCapacityReservations"})


def to_reservation(raw: dict[str, Any]) -> Reservation:
    end = raw.get("EndDate")
    if isinstance(end, str):
        end = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
    return Reservation(
        id=raw["CapacityReservationId"],
        instance_type=raw.get("InstanceType", ""),
        reservation_type=raw.get("ReservationType") or "default",
        match=raw.get("InstanceMatchCriteria") or "targeted",
        state=raw.get("State") or "unknown",
        zone=raw.get("AvailabilityZone"),
        end_date=utc(end) if isinstance(end, dt.datetime) else None,
        total=int(raw.get("TotalInstanceCount") or 0),
        available=int(raw.get("AvailableInstanceCount") or 0),
        interruptible=bool(raw.get("Interruptible")),
        owner_id=raw.get("OwnerId"),
        tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])},
    )


class CapacityReservations:
    """Counts its API calls so the benchmarks can report them."""

    def __init__(
        self, region: str | None = None, ec2: Any = None, *, account: str | None = None, event_id: str | None = None
    ) -> None:
        self._ec2 = ec2 or client("ec2", region, account=account, event_id=event_id)
        self.calls = 0

    def _pages(self, **kwargs: Any) -> list[Reservation]:
        found: list[Reservation] = []
        for page in self._ec2.get_paginator("describe_capacity_reservations").paginate(**kwargs):
            self.calls += 1
            found.extend(to_reservation(raw) for raw in page.get("CapacityReservations", []))
        return found

    def reservations(self, ids: list[str]) -> dict[str, Reservation]:
        """The named reservations (up to 1000 ids a call), by id."""
        found: dict[str, Reservation] = {}
        for start in range(0, len(ids), 1000):
            for reservation in self._pages(CapacityReservationIds=ids[start : start + 1000]):
                found[reservation.id] = reservation
        return found

    def active(self) -> list[Reservation]:
        """Every active reservation in the region (the idle-reservations report reads them)."""
        return self._pages(Filters=[{"Name": "state", "Values": ["active"]}])
