"""Issue 49.3: the capacity lifecycle through the real Spot handler on moto, from AWS's documented samples.

A Capacity Block delivered: its end recorded on each instance EC2 lists in it and its owners told when it ends. A
reservation's state: recorded, the team told when capacity will not come as planned (delayed, failed, unsupported) or
has come (active). Lent capacity reclaimed: recorded, the source's owner told. Each only once the reservation EC2
reports agrees with the event; nothing is ever sent to an instance.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from governor_cli.demo.bootstrap import LocalStack
from governor_cli.testing.capacity import delivered, place, reservation_state, reserve
from tests.adapters.test_capacity_checks import decisions, findings
from tests.adapters.test_spot_moto import Deployed, commands_sent
from tests.adapters.test_spot_moto import aws as aws  # the fixture
from tests.adapters.test_spot_recovery import REGION, Fleet

BLOCK = "cr-0b1c2d3e4f5a60718"
FUTURE = "cr-0c2d3e4f5a6b70819"
SOURCE = "cr-0d3e4f5a6b7c8091a"
AT = "2026-12-01T11:30:00Z"
NOW = dt.datetime(2026, 12, 1, 11, 30, 5, tzinfo=dt.UTC)
OWNER_TAGS = [{"Key": "owner", "Value": "lee@example.com"}, {"Key": "team", "Value": "nlp"}]


def reservation(reservation_id: str, **changes: Any) -> None:
    reserve(
        {
            "CapacityReservationId": reservation_id,
            "OwnerId": "123456789012",
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": f"{REGION}a",
            "AvailabilityZoneId": "use1-az1",
            "State": "active",
            "ReservationType": "default",
            "InstanceMatchCriteria": "targeted",
            "TotalInstanceCount": 2,
            "AvailableInstanceCount": 1,
            "EndDateType": "unlimited",
            "Tags": OWNER_TAGS,
            **changes,
        },
        region=REGION,
    )


def block(end: str = "2026-12-03T11:30:00Z", **changes: Any) -> None:
    changes = {"ReservationType": "capacity-block", "EndDateType": "limited", "EndDate": end, **changes}
    reservation(BLOCK, **changes)


def delivery(name: str, end: str = "2026-12-03T11:30:00Z") -> dict[str, Any]:
    return delivered(
        name,
        {
            "[Capacity Reservation Id]": BLOCK,
            "[Customer Account ID]": "123456789012",
            "[Current time]": AT,
            "[ODCR ARN]": f"arn:aws:ec2:{REGION}:123456789012:capacity-reservation/{BLOCK}",
            "[ODCR ID]": BLOCK,
            "[ODCR End Date]": end,
        },
        region=REGION,
    )


def reclamation(**detail: Any) -> dict[str, Any]:
    return delivered(
        "interruptible-reclamation-completed.json",
        {
            "[source Capacity Reservation Owner Account ID]": "123456789012",
            "[Current time in yyyy-mm-ddThh:mm:ssZ]": AT,
            "source_cr_arn": f"arn:aws:ec2:{REGION}:123456789012:capacity-reservation/{SOURCE}",
        },
        {
            "sourceCapacityReservationId": SOURCE,
            "instanceType": "p5.48xlarge",
            "availabilityZoneId": "use1-az1",
            "TotalInstanceCount": "2",
            "ReclaimedInstanceCount": "1",
            "targetInstanceCount": "0",
            **detail,
        },
        region=REGION,
    )


@pytest.mark.parametrize("name", ["capacity-block-delivered.json", "capacity-block-reservation-delivered.json"])
def test_a_delivered_block_records_its_end_on_its_instances_and_tells_their_owners(aws: LocalStack, name: str) -> None:
    fleet = Fleet()
    (member,) = fleet.launch(instance_type="p5.48xlarge", tags={"owner": "ana@example.com", "team": "vision"})
    (elsewhere,) = fleet.launch(instance_type="p5.48xlarge")
    place(member, "capacity-block", BLOCK)
    block()
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(delivery(name), now=NOW)
    assert result["status"] == "recorded" and result["told"] == ["ana@example.com/vision"]
    (decision,) = decisions(deployed, BLOCK)
    assert decision["verdict"] == "act" and decision["rule"] == "capacity-block-delivered"
    assert decision["evidence"]["instances"] == [member]
    kept = deployed.runtime.ledger.get_item("capacity-block", member)
    assert kept is not None and kept["reservation_id"] == BLOCK and kept["end_date"] == "2026-12-03T11:30:00+00:00"
    assert kept["terminates_at"] == "2026-12-03T11:00:00+00:00"
    assert deployed.runtime.ledger.get_item("capacity-block", elsewhere) is None
    (told,) = findings(deployed)
    assert (told.owner, told.team, told.severity) == ("ana@example.com", "vision", "info")
    assert "until 2026-12-03 11:30 UTC" in told.detail and "from 11:00 UTC" in told.detail and member in told.detail
    assert commands_sent() == []


def test_a_block_delivered_before_any_instance_runs_in_it_tells_the_blocks_own_owner(aws: LocalStack) -> None:
    block()
    deployed = Deployed(aws, enforce=False)
    result = deployed.run(delivery("capacity-block-delivered.json"), now=NOW)
    assert result["status"] == "recorded" and result["told"] == ["lee@example.com/nlp"]
    (told,) = findings(deployed)
    assert "no instance runs in it yet" in told.detail and not told.enforced


def test_a_delivery_ec2_contradicts_records_nothing_on_any_instance(aws: LocalStack) -> None:
    (member,) = Fleet().launch(instance_type="p5.48xlarge")
    place(member, "capacity-block", BLOCK)
    block(end="2026-12-02T11:30:00Z")
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(delivery("capacity-block-delivered.json", end="2026-12-09T11:30:00Z"), now=NOW)
    assert result["status"] == "refused" and "EC2 says 2026-12-02T11:30:00+00:00" in result["reason"]
    assert deployed.runtime.ledger.get_item("capacity-block", member) is None
    assert [f.rule for f in findings(deployed)] == ["capacity-event-mismatch"]


@pytest.mark.parametrize(
    ("state", "severity"),
    [
        ("scheduled", None),
        ("active", "info"),
        ("delayed", "warning"),
        ("unsupported", "warning"),
        ("failed", "warning"),
        ("expired", None),
    ],
)
def test_each_reservation_state_is_recorded_and_the_team_told_where_it_matters(
    aws: LocalStack, state: str, severity: str | None
) -> None:
    reservation(FUTURE, State=state)
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reservation_state(state, FUTURE, AT, region=REGION), now=NOW)
    assert result["status"] == "recorded", result
    (decision,) = decisions(deployed, FUTURE)
    assert decision["rule"] == "capacity-reservation-state" and decision["evidence"]["state"] == state
    told = findings(deployed)
    if severity is None:
        assert told == [] and decision["verdict"] == "ok"
    else:
        (finding,) = told
        assert (finding.team, finding.severity, finding.rule) == ("nlp", severity, "capacity-reservation-state")
        assert f"is {state}" in finding.detail


def test_a_state_ec2_has_already_moved_past_agrees_but_one_it_never_had_is_refused(aws: LocalStack) -> None:
    reservation(FUTURE, State="active")
    deployed = Deployed(aws, enforce=True)
    late = deployed.run(reservation_state("scheduled", FUTURE, AT, region=REGION), now=NOW)
    assert late["status"] == "recorded"
    forged = deployed.run(reservation_state("failed", FUTURE, AT, region=REGION) | {"id": "forged"}, now=NOW)
    assert forged["status"] == "refused" and "EC2 says active" in forged["reason"]
    assert [f.rule for f in findings(deployed)] == ["capacity-event-mismatch"]
    unknown = deployed.run(reservation_state("delayed", SOURCE, AT, region=REGION) | {"id": "unknown"}, now=NOW)
    assert unknown["status"] == "refused" and "EC2 has no capacity reservation" in unknown["reason"]


def test_a_state_event_whose_detail_type_and_state_differ_is_parked_in_the_dlq(aws: LocalStack) -> None:
    event = reservation_state("active", FUTURE, AT, region=REGION)
    event["detail"]["state"] = "failed"
    deployed = Deployed(aws, enforce=True)
    assert deployed.run(event, now=NOW)["status"] == "rejected"
    assert decisions(deployed, FUTURE) == []


def test_reclaimed_capacity_is_recorded_and_its_owner_told(aws: LocalStack) -> None:
    reservation(SOURCE)
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reclamation(), now=NOW)
    assert result["status"] == "recorded" and result["told"] == ["lee@example.com/nlp"]
    (decision,) = decisions(deployed, SOURCE)
    assert decision["rule"] == "capacity-reclamation" and decision["evidence"]["reclaimed"] == 1
    (told,) = findings(deployed)
    assert told.severity == "info" and "1 instance(s) of p5.48xlarge" in told.detail
    assert json.loads(told.model_dump_json())["resource"] == SOURCE


@pytest.mark.parametrize(
    ("ec2", "detail", "why"),
    [
        ({"OwnerId": "210987654321"}, {}, "belongs to account 210987654321"),
        ({}, {"instanceType": "g6e.xlarge"}, "the event names g6e.xlarge"),
        ({"Interruptible": True}, {}, "is itself interruptible"),
    ],
    ids=["another account's", "another type", "not a source"],
)
def test_a_reclamation_ec2_contradicts_is_refused(
    aws: LocalStack, ec2: dict[str, Any], detail: dict[str, Any], why: str
) -> None:
    reservation(SOURCE, **ec2)
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(reclamation(**detail), now=NOW)
    assert result["status"] == "refused" and why in result["reason"]
    assert [f.rule for f in findings(deployed)] == ["capacity-event-mismatch"]
