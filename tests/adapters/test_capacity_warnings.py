"""The capacity-reservation interruption warning and the Capacity Block expiry warning (both spellings), from AWS's
documented samples, on moto: the same checkpoint path as Spot's, the time left computed from the event, recorded.

Each runs at the event's time on the function's clock (``now``), with the reservation EC2 would report for it
(``reserve``): the handler checks every capacity event against that record before acting (issue 45.4)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from governor_cli.demo.bootstrap import LocalStack
from governor_cli.testing.capacity import delivered, place, reserve
from tests.adapters.test_spot_moto import Deployed, commands_sent
from tests.adapters.test_spot_moto import aws as aws  # the fixture
from tests.adapters.test_spot_recovery import REGION, Fleet

AT = "2026-12-01T10:15:00Z"
NOW = dt.datetime(2026, 12, 1, 10, 15, tzinfo=dt.UTC)
BLOCK = "cr-0a1b2c3d4e5f60718"
LENT = "cr-0f0e0d0c0b0a09080"


def block(end: str = "2026-12-01T10:55:00Z", **changes: Any) -> None:
    """The Capacity Block as DescribeCapacityReservations reports it on the emulator."""
    reserve(
        {
            "CapacityReservationId": BLOCK,
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": f"{REGION}a",
            "AvailabilityZoneId": "use1-az1",
            "State": "active",
            "ReservationType": "capacity-block",
            "InstanceMatchCriteria": "targeted",
            "TotalInstanceCount": 2,
            "AvailableInstanceCount": 0,
            "EndDateType": "limited",
            "EndDate": end,
            **changes,
        },
        region=REGION,
    )


def lent(**changes: Any) -> None:
    """The interruptible reservation an instance runs in, lent from another account's source reservation."""
    reserve(
        {
            "CapacityReservationId": LENT,
            "OwnerId": "210987654321",
            "InstanceType": "g5.xlarge",
            "AvailabilityZone": f"{REGION}a",
            "AvailabilityZoneId": "use1-az1",
            "State": "active",
            "ReservationType": "default",
            "InstanceMatchCriteria": "targeted",
            "TotalInstanceCount": 1,
            "AvailableInstanceCount": 0,
            "EndDateType": "unlimited",
            "Interruptible": True,
            "InterruptionInfo": {"SourceCapacityReservationId": "cr-0123456789abcdef0", "InterruptionType": "adhoc"},
            **changes,
        },
        region=REGION,
    )


def reservation_warning(instance_id: str, termination: str = "2026-12-01T10:17:00Z") -> dict[str, object]:
    return delivered(
        "capacity-reservation-interruption-warning.json",
        {
            "[instance owner Account ID]": "123456789012",
            "[Current time in yyyy-mm-ddThh:mm:ssZ]": AT,
            "[instance arn]": f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}",
            "[region]": REGION,
            "[instance-id]": instance_id,
            "[availability-zone-id]": "use1-az1",
        },
        {"instance-termination-time": termination},
    )


def block_warning(name: str, end: str = "2026-12-01T10:55:00Z") -> dict[str, object]:
    event = delivered(
        name,
        {
            "[Capacity Reservation Id]": BLOCK,
            "[Customer Account ID]": "123456789012",
            "[Current time]": AT,
            "[ODCR ARN]": f"arn:aws:ec2:{REGION}:123456789012:capacity-reservation/{BLOCK}",
            "[ODCR ID]": BLOCK,
            "[ODCR End Date]": end,
        },
    )
    event["region"] = REGION  # the Capacity Block samples leave out the region every EventBridge event carries
    return event


def test_the_reservation_warning_checkpoints_the_interruptible_instance_with_the_time_left(aws: LocalStack) -> None:
    fleet = Fleet()
    borrower, spot = fleet.launch(2, tags={"governor:checkpoint-command": "train"})
    place(borrower, "interruptible-capacity-reservation", LENT)
    lent()
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reservation_warning(borrower), now=NOW)
    assert result["status"] == "acted" and result["checkpoint"]["delivered"]
    assert result["notice"] == {
        "notice": "capacity-reservation",
        "terminates_at": "2026-12-01T10:17:00+00:00",
        "seconds_left": 120,
    }
    (sent,) = commands_sent()  # (moto lists every instance under a command sent without targets; AWS does not)
    assert sent["Parameters"]["commands"] == ["pkill -USR1 -f train.py"]
    record = deployed.runtime.ledger.get_item("interruption", borrower)
    assert record is not None and record["lifecycle"] == "interruptible-capacity-reservation"
    assert record["command_id"] == sent["CommandId"] == result["checkpoint"]["command_id"]
    decision = next(d for d in deployed.runtime.ledger.query_kind("decision") if d["resource"] == borrower)
    assert decision["rule"] == "capacity-reservation-interruption" and decision["evidence"]["seconds_left"] == 120
    # issue 33: a warning acts only on the purchase model it concerns; the Spot instance next to it is left alone
    ignored = deployed.run(reservation_warning(spot) | {"id": "another"}, now=NOW)
    assert ignored["status"] == "ignored" and "not interruptible-capacity-reservation" in ignored["reason"]
    assert len(commands_sent()) == 1


@pytest.mark.parametrize(
    "name", ["capacity-block-expiration-warning.json", "capacity-block-reservation-expiration-warning.json"]
)
def test_the_block_expiry_checkpoints_every_instance_in_the_block_with_ten_minutes_left(
    aws: LocalStack, name: str
) -> None:
    fleet = Fleet()
    first, second, elsewhere = fleet.launch(3, instance_type="p5.48xlarge")
    for instance_id in (first, second):
        place(instance_id, "capacity-block", BLOCK)
    place(elsewhere, "capacity-block", "cr-0999999999999999a")
    block()
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(block_warning(name), now=NOW)
    assert result["reservation_id"] == BLOCK and set(result["instances"]) == {first, second}
    assert result["notice"]["seconds_left"] == 600  # end 10:55, terminations from 10:25, event at 10:15
    sent = {c["CommandId"] for c in commands_sent()}
    assert len(sent) == 2
    for instance_id in (first, second):
        assert result["instances"][instance_id]["checkpoint"]["delivered"]
        record = deployed.runtime.ledger.get_item("interruption", instance_id)
        assert record is not None and record["lifecycle"] == "capacity-block" and record["command_id"] in sent
    again = deployed.run(block_warning(name), now=NOW)  # a duplicate delivery signals nobody twice
    assert again == result and len(commands_sent()) == 2


def test_the_block_expiry_in_report_only_mode_records_and_sends_nothing(aws: LocalStack) -> None:
    fleet = Fleet()
    (member,) = fleet.launch(instance_type="p5.48xlarge")
    place(member, "capacity-block", BLOCK)
    block()
    deployed = Deployed(aws, enforce=False)
    result = deployed.run(block_warning("capacity-block-expiration-warning.json"), now=NOW)
    assert result["status"] == "reported" and commands_sent() == []
    decisions = [d for d in deployed.runtime.ledger.query_kind("decision") if d["resource"] == member]
    assert decisions and decisions[0]["rule"] == "capacity-block-expiry"
    assert "Capacity Block cr-0a1b2c3d4e5f60718 ends" in decisions[0]["reasons"][0]
