"""Capacity Blocks and capacity reservations in the idle sweep, on moto: read with the instance, never stopped for
savings by the shipped policy, their idle GPU-hours reported as paid for, unused with the block's end.

moto reports ``InstanceLifecycle`` and ``CapacityReservationId`` from its instance model but cannot launch into a
Capacity Block, and does not implement DescribeCapacityReservations: the tests set the two fields on moto's instance
as EC2 reports them for an instance in a block, and read the block through a stubbed EC2 client answering in
DescribeCapacityReservations' documented shape.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.ec2.models import ec2_backends

from governor.adapters.capacity import CapacityReservations
from governor.adapters.ec2 import Ec2Reader, to_instance
from governor.adapters.ledger import DynamoLedger
from governor.domain.capacity import Reservation, idle_hold, purchase_model
from governor.idle.handler import handle
from governor.policy import parse_policy
from governor.report.handler import ledger_items
from governor.report.sections.cost import cost_section
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _state

BLOCK = "cr-0a1b2c3d4e5f60718"
BLOCK_END = T0 + dt.timedelta(days=2)


class Blocks:
    """DescribeCapacityReservations as the real adapter reads it, answered in AWS's response shape."""

    def __init__(self, end: dt.datetime = BLOCK_END) -> None:
        self.client = boto3.client("ec2", region_name="us-east-1")
        self.stub = Stubber(self.client)
        self.end = end

    def response(self) -> dict[str, Any]:
        """The block as DescribeCapacityReservations describes it."""
        return {
            "CapacityReservationId": BLOCK,
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": "us-east-1a",
            "State": "active",
            "ReservationType": "capacity-block",
            "InstanceMatchCriteria": "targeted",
            "TotalInstanceCount": 1,
            "AvailableInstanceCount": 0,
            "EndDate": self.end,
        }

    def reader(self, times: int) -> CapacityReservations:
        for _ in range(times):
            self.stub.add_response(
                "describe_capacity_reservations",
                {"CapacityReservations": [self.response()]},
                {"CapacityReservationIds": [BLOCK]},
            )
        self.stub.activate()
        return CapacityReservations("us-east-1", self.client)


def _in_block(instance_id: str, lifecycle: str = "capacity-block") -> None:
    instance = ec2_backends["123456789012"]["us-east-1"].get_instance(instance_id)
    instance.lifecycle = lifecycle
    instance.capacity_reservation_id = BLOCK  # rendered by moto as CapacityReservationId


