"""The demo's money nobody else finds (issue 49, items 1 and 2), one case of each in the first site's fleet:

- paying twice: a targeted On-Demand Capacity Reservation (1 instance, unused, no end date) of the same type and
  zone as one of the fleet's On-Demand instances that runs all day outside it;
- stopped, still billing: a g5.xlarge stopped before the day began, with a 1 TiB gp3 data volume and an Elastic IP.

The idle sweep finds both through its real adapters; :func:`money_facts` reads the ledger back for the summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from governor_cli.demo.run import DemoResult, Simulation

#: The targeted reservation an On-Demand instance of its match runs beside.
DEMO_TARGETED = "cr-0d0b1e9a1d00000b2"
STOPPED_TYPE = "g5.xlarge"


def _on_demand_all_day(sim: Simulation) -> str | None:
    """A fleet instance bought On-Demand (not Spot, not in the block) whose work keeps it running all day."""
    for kind in ("training", "inference"):
        for real, synthetic in sim.instances.items():
            if synthetic.kind == kind and not sim.spot.get(real) and real != sim.result.capacity_block:
                return real
    return None


def _reserve_beside(sim: Simulation, instance_id: str) -> None:
    from governor_cli.demo.run import PEOPLE
    from governor_cli.testing.capacity import reserve

    raw = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    reserve(
        {
            "CapacityReservationId": DEMO_TARGETED,
            "InstanceType": raw["InstanceType"],
            "InstancePlatform": "Linux/UNIX",
            "Tenancy": "default",
            "AvailabilityZone": raw["Placement"]["AvailabilityZone"],
            "State": "active",
            "ReservationType": "default",
            "InstanceMatchCriteria": "targeted",
            "TotalInstanceCount": 1,
            "AvailableInstanceCount": 1,
            "EndDateType": "unlimited",
            "Tags": [
                {"Key": "owner", "Value": f"{PEOPLE['research']}@demo.example"},
                {"Key": "team", "Value": "research"},
            ],
        },
        account=sim.site.account,
        region=sim.site.region,
    )


def _stopped_box(sim: Simulation) -> str:
    from governor_cli.demo.run import DEMO_AMI, PEOPLE

    tags = {"team": "vision", "owner": f"{PEOPLE['vision']}@demo.example", "Name": "vision-stopped-notebook"}
    tags.update(sim.policy.fleet.fleet_tags)
    ec2 = sim.ec2
    launched = ec2.run_instances(
        ImageId=DEMO_AMI,
        InstanceType=STOPPED_TYPE,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )["Instances"][0]
    instance_id = str(launched["InstanceId"])
    zone = launched["Placement"]["AvailabilityZone"]
    data = ec2.create_volume(AvailabilityZone=zone, Size=1024, VolumeType="gp3", Iops=3000, Throughput=125)
    ec2.attach_volume(VolumeId=data["VolumeId"], InstanceId=instance_id, Device="/dev/sdf")
    address = ec2.allocate_address(Domain="vpc")
    ec2.associate_address(AllocationId=address["AllocationId"], InstanceId=instance_id)
    ec2.stop_instances(InstanceIds=[instance_id])
    return instance_id


def set_up_money(sim: Simulation) -> None:
    """One case of each, in the first site only (the organisation demo's other sites keep their fleets as they were)."""
    if sim.site is not sim.sites[0]:
        return
    beside = _on_demand_all_day(sim)
    if beside is not None:
        _reserve_beside(sim, beside)
        sim.say(f"targeted reservation {DEMO_TARGETED}: 1 x unused beside On-Demand {beside} of its match")
    stopped = _stopped_box(sim)
    sim.result.stopped_beforehand.append(stopped)
    sim.say(f"stopped GPU instance {stopped}: a 1 TiB gp3 volume and an Elastic IP still billing")


def _latest(result: DemoResult, rule: str) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for item in result.decisions:
        if item.get("kind", "decision") == "decision" and item.get("rule") == rule:
            resource = str(item.get("resource"))
            if resource not in latest or str(item.get("at", "")) >= str(latest[resource].get("at", "")):
                latest[resource] = item
    return latest


def money_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """The summary's lines: each reservation paid twice and each stopped instance still billing, with dollars."""
    facts: list[tuple[str, ...]] = []
    for rid, item in sorted(_latest(result, "idle.paying-twice").items()):
        twice = (item.get("evidence") or {}).get("paying_twice") or {}
        ids = ", ".join(str(row.get("instance_id")) for row in twice.get("instances") or [])
        per_day = twice.get("usd_per_day")
        money = f"${float(per_day):,.2f}/day wasted" if per_day is not None else "unpriced"
        facts.append(("paying twice", f"{rid} unused beside On-Demand {ids}: {money} (report-only)"))
    for instance_id, item in sorted(_latest(result, "idle.stopped-billing").items()):
        evidence = item.get("evidence") or {}
        facts.append(
            (
                "stopped, still billing",
                f"{instance_id} ({evidence.get('instance_type')}): ${float(evidence.get('usd_month') or 0):,.2f}/month "
                f"(${float(evidence.get('usd_per_day') or 0):,.2f}/day): {len(evidence.get('volumes') or [])} "
                f"volume(s), {len(evidence.get('public_ips') or [])} public IPv4",
            )
        )
    return facts
