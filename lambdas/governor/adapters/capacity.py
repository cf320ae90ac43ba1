"""Capacity reservations (On-Demand Capacity Reservations and Capacity Blocks for ML): one paginated read.

moto does not implement DescribeCapacityReservations (``governor_cli.testing.capacity.reserve`` teaches the emulator);
the idle sweep treats a failed read as "end time unknown", never as "not reserved" (the instance's own
``InstanceLifecycle`` and ``CapacityReservationId`` already hold it). The Spot function reads the reservation a capacity
event names before acting on it, and refuses the event when EC2 has no such reservation.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.domain.capacity import Reservation
from governor.domain.times import utc

IAM_ACTIONS = frozenset({"ec2:DescribeCapacityReservations"})
#: EC2's answers for a reservation id it does not have or cannot parse (botocore's ec2 error codes).
UNKNOWN_IDS = frozenset({"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"})


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
        zone_id=raw.get("AvailabilityZoneId"),
        source_id=(raw.get("InterruptionInfo") or {}).get("SourceCapacityReservationId"),
        platform=raw.get("InstancePlatform"),
        tenancy=raw.get("Tenancy"),
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
        """The named reservations (up to 1000 ids a call), by id. An id EC2 does not know (``...NotFound``) or
        cannot read (``...Malformed``) is left out when it is the only one asked for: the capacity events name one
        reservation, and "EC2 has no such reservation" is their answer, not an error to retry."""
        found: dict[str, Reservation] = {}
        for start in range(0, len(ids), 1000):
            batch = ids[start : start + 1000]
            try:
                pages = self._pages(CapacityReservationIds=batch)
            except ClientError as error:
                if len(batch) > 1 or error.response["Error"]["Code"] not in UNKNOWN_IDS:
                    raise
                pages = []
            found.update((reservation.id, reservation) for reservation in pages)
        return found

    def active(self) -> list[Reservation]:
        """Every active reservation in the region (the idle-reservations report reads them)."""
        return self._pages(Filters=[{"Name": "state", "Values": ["active"]}])
