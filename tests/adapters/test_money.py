"""Money nobody else finds (issue 49, items 1 and 2), through the idle sweep's real handler and adapters on moto:

- paying twice: On-Demand instances running beside a targeted reservation of their match with unused capacity;
- stopped, still billing: every stopped GPU instance's EBS volumes and public IPv4 addresses, a month.

Report-only whatever ``enforce`` says: nothing is stopped, moved, released, snapshotted or terminated.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.capacity import CapacityReservations
from governor.adapters.ec2 import Ec2Reader
from governor.idle import handler as idle_handler
from governor.idle.handler import handle
from governor.idle.ports import Adapters
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.capacity import forget_reservations, reserve
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import CLOCK, T0, _event, _launch, _metrics

G5_12 = 5.672  # g5.12xlarge On-Demand, us-east-1, the rate this test's price table says the account pays


def _runtime(**idle: Any) -> Runtime:
    return Runtime(
        policy=parse_policy(
            {
                "idle": {"launch_grace_minutes": 0, **idle},
                "pricing": {"prices": {"g5.12xlarge": {"on_demand": G5_12, "gpus": 4}}},
            }
        ),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def _aws() -> Adapters:
    """The handler's own adapters (every read it wires), with moto's listing and the test's clock."""
    aws = idle_handler._aws("us-east-1", "MB")
    return dataclasses.replace(
        aws,
        instances=Ec2Reader("us-east-1", wildcard_type_filter=False),  # moto does not match wildcard filters
        reservations=CapacityReservations("us-east-1"),
        clock=CLOCK,
    )


def _decisions(runtime: Runtime, rule: str) -> list[dict[str, Any]]:
    ledger = runtime.ledger
    assert isinstance(ledger, MemoryLedger)
    return [d.model_dump(mode="json") for d in ledger.entries.values() if d.rule == rule]


def _reservation(rid: str, match: str, available: int, zone: str = "us-east-1a", **extra: Any) -> dict[str, Any]:
    return {
        "CapacityReservationId": rid,
        "InstanceType": "g5.12xlarge",
        "InstancePlatform": "Linux/UNIX",
        "Tenancy": "default",
        "AvailabilityZone": zone,
        "State": "active",
        "ReservationType": "default",
        "InstanceMatchCriteria": match,
        "TotalInstanceCount": 3,
        "AvailableInstanceCount": available,
        "EndDateType": "unlimited",
        "Tags": [{"Key": "owner", "Value": "lead@example.com"}, {"Key": "team", "Value": "platform"}],
        **extra,
    }


@pytest.fixture
def moto() -> Any:
    with mock_aws():
        forget_reservations()
        yield boto3.client("ec2", region_name="us-east-1")
        forget_reservations()


@pytest.mark.parametrize("enforce", [False, True])
def test_on_demand_beside_a_targeted_reservation_with_room_is_paying_twice(moto: Any, enforce: bool) -> None:
    """Three On-Demand g5.12xlarge run in us-east-1a while a targeted reservation of that match has two of three
    instances unused: two of them could have run in it, so two On-Demand rates a day are wasted. An open reservation
    of the same match takes running instances by itself (not paying twice), and a reservation in another zone does
    not match them."""
    running = _launch(moto, "g5.12xlarge", 3)
    for instance_id in running:
        _metrics(instance_id, 80.0)  # busy: the finding is about how they are bought, not whether they work
    reserve(_reservation("cr-0targeted000000001", "targeted", 2))
    reserve(_reservation("cr-0open00000000000002", "open", 1))
    reserve(_reservation("cr-0otherzone0000000003", "targeted", 3, zone="us-east-1b"))
    runtime = _runtime(enforce=enforce)
    handle(_event(T0, "sweep-paying-twice"), runtime, _aws())

    found = _decisions(runtime, "idle.paying-twice")
    assert [d["resource"] for d in found] == ["cr-0targeted000000001"]
    # one decision per reservation and sweep: the unused capacity the report sums, and who pays twice beside it
    assert found[0]["evidence"]["status"] == "unused-capacity" and found[0]["evidence"]["unused_instances"] == 2
    evidence = found[0]["evidence"]["paying_twice"]
    assert evidence["usd_per_day"] == round(2 * G5_12 * 24, 2)
    assert sorted(row["instance_id"] for row in evidence["instances"]) == sorted(running)
    assert sum(row["could_use_reservation"] for row in evidence["instances"]) == 2
    assert {row["owner"] for row in evidence["instances"]} == {"ana@example.com"}
    assert evidence["reservation"]["owner"] == "lead@example.com" and evidence["reservation"]["lendable"] is True
    reasons = " ".join(found[0]["reasons"])
    assert "CapacityReservationTarget" in reasons and "modify-instance-capacity-reservation-attributes" in reasons
    assert "create-interruptible-capacity-reservation-allocation" in reasons
    assert all(a.get("enforced") is False for a in found[0]["actions"])
    sink = runtime.sink
    assert isinstance(sink, MemorySink)
    told = [f for f in sink.findings if f.rule == "idle.paying-twice"]
    assert len(told) == 1 and told[0].owner == "ana@example.com" and "$272.26/day" in told[0].title
    assert {
        moto.describe_instances(InstanceIds=[i])["Reservations"][0]["Instances"][0]["State"]["Name"] for i in running
    } == {"running"}


