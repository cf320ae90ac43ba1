"""Issue 45.4: a capacity event is checked against the reservation as EC2 reports it before anything is sent.

Through the real Spot handler on moto (EC2, SSM, DynamoDB, the emulator taught DescribeCapacityReservations by
``reserve``), with AWS's documented samples: an event that disagrees with EC2 (a forged end, a block EC2 does not have,
a termination hours ahead, another zone, a reservation that is not interruptible) is recorded as refused with its
reason, a finding says so, and no instance is signalled; the instances a block's expiry checkpoints are the ones EC2
lists in it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from governor.domain.decision import Finding
from governor_cli.demo.bootstrap import LocalStack
from governor_cli.testing.capacity import place
from tests.adapters.test_capacity_warnings import BLOCK, LENT, NOW, block, block_warning, lent, reservation_warning
from tests.adapters.test_spot_moto import Deployed, commands_sent, event
from tests.adapters.test_spot_moto import aws as aws  # the fixture
from tests.adapters.test_spot_recovery import Fleet

EXPIRY = "capacity-block-expiration-warning.json"


def findings(deployed: Deployed) -> list[Finding]:
    """Every finding the handler staged for publication (the outbox keeps each one it sends)."""
    return [Finding.model_validate(json.loads(i["finding"])) for i in deployed.runtime.ledger.query_kind("outbox")]


def decisions(deployed: Deployed, resource: str) -> list[dict[str, Any]]:
    return [d for d in deployed.runtime.ledger.query_kind("decision") if d["resource"] == resource]


def two_in_the_block(fleet: Fleet | None = None) -> list[str]:
    members = (fleet or Fleet()).launch(2, instance_type="p5.48xlarge")
    for instance_id in members:
        place(instance_id, "capacity-block", BLOCK)
    return members


def test_a_forged_expiry_for_a_block_that_ends_in_ten_days_signals_nobody(aws: LocalStack) -> None:
    """The issue's case: the event says the block ends in 40 minutes, EC2 says in ten days."""
    members = two_in_the_block()
    block(end="2026-12-11T10:55:00Z")
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(block_warning(EXPIRY, end="2026-12-01T10:55:00Z"), now=NOW)
    assert commands_sent() == []
    assert result["status"] == "refused" and result["mismatch"]
    assert "EC2 says 2026-12-11T10:55:00+00:00" in result["reason"]
    (refused,) = decisions(deployed, BLOCK)
    assert refused["verdict"] == "ignored" and refused["evidence"]["status"] == "refused"
    assert refused["evidence"]["ec2"]["end_date"] == "2026-12-11T10:55:00+00:00"
    assert all(decisions(deployed, i) == [] for i in members)  # no instance was even considered
    (told,) = findings(deployed)
    assert told.rule == "capacity-event-mismatch" and told.severity == "warning" and BLOCK in told.title


def test_an_expiry_agreeing_with_ec2_but_sent_ten_days_early_is_refused_on_the_functions_clock(
    aws: LocalStack,
) -> None:
    """A forger who copies the real end date and stamps the event 40 minutes before it is judged by the function's
    own clock, never by the time the event claims."""
    two_in_the_block()
    block(end="2026-12-11T10:55:00Z")
    deployed = Deployed(aws, enforce=True)
    forged = block_warning(EXPIRY, end="2026-12-11T10:55:00Z") | {"time": "2026-12-11T10:15:00Z"}
    result = deployed.run(forged, now=NOW)
    assert result["status"] == "refused" and "14440 minutes from now" in result["reason"]
    assert commands_sent() == []


@pytest.mark.parametrize(
    ("ec2", "why"),
    [
        (None, "EC2 has no capacity reservation cr-0a1b2c3d4e5f60718"),
        ({"ReservationType": "default"}, "is not a Capacity Block"),
        ({"State": "scheduled"}, "is scheduled, not an active block"),
    ],
    ids=["unknown block", "not a block", "not active"],
)
def test_an_expiry_about_a_block_ec2_does_not_report_as_ending_is_refused(
    aws: LocalStack, ec2: dict[str, Any] | None, why: str
) -> None:
    two_in_the_block()
    if ec2 is not None:
        block(**ec2)
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(block_warning(EXPIRY), now=NOW)
    assert result["status"] == "refused" and why in result["reason"]
    assert commands_sent() == []
    assert [f.rule for f in findings(deployed)] == ["capacity-event-mismatch"]