def _runtime(local: Any, **idle: Any) -> Runtime:
    settings = {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, **idle}
    return Runtime(
        policy=parse_policy({"idle": settings, "fleet": {"gpu_families": ["p", "g"]}}),
        ledger=DynamoLedger(local.ledger_table, region="us-east-1"),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def _idle_in_block() -> tuple[Any, str, Runtime]:
    """Inside ``mock_aws``: one idle p5 in the Capacity Block, and a runtime on the emulated ledger."""
    local = create_shared("us-east-1")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (block_id,) = _launch(ec2, "p5.48xlarge")
    _in_block(block_id)
    _metrics(block_id, 0.2)
    return ec2, block_id, _runtime(local)


def test_the_ec2_adapter_reads_every_purchase_model_as_ec2_reports_it() -> None:
    raw = {"InstanceId": "i-0abc12345678", "InstanceType": "p5.48xlarge", "State": {"Name": "running"}}
    assert to_instance(raw).lifecycle == "on-demand"
    block = to_instance({**raw, "InstanceLifecycle": "capacity-block", "CapacityReservationId": BLOCK})
    assert block.lifecycle == "capacity-block" and block.capacity_reservation_id == BLOCK
    lent = to_instance({**raw, "InstanceLifecycle": "interruptible-capacity-reservation"})
    assert lent.lifecycle == "interruptible-capacity-reservation"
    assert to_instance({**raw, "InstanceLifecycle": "something-new"}).lifecycle == "unknown"
    odcr = to_instance(
        {
            **raw,
            "CapacityReservationId": "cr-0f",
            "CapacityReservationSpecification": {"CapacityReservationPreference": "open"},
        }
    )
    assert purchase_model(odcr).kind == "capacity-reservation" and odcr.capacity_reservation_preference == "open"


def test_only_an_open_reservation_may_be_stopped_and_only_when_the_policy_says_so() -> None:
    raw = {"InstanceId": "i-0abc12345678", "InstanceType": "p5.48xlarge", "CapacityReservationId": "cr-0f"}
    base = to_instance(raw)
    open_one = Reservation("cr-0f", "p5.48xlarge", match="open")
    targeted = Reservation("cr-0f", "p5.48xlarge", match="targeted")
    block = Reservation("cr-0f", "p5.48xlarge", reservation_type="capacity-block", end_date=BLOCK_END)
    from dataclasses import replace

    assert idle_hold(purchase_model(replace(base, reservation=open_one)), "stop_if_open") is None
    assert idle_hold(purchase_model(replace(base, reservation=open_one)), "report")
    assert idle_hold(purchase_model(replace(base, reservation=targeted)), "stop_if_open")
    held = idle_hold(purchase_model(replace(base, reservation=block)), "stop_if_open")
    assert held and "Capacity Block cr-0f" in held and BLOCK_END.strftime("%Y-%m-%d %H:%M") in held
    assert idle_hold(purchase_model(base), "stop_if_open"), "an unread reservation is held as targeted"


@pytest.mark.parametrize("enforce", [False, True])
def test_an_idle_capacity_block_instance_is_never_stopped_and_reported_as_paid_for_unused(enforce: bool) -> None:
    with mock_aws():
        local = create_shared("us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        block_id, plain = _launch(ec2, "p5.48xlarge", 2)
        _in_block(block_id)
        for instance_id in (block_id, plain):
            _metrics(instance_id, 0.2)
        runtime = _runtime(local, enforce=enforce)
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        aws.reservations = Blocks().reader(times=4)
        for step in range(4):  # warned, then three sweeps past the warning period
            handle(_event(T0 + dt.timedelta(minutes=30 * step), f"sweep-{step}"), runtime, aws)

        assert _state(ec2, block_id) == "running"
        if enforce:
            assert _state(ec2, plain) == "stopped"  # the same idleness On-Demand is reclaimed
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        decisions = [i for i in items if i.get("resource") == block_id and i.get("policy") == "idle"]
        assert decisions and all(
            a.get("type") not in ("stop", "terminate") for d in decisions for a in d.get("actions") or []
        )
        purchase = decisions[-1]["evidence"]["purchase"]
        assert purchase == {
            "kind": "capacity-block",
            "lifecycle": "capacity-block",
            "reservation_id": BLOCK,
            "ends_at": BLOCK_END.isoformat(),
        }
        assert any("paid for, unused" in r for d in decisions for r in d.get("reasons") or [])

        section = cost_section(items, runtime.policy, T0 - dt.timedelta(hours=3), T0 + dt.timedelta(hours=3))
        (row,) = section.paid_unused.rows
        assert row["instance_id"] == block_id and row["reservation_id"] == BLOCK
        assert row["ends_at"] == BLOCK_END.isoformat() and row["idle_gpu_hours"] > 0
        assert section.paid_unused_gpu_hours == row["idle_gpu_hours"]
        assert block_id not in {r["instance_id"] for r in section.offenders.rows if r.get("would_reclaim_usd")}


def test_a_sweep_reads_the_reservations_once_and_an_instances_block_comes_from_that_read() -> None:
    """With unused reservations reported (the default), the sweep's one read of every active reservation also
    answers the instances' reservation ids: one DescribeCapacityReservations a sweep; only an id that read did not
    hold (a block no longer active) is asked for by id."""
    with mock_aws():
        _, block_id, runtime = _idle_in_block()
        blocks = Blocks()
        active = [{"Name": "state", "Values": ["active"]}]
        blocks.stub.add_response(
            "describe_capacity_reservations", {"CapacityReservations": [blocks.response()]}, {"Filters": active}
        )
        blocks.stub.add_response("describe_capacity_reservations", {"CapacityReservations": []}, {"Filters": active})
        blocks.stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [blocks.response() | {"State": "expired"}]},
            {"CapacityReservationIds": [BLOCK]},
        )
        blocks.stub.activate()
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        aws.reservations = reader = CapacityReservations("us-east-1", blocks.client)

        handle(_event(T0, "sweep-0"), runtime, aws)
        assert reader.calls == 1
        handle(_event(T0 + dt.timedelta(minutes=30), "sweep-1"), runtime, aws)
        assert reader.calls == 3  # the active read, then the one id it did not hold
        blocks.stub.assert_no_pending_responses()
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        decisions = [i for i in items if i.get("resource") == block_id and i.get("policy") == "idle"]
        assert [d["evidence"]["purchase"]["ends_at"] for d in decisions[-2:]] == [BLOCK_END.isoformat()] * 2