def test_a_capacity_block_with_room_beside_on_demand_is_paying_twice_and_not_lendable(moto: Any) -> None:
    running = _launch(moto, "g5.12xlarge", 1)
    _metrics(running[0], 80.0)
    ends = T0 + dt.timedelta(days=2)
    reserve(
        _reservation(
            "cr-0b10c4000000000bb",
            "targeted",
            1,
            ReservationType="capacity-block",
            EndDateType="limited",
            EndDate=ends,
            TotalInstanceCount=1,
        )
    )
    runtime = _runtime()
    handle(_event(T0, "sweep-block"), runtime, _aws())
    decided = _decisions(runtime, "idle.paying-twice")
    assert len(decided) == 1
    found = decided[0]
    assert found["evidence"]["paying_twice"]["usd_per_day"] == round(G5_12 * 24, 2)
    assert found["evidence"]["paying_twice"]["reservation"]["lendable"] is False
    assert any("cannot be cancelled" in r for r in found["reasons"])


def _stopped_fleet(moto: Any) -> dict[str, Any]:
    """A stopped g5.12xlarge with its root volume, a 2 TiB gp3 data volume provisioned above the free baseline, a
    1 TiB io2 volume at 40,000 IOPS and an Elastic IP; a stopped CPU box and a running GPU box beside it."""
    gpu, running = _launch(moto, "g5.12xlarge", 2)
    cpu = _launch(moto, "m5.large")[0]
    _metrics(running, 80.0)
    zone = moto.describe_instances(InstanceIds=[gpu])["Reservations"][0]["Instances"][0]["Placement"][
        "AvailabilityZone"
    ]
    data = moto.create_volume(AvailabilityZone=zone, Size=2048, VolumeType="gp3", Iops=6000, Throughput=250)
    fast = moto.create_volume(AvailabilityZone=zone, Size=1024, VolumeType="io2", Iops=40000)
    moto.attach_volume(VolumeId=data["VolumeId"], InstanceId=gpu, Device="/dev/sdf")
    moto.attach_volume(VolumeId=fast["VolumeId"], InstanceId=gpu, Device="/dev/sdg")
    address = moto.allocate_address(Domain="vpc")
    moto.associate_address(AllocationId=address["AllocationId"], InstanceId=gpu)
    moto.stop_instances(InstanceIds=[gpu, cpu])
    volumes = moto.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [gpu]}])["Volumes"]
    return {"gpu": gpu, "cpu": cpu, "running": running, "ip": address["PublicIp"], "volumes": volumes}


def test_a_stopped_gpu_instance_reports_what_its_volumes_and_public_ipv4_still_bill(moto: Any) -> None:
    fleet = _stopped_fleet(moto)
    runtime = _runtime()
    handle(_event(T0, "sweep-stopped"), runtime, _aws())

    found = _decisions(runtime, "idle.stopped-billing")
    assert [d["resource"] for d in found] == [fleet["gpu"]]  # not the CPU box, not the running one
    evidence = found[0]["evidence"]
    by_id = {v["volume_id"]: v for v in evidence["volumes"]}
    assert len(by_id) == len(fleet["volumes"]) >= 3
    gp3 = next(v for v in by_id.values() if v["size_gib"] == 2048)
    io2 = next(v for v in by_id.values() if v["size_gib"] == 1024)
    # us-east-1 list prices: gp3 $0.08/GB-month + 3,000 IOPS above the free 3,000 at $0.005 + 125 MiB/s above the
    # free 125 at $0.04; io2 $0.125/GB-month + 32,000 IOPS at $0.065 + 8,000 at $0.0455
    assert gp3["usd_month"] == round(2048 * 0.08 + 3000 * 0.005 + 125 * 0.04, 2) == 183.84
    assert io2["usd_month"] == round(1024 * 0.125 + 32000 * 0.065 + 8000 * 0.0455, 2) == 2572.0
    assert evidence["public_ips"] == [fleet["ip"]] and evidence["ipv4_usd_month"] == 3.65  # $0.005 x 730 h
    assert evidence["usd_month"] == round(sum(v["usd_month"] for v in by_id.values()) + 3.65, 2)
    assert evidence["owner"] == "ana@example.com" and evidence["stopped_since"] is not None
    assert evidence["snapshot_and_terminate"] is None  # off by default
    sink = runtime.sink
    assert isinstance(sink, MemorySink)
    [told] = [f for f in sink.findings if f.rule == "idle.stopped-billing"]
    assert told.owner == "ana@example.com" and f"${evidence['usd_month']:,.2f} a month" in told.title
    assert not told.enforced


