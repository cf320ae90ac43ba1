"""Reserved capacity on the emulator, and AWS's documented capacity events as EventBridge delivers them.

moto launches no instance into a Capacity Block or an interruptible reservation, yet reports ``InstanceLifecycle`` and
``CapacityReservationId`` from its instance model and filters DescribeInstances by any attribute its filter table maps:
:func:`place` sets the two fields as EC2 reports them for an instance in a reservation, and teaches the filter table
the ``capacity-reservation-id`` filter AWS supports. Test and demo tooling only, never imported by a Lambda.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

#: AWS's samples with their provenance (tests/fixtures/capacity/README.md).
FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "capacity"


def place(
    instance_id: str,
    lifecycle: str | None,
    reservation_id: str,
    *,
    account: str = "123456789012",
    region: str = "us-east-1",
) -> None:
    """Put a moto instance into a reservation as EC2 would report it (``lifecycle`` None: an On-Demand one)."""
    from moto.ec2 import utils
    from moto.ec2.models import ec2_backends

    utils.filter_dict_attribute_mapping.setdefault("capacity-reservation-id", "capacity_reservation_id")
    instance = ec2_backends[account][region].get_instance(instance_id)
    instance.lifecycle = lifecycle
    instance.capacity_reservation_id = reservation_id  # type: ignore[attr-defined]  # rendered as CapacityReservationId


#: Capacity reservations the emulator answers DescribeCapacityReservations with, per (account, region).
_RESERVATIONS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}


def reserve(reservation: dict[str, Any], *, account: str = "123456789012", region: str = "us-east-1") -> None:
    """Give the emulator one capacity reservation, in DescribeCapacityReservations' response shape (moto 5.2 does not
    implement the call): the real adapter then reads it as it reads EC2's, by id or with the ``state`` filter."""
    _teach_moto()
    _RESERVATIONS.setdefault((account, region), {})[reservation["CapacityReservationId"]] = copy.deepcopy(reservation)


def forget_reservations() -> None:
    _RESERVATIONS.clear()


def _teach_moto() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response

    if getattr(EC2Response, "_governor_capacity_reservations", False):
        return

    def describe_capacity_reservations(self: Any) -> Any:
        ids = set(self._get_param("CapacityReservationIds", []) or [])
        filters = self._filters_from_querystring()
        found = list(_RESERVATIONS.get((self.current_account, self.region), {}).values())
        if ids:
            found = [r for r in found if r["CapacityReservationId"] in ids]
        if "state" in filters:
            found = [r for r in found if r.get("State") in filters["state"]]
        return ActionResult({"CapacityReservations": copy.deepcopy(found)})

    EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]
    EC2Response._governor_capacity_reservations = True  # type: ignore[attr-defined]


def sample(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return raw


def delivered(
    name: str, values: dict[str, str], detail: dict[str, Any] | None = None, region: str = "us-east-1"
) -> dict[str, Any]:
    """The documented sample ``name`` as a rule delivers it: each ``[placeholder]`` (and the ``yyyy-...`` time
    template) replaced from ``values``, ``customer_event_id`` / ``detail_type`` under EventBridge's ``id`` /
    ``detail-type``, ``version`` and ``region`` added where the sample leaves them out, and ``detail`` fields overridden
    by ``detail``. Nothing else is changed."""
    text = (FIXTURES / name).read_text()
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    event: dict[str, Any] = json.loads(text)
    if "customer_event_id" in event:
        event["id"] = event.pop("customer_event_id")
    if "detail_type" in event:
        event["detail-type"] = event.pop("detail_type")
    if isinstance(event.get("resources"), str):  # the reservation sample writes the list as one placeholder
        event["resources"] = [event["resources"]]
    event.setdefault("version", "0")
    event.setdefault("region", region)  # the Capacity Block samples leave out the region every event carries
    event["detail"] = {**event["detail"], **copy.deepcopy(detail or {})}
    return event


def reservation_state(
    state: str, reservation_id: str, time: str, *, account: str = "123456789012", region: str = "us-east-1"
) -> dict[str, Any]:
    """AWS's documented reservation-state sample (``Scheduled``) as EventBridge delivers the event for ``state`` (one
    of the six detail-types the page lists: the same event with the state in its detail-type and ``detail.state``),
    about ``reservation_id`` (the sample's own id is not a valid one) at ``time``."""
    name = state.capitalize()
    return delivered(
        "capacity-reservation-scheduled.json",
        {
            "EC2 Capacity Reservation Scheduled": f"EC2 Capacity Reservation {name}",
            "cr-1234567890abcdefg": reservation_id,
            "yyyy-mm-ddThh:mm:ssZ": time,
            "123456789012": account,
            "us-east-1": region,
        },
        {"state": state.lower()},
        region=region,
    )