def test_without_the_reservation_read_the_lifecycle_alone_holds_the_block() -> None:
    with mock_aws():
        ec2, block_id, runtime = _idle_in_block()
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        aws.reservations = CapacityReservations("us-east-1")  # moto: DescribeCapacityReservations not implemented
        for step in range(3):
            handle(_event(T0 + dt.timedelta(minutes=30 * step), f"sweep-{step}"), runtime, aws)
        assert _state(ec2, block_id) == "running"


OFFER = {
    "idle": {
        "enforce": True,
        "launch_grace_minutes": 0,
        "max_fleet_percent": 100,
        "reserved_capacity": "offer",
        "offer_capacity_to": "ml-platform",
    },
    "fleet": {"gpu_families": ["p", "g"]},
    "notifications": {"teams": {"ml-platform": {"slack_secret_name": "governor/ml-platform-slack"}}},
}


def test_offer_tells_the_configured_team_the_block_is_free_until_it_ends_and_stops_nothing() -> None:
    """``reserved_capacity: offer``: the idle block instance's capacity is offered to the policy's team (never one a
    tag names), once a UTC day, as a decision with its reason and a finding routed to that team; nothing stops."""
    with mock_aws():
        local = create_shared("us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        [block_id] = _launch(ec2, "p5.48xlarge", 1)
        _in_block(block_id)
        _metrics(block_id, 0.2)
        runtime = Runtime(
            policy=parse_policy(OFFER),
            ledger=DynamoLedger(local.ledger_table, region="us-east-1"),
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region="us-east-1",
        )
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        aws.reservations = Blocks().reader(times=4)
        sweeps = [T0 + dt.timedelta(minutes=30 * step) for step in range(4)]
        for step, at in enumerate(sweeps):
            handle(_event(at, f"sweep-{step}"), runtime, aws)

        assert _state(ec2, block_id) == "running"
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        offers = [i for i in items if i.get("rule") == "idle.capacity-offered"]
        # first offered when warned, then once per UTC day the later sweeps touch (T0 follows the wall clock)
        first = min(dt.datetime.fromisoformat(o["evidence"]["judged_at"]) for o in offers)
        assert len(offers) == len({at.date() for at in sweeps if at >= first})
        offer = offers[0]
        assert offer["resource"] == BLOCK and offer["evidence"]["offered_to"] == "ml-platform"
        assert offer["evidence"]["free_until"] == BLOCK_END.isoformat()
        assert f"free until {BLOCK_END:%Y-%m-%d %H:%M} UTC" in offer["reasons"][0]
        assert "offered to team ml-platform (idle.reserved_capacity: offer)" in offer["reasons"][1]
        assert all(a.get("enforced") is False for a in offer.get("actions") or [])
        sink = runtime.sink
        assert isinstance(sink, MemorySink)
        published = [f for f in sink.findings if f.rule == "idle.capacity-offered"]
        assert len({f.id for f in published}) == len(offers)
        assert all(f.team == "ml-platform" for f in published)  # the instance's team tag (vision) is not asked
        assert published[0].title.startswith("Free GPU capacity for team ml-platform: idle instance")


def test_offer_needs_a_configured_team() -> None:
    from governor.policy import PolicyError

    with pytest.raises(PolicyError, match="offer_capacity_to must name the team"):
        parse_policy({"idle": {"reserved_capacity": "offer"}})
    with pytest.raises(PolicyError, match=r"'ops' is not a team of notifications\.teams"):
        parse_policy({"idle": {"reserved_capacity": "offer", "offer_capacity_to": "ops"}})


def _about_capacity(reasons: list[str]) -> list[str]:
    """The reasons about how the capacity was bought and what stopping it risks (not the metrics' figures)."""
    words = ("runs in", "restart risk", "HyperPod", "scarce_action", "paid for")
    return [part for r in reasons for part in r.split("; ") if any(w in part for w in words)]


def test_explain_gives_the_sweeps_decision_for_block_and_scarce_instances() -> None:
    """``governor explain --instances``: a Capacity Block instance and a scarce On-Demand p5 (``scarce_action:
    warn``) get the verdict, rule, purchase, restart risk, actions and capacity reasons the sweep records for them."""
    from governor.adapters.capacity import to_reservation
    from governor.idle.explain import explain_instances

    with mock_aws():
        local = create_shared("us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        block_id, scarce = _launch(ec2, "p5.48xlarge", 2)
        _in_block(block_id)
        for instance_id in (block_id, scarce):
            _metrics(instance_id, 0.2)
        runtime = _runtime(local, scarce_action="warn")
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        blocks = Blocks()
        aws.reservations = blocks.reader(times=4)
        sweeps = [T0 + dt.timedelta(minutes=30 * step) for step in range(4)]
        for step, at in enumerate(sweeps):
            handle(_event(at, f"sweep-{step}"), runtime, aws)
        assert _state(ec2, block_id) == _state(ec2, scarce) == "running"
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))

        described = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
        block = to_reservation(blocks.response())
        explained = explain_instances(
            [to_instance(raw) for raw in described], runtime.policy, sweeps[-1], reservations={BLOCK: block}
        )
        by_id = {d.resource: d for d in explained}
        for instance_id in (block_id, scarce):
            preview = by_id[instance_id]
            # the sweep's decision once the warning period had passed (warned, then this, then already reported)
            (swept,) = [
                i
                for i in items
                if i.get("resource") == instance_id
                and i.get("policy") == "idle"
                and i["evidence"]["status"] == "reported"
            ]
            assert (preview.verdict, preview.rule) == (swept["verdict"], swept["rule"]), instance_id
            assert preview.evidence["status"] == swept["evidence"]["status"]
            assert preview.evidence["purchase"] == swept["evidence"]["purchase"]
            assert preview.evidence.get("restart_risk") == swept["evidence"].get("restart_risk")
            assert [(a.type, a.enforced) for a in preview.actions] == [
                (a["type"], a["enforced"]) for a in swept["actions"]
            ]
            assert _about_capacity(preview.reasons) == _about_capacity(swept["reasons"]) != []
            assert any(a.startswith("assumed: every GPU signal") for a in preview.assumptions)
        assert by_id[block_id].evidence["purchase"]["ends_at"] == BLOCK_END.isoformat()


def test_explain_names_the_hyperpod_cluster_and_never_stops_the_node() -> None:
    from governor.idle.explain import explain_instances

    raw = {
        "InstanceId": "i-0hyperpod0000001",
        "InstanceType": "p5.48xlarge",
        "State": {"Name": "running"},
        "LaunchTime": (T0 - dt.timedelta(days=1)).isoformat(),
        "Tags": [{"Key": "owner", "Value": "ana@example.com"}],
    }
    policy = parse_policy({"idle": {"enforce": True, "launch_grace_minutes": 0}})
    (decision,) = explain_instances([to_instance(raw)], policy, T0, hyperpod={"i-0hyperpod0000001": "train-cluster"})
    assert decision.evidence["purchase"]["kind"] == "hyperpod"
    assert decision.evidence["purchase"]["cluster"] == "train-cluster"
    assert not any(a.type in ("stop", "terminate") for a in decision.actions)
    assert any("train-cluster" in r and "SageMaker" in r for r in decision.reasons)
