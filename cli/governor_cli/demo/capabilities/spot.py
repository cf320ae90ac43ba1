"""Spot's scenarios: interruption warnings for a Spot GPU instance (checkpointed and recorded) and for a non-GPU one
(never touched); in the demo, a rebalance recommendation, an interruption and an interruptible reservation reclaimed."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from governor_cli.testing.capacity import delivered, place, reserve
from governor_cli.testing.events import envelope
from governor_cli.testing.scenarios import Case

if TYPE_CHECKING:
    from governor_cli.demo.run import Simulation
    from governor_cli.testing.scenarios import Scenarios

#: EC2's purchase option for a Spot instance (RunInstances' ``InstanceMarketOptions``).
SPOT_MARKET: dict[str, Any] = {"MarketType": "spot"}
SOAK: dict[str, Any] = {"enforce": True}


def spot_warning(scenarios: Scenarios, index: int) -> Case:
    instance = scenarios.instance("g5.xlarge", market=SPOT_MARKET, tags={"governor:checkpoint-command": "train"})
    event = envelope(
        "EC2 Spot Instance Interruption Warning",
        "aws.ec2",
        {"instance-id": instance, "instance-action": "terminate"},
    )
    return Case(f"spot warning #{index}", "spot", event, instance)


def spot_warning_not_gpu(scenarios: Scenarios, index: int) -> Case:
    instance = scenarios.instance("m5.large", market=SPOT_MARKET)
    event = envelope(
        "EC2 Spot Instance Interruption Warning", "aws.ec2", {"instance-id": instance, "instance-action": "stop"}
    )
    return Case(f"spot warning, not GPU #{index}", "spot", event, instance, forbidden=True)


CASES = ((4, spot_warning), (1, spot_warning_not_gpu))


# --- the demo ---------------------------------------------------------------------------------------------------

#: The interruptible capacity reservation another account lends capacity from (reclaimed during the demo's day).
DEMO_LENT = "cr-01e470000000000a2"
#: The other account's reservation it was made from.
DEMO_SOURCE = "cr-01e470000000000a1"


def terminated_by_ec2(sim: Simulation, instance: str) -> None:
    """EC2 reclaims the capacity two minutes after its warning: the instance terminates and its state change
    reaches this function and every scenario hook's ``state_changed`` (the day's clock then resumes where the
    incident began)."""
    sim.now += dt.timedelta(minutes=2)
    sim.ec2.terminate_instances(InstanceIds=[instance])
    sim.instances.pop(instance, None)
    change = sim.ec2_event("EC2 Instance State-change Notification", {"instance-id": instance, "state": "terminated"})
    sim.invoke("spot", change)
    sim.state_changed(change)
    sim.now -= dt.timedelta(minutes=2)


def incidents(sim: Simulation) -> dict[int, Callable[[], None]]:
    """A rebalance recommendation, then an interruption of a Spot instance, then an interruptible reservation's
    capacity reclaimed from an inference instance."""
    spots = [real for real, spot in sim.spot.items() if spot]

    def rebalance() -> None:
        if spots:
            sim.invoke("spot", sim.ec2_event("EC2 Instance Rebalance Recommendation", {"instance-id": spots[0]}))

    def interruption() -> None:
        if len(spots) > 1:
            victim = spots[1]
            sim.invoke(
                "spot",
                sim.ec2_event(
                    "EC2 Spot Instance Interruption Warning",
                    {"instance-id": victim, "instance-action": "terminate"},
                ),
            )
            terminated_by_ec2(sim, victim)

    def reservation_interruption() -> None:
        # An inference instance lent capacity from another account's interruptible reservation, reclaimed: AWS's
        # documented warning (tests/fixtures/capacity), then the termination two minutes later.
        lent = next(
            (
                i
                for i in sim.site.launched
                if i in sim.instances and not sim.spot.get(i) and sim.instances[i].kind == "inference"
            ),
            None,
        )
        if lent is None:
            return
        where = {"account": sim.site.account, "region": sim.site.region}
        place(lent, "interruptible-capacity-reservation", DEMO_LENT, **where)
        # EC2's record of the reservation, which the function reads before it believes the warning (issue 45.4)
        reserve(
            {
                "CapacityReservationId": DEMO_LENT,
                "OwnerId": "210987654321",
                "InstanceType": sim.instances[lent].instance_type,
                "AvailabilityZoneId": "use1-az1",
                "State": "active",
                "ReservationType": "default",
                "InstanceMatchCriteria": "targeted",
                "TotalInstanceCount": 1,
                "AvailableInstanceCount": 0,
                "EndDateType": "unlimited",
                "Interruptible": True,
                "InterruptionInfo": {"SourceCapacityReservationId": DEMO_SOURCE, "InterruptionType": "adhoc"},
            },
            **where,
        )
        sim.result.interruptible = lent
        when = sim.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        warning = delivered(
            "capacity-reservation-interruption-warning.json",
            {
                "12345678-1234-1234-1234-123456789012": str(uuid.uuid4()),
                "[instance owner Account ID]": sim.site.account,
                "[Current time in yyyy-mm-ddThh:mm:ssZ]": when,
                "[instance arn]": f"arn:aws:ec2:{sim.site.region}:{sim.site.account}:instance/{lent}",
                "[region]": sim.site.region,
                "[instance-id]": lent,
                "[availability-zone-id]": "use1-az1",
            },
            {"instance-termination-time": (sim.now + dt.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")},
        )
        sim.invoke("spot", warning)
        terminated_by_ec2(sim, lent)

    return {240: rebalance, 245: interruption, 250: reservation_interruption}
