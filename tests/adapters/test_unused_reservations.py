"""On-Demand Capacity Reservations and Capacity Blocks with capacity no instance runs in (issue 38, item 4): read in
the idle sweep through the real adapter, answered with AWS's documented DescribeCapacityReservations response
(``tests/fixtures/capacity/describe-capacity-reservations.json``; moto does not implement the call), recorded every
sweep, a finding once a day, and in the report's "Paid for, unused" section with dollars a day at the reservation's
rate. Report-only: nothing is cancelled, whatever ``enforce`` says.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from governor.adapters.capacity import CapacityReservations
from governor.adapters.ledger import DynamoLedger
from governor.idle.handler import handle
from governor.policy import parse_policy
from governor.report.handler import ledger_items
from governor.report.sections.cost import cost_section
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event

SAMPLE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "capacity" / "describe-capacity-reservations.json").read_text()
)
ACTIVE = [{"Name": "state", "Values": ["active"]}]


def _gpu_sample() -> dict[str, Any]:
    """AWS's example with its first (active, open, 1 of 1 unused) reservation made a p4d.24xlarge one of 2 of 3
    unused and owned by a team, and a Capacity Block added with 1 of 2 unused (changed fields only)."""
    sample = copy.deepcopy(SAMPLE)
    first = sample["CapacityReservations"][0]
    first.update(
        InstanceType="p4d.24xlarge",
        TotalInstanceCount=3,
        AvailableInstanceCount=2,
        Tags=[{"Key": "owner", "Value": "ana@example.com"}, {"Key": "team", "Value": "vision"}],
    )
    block = copy.deepcopy(first)
    block.update(
        CapacityReservationId="cr-0b10c4000000000aa",
        InstanceType="p5.48xlarge",
        ReservationType="capacity-block",
        InstanceMatchCriteria="targeted",
        TotalInstanceCount=2,
        AvailableInstanceCount=1,
        EndDateType="limited",
        EndDate=T0 + dt.timedelta(days=1),
        Tags=[],
    )
    sample["CapacityReservations"].append(block)
    return sample


def _reader(response: dict[str, Any], times: int) -> CapacityReservations:
    client = boto3.client("ec2", region_name="us-east-1")
    stub = Stubber(client)
    for _ in range(times):
        stub.add_response("describe_capacity_reservations", response, {"Filters": ACTIVE})
    stub.activate()
    return CapacityReservations("us-east-1", client)


def _runtime(local: Any, **idle: Any) -> Runtime:
    return Runtime(
        policy=parse_policy(
            {
                "idle": {"launch_grace_minutes": 0, **idle},
                "fleet": {"gpu_families": ["p", "g"]},
                "pricing": {"prices": {"p4d.24xlarge": {"on_demand": 21.96, "gpus": 8}}},
            }
        ),
        ledger=DynamoLedger(local.ledger_table, region="us-east-1"),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def test_aws_documented_response_has_no_gpu_reservation_to_report() -> None:
    """As documented: an a1.medium reservation (not a GPU type) and a cancelled m5.large one: nothing reported."""
    with mock_aws():
        local = create_shared("us-east-1")
        runtime = _runtime(local)
        aws = _aws()
        aws.reservations = _reader(SAMPLE, 2)
        handle(_event(T0, "sweep-0"), runtime, aws)
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        assert not [i for i in items if str(i.get("resource", "")).startswith("cr-")]
        reservations = aws.reservations.active()
        assert [r.id for r in reservations] == ["cr-1234abcd56EXAMPLE ", "cr-abcdEXAMPLE9876ef "]
        assert (reservations[0].available, reservations[0].match, reservations[1].state) == (1, "open", "cancelled")


@pytest.mark.parametrize("enforce", [False, True])
def test_unused_gpu_reservations_are_reported_with_their_cost_a_day_and_owner(enforce: bool) -> None:
    with mock_aws():
        local = create_shared("us-east-1")
        runtime = _runtime(local, enforce=enforce)
        aws = _aws()
        aws.reservations = _reader(_gpu_sample(), 4)
        sink = runtime.sink
        assert isinstance(sink, MemorySink)
        sweeps = [T0 + dt.timedelta(minutes=15 * step) for step in range(4)]  # four sweeps, 15 minutes apart
        for step, at in enumerate(sweeps):
            handle(_event(at, f"sweep-{step}"), runtime, aws)
        # T0 follows the wall clock (moto's launch times do), so the sweeps may straddle midnight UTC: one id per day
        days = len({at.date() for at in sweeps})

        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        odcr = [i for i in items if i.get("resource") == "cr-1234abcd56EXAMPLE "]
        assert len(odcr) == 4 and all(a.get("enforced") is False for d in odcr for a in d.get("actions") or [])
        evidence = odcr[-1]["evidence"]
        assert evidence["usd_per_day"] == round(21.96 * 24 * 2, 2) and evidence["owner"] == "ana@example.com"
        assert any("2 of 3 instances unused" in r for r in odcr[-1]["reasons"])

        # one finding id per reservation and day: the notifier delivers each id once, however many sweeps stage it
        published = {f.id: f for f in sink.findings if f.resource.startswith("cr-")}.values()
        assert sorted(f.resource for f in published) == sorted(["cr-0b10c4000000000aa", "cr-1234abcd56EXAMPLE "] * days)
        odcr_finding = [f for f in published if f.resource == "cr-1234abcd56EXAMPLE "][-1]
        assert odcr_finding.owner == "ana@example.com" and odcr_finding.team == "vision"
        assert "$1,054.08/day" in odcr_finding.title and not odcr_finding.enforced

        section = cost_section(items, runtime.policy, T0 - dt.timedelta(hours=1), T0 + dt.timedelta(hours=2))
        rows = {r["reservation_id"]: r for r in section.paid_unused.rows}
        odcr_row, block_row = rows["cr-1234abcd56EXAMPLE "], rows["cr-0b10c4000000000aa"]
        # four sweeps x 15 minutes x 2 empty instances = 2 instance-hours = 16 GPU-hours, at $21.96 an hour
        assert odcr_row["idle_gpu_hours"] == 16.0 and odcr_row["idle_usd"] == round(2 * 21.96, 2)
        assert odcr_row["usd_per_day"] == 1054.08 and odcr_row["owner"] == "ana"  # the one name (issue 48)
        assert odcr_row["purchase"] == "capacity-reservation"
        # the block: prepaid, its fee not reported by EC2: hours counted, dollars not guessed
        assert block_row["purchase"] == "capacity-block" and block_row["idle_usd"] == 0.0
        assert block_row["usd_per_day"] is None and block_row["ends_at"] == (T0 + dt.timedelta(days=1)).isoformat()
        assert section.paid_unused_usd == odcr_row["idle_usd"]


def test_unused_reservations_off_reads_nothing() -> None:
    with mock_aws():
        local = create_shared("us-east-1")
        runtime = _runtime(local, unused_reservations="off")
        aws = _aws()
        aws.reservations = _reader(_gpu_sample(), 0)  # any call would fail the stub
        handle(_event(T0, "sweep-0"), runtime, aws)
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        assert not [i for i in items if str(i.get("resource", "")).startswith("cr-")]


def test_offer_sends_unused_capacity_to_the_configured_team() -> None:
    """``reserved_capacity: offer``: each GPU reservation's unused capacity is offered to the policy's team (not the
    reservation's own team tag), with what is free, where and until when; once a day; nothing is cancelled."""
    with mock_aws():
        local = create_shared("us-east-1")
        runtime = Runtime(
            policy=parse_policy(
                {
                    "idle": {
                        "launch_grace_minutes": 0,
                        "reserved_capacity": "offer",
                        "offer_capacity_to": "ml-platform",
                    },
                    "fleet": {"gpu_families": ["p", "g"]},
                    "notifications": {"teams": {"ml-platform": {"slack_secret_name": "governor/ml-platform-slack"}}},
                }
            ),
            ledger=DynamoLedger(local.ledger_table, region="us-east-1"),
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region="us-east-1",
        )
        aws = _aws()
        aws.reservations = _reader(_gpu_sample(), 2)
        handle(_event(T0, "sweep-0"), runtime, aws)
        handle(_event(T0 + dt.timedelta(minutes=15), "sweep-1"), runtime, aws)
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        offers = {i["resource"]: i for i in items if i.get("rule") == "idle.capacity-offered"}
        days = len({T0.date(), (T0 + dt.timedelta(minutes=15)).date()})
        assert len([i for i in items if i.get("rule") == "idle.capacity-offered"]) == 2 * days
        odcr, block = offers["cr-1234abcd56EXAMPLE "], offers["cr-0b10c4000000000aa"]
        assert "2 of 3 x p4d.24xlarge in eu-west-1a free until the reservation ends" in odcr["reasons"][0]
        assert f"free until {T0 + dt.timedelta(days=1):%Y-%m-%d %H:%M} UTC" in block["reasons"][0]
        assert odcr["evidence"]["offered_to"] == "ml-platform"
        sink = runtime.sink
        assert isinstance(sink, MemorySink)
        offered = [f for f in sink.findings if f.rule == "idle.capacity-offered"]
        assert {f.team for f in offered} == {"ml-platform"} and len({f.id for f in offered}) == 2 * days


def test_an_offer_and_the_unused_capacity_decision_of_one_sweep_are_both_recorded() -> None:
    """The sweep that offers a reservation's unused capacity also records that capacity as unused (the report sums
    those hours); one decision must not overwrite the other in the ledger, though both are about one reservation in
    one sweep."""
    with mock_aws():
        local = create_shared("us-east-1")
        runtime = _runtime(local)
        runtime.policy = parse_policy(
            {
                "idle": {"launch_grace_minutes": 0, "reserved_capacity": "offer", "offer_capacity_to": "ml-platform"},
                "fleet": {"gpu_families": ["p", "g"]},
                "notifications": {"teams": {"ml-platform": {"slack_secret_name": "governor/ml-platform-slack"}}},
            }
        )
        aws = _aws()
        aws.reservations = _reader(_gpu_sample(), 1)
        handle(_event(T0, "sweep-0"), runtime, aws)
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        for reservation in ("cr-1234abcd56EXAMPLE ", "cr-0b10c4000000000aa"):
            rules = sorted(i["rule"] for i in items if i.get("resource") == reservation)
            assert rules == ["idle.capacity-offered", "idle.unused-capacity"], reservation


def test_an_unused_reservation_finding_has_its_money_at_stake_and_ranks_by_it() -> None:
    """Issue 48: the costliest problem ranked 16th: the unused reservation's finding had no "at stake", so it sorted
    below a $24/day idle instance. Through the real sweep (moto + the documented response) and the real report: its
    at stake is the "Paid for, unused" row's $/day, in the one format, and it leads "Needs attention"."""
    from governor.report.build import build_report
    from governor.report.render.format import todo_items
    from governor.report.render.html_page import render_html

    with mock_aws():
        local = create_shared("us-east-1")
        runtime = _runtime(local)
        aws = _aws()
        aws.reservations = _reader(_gpu_sample(), 2)
        for step in range(2):
            handle(_event(T0 + dt.timedelta(minutes=15 * step), f"sweep-{step}"), runtime, aws)
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
    cheap = {  # an idle g5.xlarge warned an hour ago: $24.14/day at stake
        "kind": "decision",
        "policy": "idle",
        "resource": "i-0cheap",
        "at": (T0 - dt.timedelta(hours=1)).isoformat(),
        "rule": "idle.warned",
        "severity": "warning",
        "reasons": ["idle for 2 h"],
        "actions": [],
        "evidence": {"status": "warned", "instance_type": "g5.xlarge"},
    }
    session = {
        "kind": "session",
        "instance_id": "i-0cheap",
        "instance_type": "g5.xlarge",
        "gpus": 1,
        "lifecycle": "on-demand",
        "owner": "bo",
        "team": "vision",
        "start": (T0 - dt.timedelta(hours=3)).isoformat(),
        "end": None,
        "price_per_hour": 1.006,
    }
    end = T0 + dt.timedelta(hours=1)
    report = build_report(
        kind="daily",
        start=end - dt.timedelta(days=1),
        end=end,
        policy=runtime.policy,
        audit={},
        ledger_items=[*items, cheap, session],
        now=end,
    )
    reservation = next(f for f in report.open_findings if f.resource == "cr-1234abcd56EXAMPLE ")
    assert reservation.usd_per_day == round(21.96 * 24 * 2, 2) == 1054.08
    row = next(r for r in report.cost.paid_unused.rows if r["reservation_id"] == "cr-1234abcd56EXAMPLE ")
    assert row["usd_per_day"] == reservation.usd_per_day
    order = [f.resource for f in report.open_findings]
    assert order.index("cr-1234abcd56EXAMPLE ") < order.index("i-0cheap")
    assert "$1,054.08/day at stake" in todo_items(report, limit=1)[0]
    page = render_html(report)
    assert "<td class='num' data-label='At stake'>$1,054.08/day</td>" in page
    assert "<td class='num' data-label='At stake'>$24.14/day</td>" in page