def test_a_late_expiry_is_refused_quietly(aws: LocalStack) -> None:
    """A retry after the block ended contradicts nothing: recorded as refused, nobody is told."""
    two_in_the_block()
    block(State="expired")
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(block_warning(EXPIRY), now=NOW + dt.timedelta(hours=1))
    assert result["status"] == "refused" and not result["mismatch"] and "already ended" in result["reason"]
    assert commands_sent() == [] and findings(deployed) == []


def test_the_block_expiry_checkpoints_only_the_instances_ec2_lists_in_the_block(aws: LocalStack) -> None:
    """EC2's record of the block decides who is signalled: a running p5 tagged for the fleet but in another block,
    or in none, is not, whatever the event's resources say."""
    fleet = Fleet()
    members = two_in_the_block(fleet)
    outside, unplaced = fleet.launch(2, instance_type="p5.48xlarge")
    place(outside, "capacity-block", "cr-0999999999999999a")
    block()
    deployed = Deployed(aws, enforce=True)
    warning = block_warning(EXPIRY)
    warning["resources"] += [f"arn:aws:ec2:us-east-1:123456789012:instance/{i}" for i in (outside, unplaced)]
    result = deployed.run(warning, now=NOW)
    assert set(result["instances"]) == set(members)
    assert len(commands_sent()) == 2
    assert decisions(deployed, outside) == [] and decisions(deployed, unplaced) == []


def _borrower() -> str:
    (borrower,) = Fleet().launch()
    place(borrower, "interruptible-capacity-reservation", LENT)
    return borrower


@pytest.mark.parametrize(
    ("ec2", "termination", "why"),
    [
        ({}, "2026-12-01T13:17:00Z", "is 10920s ahead: the warning comes two minutes before"),
        ({"AvailabilityZoneId": "use1-az6"}, "2026-12-01T10:17:00Z", "the event names zone use1-az1"),
        ({"Interruptible": False}, "2026-12-01T10:17:00Z", "is not interruptible"),
        (None, "2026-12-01T10:17:00Z", "EC2 has no capacity reservation cr-0f0e0d0c0b0a09080"),
    ],
    ids=["hours ahead", "another zone", "not interruptible", "unknown reservation"],
)
def test_a_reservation_warning_ec2_contradicts_signals_nobody(
    aws: LocalStack, ec2: dict[str, Any] | None, termination: str, why: str
) -> None:
    borrower = _borrower()
    if ec2 is not None:
        lent(**ec2)
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reservation_warning(borrower, termination), now=NOW)
    assert result["status"] == "refused" and why in result["reason"], result
    assert commands_sent() == []
    (refused,) = decisions(deployed, borrower)
    assert refused["verdict"] == "ignored" and refused["rule"] == "capacity-reservation-interruption"
    assert [f.rule for f in findings(deployed)] == ["capacity-event-mismatch"]
    assert deployed.runtime.ledger.get_item("interruption", borrower) is None


def test_a_reservation_warning_ec2_agrees_with_checkpoints(aws: LocalStack) -> None:
    borrower = _borrower()
    lent()
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reservation_warning(borrower), now=NOW + dt.timedelta(seconds=5))
    assert result["status"] == "acted" and result["checkpoint"]["delivered"] and len(commands_sent()) == 1


def test_the_spot_warnings_two_minute_path_reads_no_reservation(aws: LocalStack) -> None:
    """Only capacity events pay for the reservation read: a Spot warning's path to SendCommand is unchanged."""
    (instance_id,) = Fleet().launch()
    deployed = Deployed(aws, enforce=True)
    assert deployed.run(event("interruption-warning.json", instance_id))["checkpoint"]["delivered"]
    assert deployed.ports.reservations.calls == 0 and len(commands_sent()) == 1


def test_an_unknown_reservation_id_reads_as_no_reservation_not_as_an_error() -> None:
    """EC2 answers ``InvalidCapacityReservationId.NotFound`` for an id it does not have (moto lacks the call, so
    botocore's Stubber stands in): the capacity event naming it is refused, not retried for ever; other errors, and a
    batch of ids, still raise."""
    import boto3
    from botocore.exceptions import ClientError
    from botocore.stub import Stubber

    from governor.adapters.capacity import CapacityReservations

    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
        try:
            found: object = CapacityReservations(ec2=ec2).reservations([BLOCK])
        except ClientError as error:
            found = error
        assert found == {}
        stub.add_client_error("describe_capacity_reservations", "RequestLimitExceeded")
        with pytest.raises(ClientError):
            CapacityReservations(ec2=ec2).reservations([BLOCK])
        stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
        with pytest.raises(ClientError):
            CapacityReservations(ec2=ec2).reservations([BLOCK, LENT])