def test_snapshot_and_terminate_after_days_says_when_and_acts_on_nothing_while_report_only(moto: Any) -> None:
    fleet = _stopped_fleet(moto)
    runtime = _runtime(stopped={"snapshot_and_terminate_after_days": 7})
    handle(_event(T0, "sweep-stopped-early"), runtime, _aws())
    early = _decisions(runtime, "idle.stopped-billing")
    assert len(early) == 1 and early[0]["evidence"]["snapshot_and_terminate"]["due"] is False
    assert any("will be due for snapshot and terminate" in r for r in early[0]["reasons"])
    later = T0 + dt.timedelta(days=8)
    handle(_event(later, "sweep-stopped-late"), runtime, _aws())
    found = [d for d in _decisions(runtime, "idle.stopped-billing") if d["evidence"]["snapshot_and_terminate"]["due"]]
    assert len(found) == 1
    teardown = found[0]["evidence"]["snapshot_and_terminate"]
    assert teardown["after_days"] == 7 and teardown["enforced"] is False
    assert any("would snapshot every volume" in r for r in found[0]["reasons"])
    state = moto.describe_instances(InstanceIds=[fleet["gpu"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    volumes = [v["VolumeId"] for v in fleet["volumes"]]
    snapshots = moto.describe_snapshots(Filters=[{"Name": "volume-id", "Values": volumes}])["Snapshots"]
    assert state == "stopped" and snapshots == []


def test_enforced_snapshot_then_terminate_only_once_every_snapshot_completed(moto: Any) -> None:
    """Enforcing: the first due sweep re-reads the instance and its volumes, snapshots every volume with its tags and
    keeps the snapshot ids in the ledger; the instance is terminated only on a later sweep that reads every snapshot
    completed, and that decision says how to restore. An instance started again in between is never touched."""
    from governor_cli.testing.snapshots import copy_volume_tags  # the emulator learns CopyTagsFromSource

    copy_volume_tags()
    fleet = _stopped_fleet(moto)
    data = next(v for v in fleet["volumes"] if v["Size"] == 2048)["VolumeId"]
    moto.create_tags(Resources=[data], Tags=[{"Key": "dataset", "Value": "imagenet"}])
    runtime = _runtime(enforce=True, stopped={"snapshot_and_terminate_after_days": 7})
    ledger = runtime.ledger
    assert isinstance(ledger, MemoryLedger)
    due = T0 + dt.timedelta(days=8)
    handle(_event(due, "sweep-snapshot"), runtime, _aws())

    state = moto.describe_instances(InstanceIds=[fleet["gpu"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "stopped"  # not terminated in the sweep that snapshots
    kept = ledger.get_item("stopped-snapshots", fleet["gpu"])
    assert kept is not None and sorted(kept["snapshots"]) == sorted(v["VolumeId"] for v in fleet["volumes"])
    taken = moto.describe_snapshots(SnapshotIds=sorted(kept["snapshots"].values()))["Snapshots"]
    tags = {s["VolumeId"]: {t["Key"]: t["Value"] for t in s.get("Tags", [])} for s in taken}
    assert tags[data]["dataset"] == "imagenet" and tags[data]["governor:snapshot-of"] == fleet["gpu"]
    assert all(t["governor:snapshot-of"] == fleet["gpu"] for t in tags.values())

    handle(_event(due + dt.timedelta(minutes=15), "sweep-terminate"), runtime, _aws())
    state = moto.describe_instances(InstanceIds=[fleet["gpu"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "terminated"
    last = [d for _, d in ledger.decisions if d.rule == "idle.stopped-billing" and d.resource == fleet["gpu"]][-1]
    assert any("restore:" in r and "create-volume --snapshot-id" in r for r in last.reasons)
    assert any(str(d).startswith("terminated") for d in last.evidence.get("done") or [])


def test_an_instance_started_before_its_snapshot_is_left_alone(moto: Any) -> None:
    """The sweep decided on a stopped instance, but its owner started it again before the act: the re-read holds it
    (nothing snapshotted, nothing terminated), and the hold is what the ledger keeps."""
    fleet = _stopped_fleet(moto)
    runtime = _runtime(enforce=True, stopped={"snapshot_and_terminate_after_days": 7})
    aws = _aws()
    reader = aws.instances
    started = {"done": False}

    class StartsBeforeTheReread(Ec2Reader):
        def instance(self, instance_id: str) -> Any:
            if not started["done"]:
                moto.start_instances(InstanceIds=[instance_id])
                started["done"] = True
            return reader.instance(instance_id)

    aws = dataclasses.replace(aws, instances=StartsBeforeTheReread("us-east-1", wildcard_type_filter=False))
    handle(_event(T0 + dt.timedelta(days=8), "sweep-held"), runtime, aws)
    volumes = [v["VolumeId"] for v in fleet["volumes"]]
    assert moto.describe_snapshots(Filters=[{"Name": "volume-id", "Values": volumes}])["Snapshots"] == []
    found = _decisions(runtime, "idle.stopped-billing")
    assert len(found) == 1 and found[0]["verdict"] == "ok"
    assert any("nothing done: no longer stopped" in r for r in found[0]["reasons"])


def test_the_report_lists_both_with_their_dollars_a_day(moto: Any) -> None:
    """Through the ledger table the report reads: paying twice and stopped-still-billing are open findings of the
    report, each with the dollars a day its decision priced (not the instance's hourly price: the stopped instance
    bills no compute, and the reservation is not an instance)."""
    from governor.adapters.ledger import DynamoLedger
    from governor.report.handler import ledger_items
    from governor.report.sections.findings import findings_section
    from governor_cli.demo.bootstrap import create_shared

    fleet = _stopped_fleet(moto)
    reserve(_reservation("cr-0targeted000000001", "targeted", 2))
    local = create_shared("us-east-1")
    runtime = dataclasses.replace(_runtime(), ledger=DynamoLedger(local.ledger_table, region="us-east-1"))
    handle(_event(T0, "sweep-report"), runtime, _aws())
    items = ledger_items(runtime, T0 - dt.timedelta(days=1))
    rows = {
        r.rule: r
        for r in findings_section(items, runtime.policy, T0 - dt.timedelta(hours=1), T0 + dt.timedelta(hours=1))
    }
    assert {"idle.paying-twice", "idle.stopped-billing"} <= set(rows)
    twice, stopped = rows["idle.paying-twice"], rows["idle.stopped-billing"]
    assert (twice.resource, twice.status, twice.usd_per_day) == ("cr-0targeted000000001", "open", round(G5_12 * 24, 2))
    assert stopped.resource == fleet["gpu"] and stopped.status == "open" and stopped.owner == "ana"
    [decision] = [i for i in items if i.get("rule") == "idle.stopped-billing"]
    assert stopped.usd_per_day == float(decision["evidence"]["usd_per_day"]) > 90  # about $2,877 a month
    assert "modify-instance-capacity-reservation-attributes" in twice.remediation


@pytest.mark.parametrize("rule", ["idle.paying-twice", "idle.stopped-billing"])
def test_money_findings_wait_for_the_teams_daily_digest(rule: str) -> None:
    """Nothing happens at a set time on these findings (report-only, told once a day): under the shipped
    ``notifications.immediate: actionable`` they go into the team's daily digest instead of a post of their own."""
    from governor.domain.decision import Finding
    from governor.notifier.domain import decide_notification

    policy = parse_policy({}).notifications
    finding = Finding(
        policy="idle", rule=rule, severity="warning", resource="i-0123456789abcdef0", title="t", team="vision"
    )
    assert decide_notification(finding, policy, lambda: None, T0).digest


def test_explain_shows_a_stopped_instance_due_and_how_to_restore(moto: Any) -> None:
    """``governor explain --instances`` on ``describe-instances`` output: a stopped GPU instance gets the sweep's
    stopped-billing decision (not an idle verdict), when it is due for snapshot and terminate, and the restore."""
    from governor.adapters.ec2 import to_instance
    from governor.idle.explain import explain_instances

    fleet = _stopped_fleet(moto)
    policy = _runtime(enforce=True, stopped={"snapshot_and_terminate_after_days": 7}).policy
    described = [i for r in moto.describe_instances()["Reservations"] for i in r["Instances"]]
    explained = {
        d.resource: d
        for d in explain_instances([to_instance(raw) for raw in described], policy, T0 + dt.timedelta(days=8))
    }
    stopped = explained[fleet["gpu"]]
    assert stopped.rule == "idle.stopped-billing" and stopped.evidence["snapshot_and_terminate"]["due"] is True
    assert any("restore:" in r and "create-volume --snapshot-id" in r for r in stopped.reasons)
    assert [a.type for a in stopped.actions] == ["notify", "terminate"]
    assert any(a.startswith("assumed: once due, every volume was snapshotted") for a in stopped.assumptions)
