"""Lifecycle's scenarios: a GPU launch (tagged with its creator, a usage session opened) and a non-GPU launch (never
touched); in the demo, every launch and state change of the day, and its closing reconcile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from governor_cli.testing.scenarios import Case, cloudtrail_call

if TYPE_CHECKING:
    from governor_cli.demo.run import Simulation
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True}


def _launch(scenarios: Scenarios, instance_type: str) -> tuple[str, dict[str, Any]]:
    instance = scenarios.instance(instance_type)
    response = {"instancesSet": {"items": [{"instanceId": instance, "instanceType": instance_type}]}}
    event = cloudtrail_call("aws.ec2", "RunInstances", {"instanceType": instance_type}, response)
    return instance, event


def lifecycle_gpu_launch(scenarios: Scenarios, index: int) -> Case:
    instance, event = _launch(scenarios, "g5.xlarge")
    return Case(f"GPU launch #{index}", "lifecycle", event, instance)


def lifecycle_not_gpu_launch(scenarios: Scenarios, index: int) -> Case:
    instance, event = _launch(scenarios, "m5.large")
    return Case(f"non-GPU launch #{index}", "lifecycle", event, instance, forbidden=True)


CASES = ((3, lifecycle_gpu_launch), (1, lifecycle_not_gpu_launch))


# --- the demo ---------------------------------------------------------------------------------------------------

#: The CloudTrail calls its rule receives in the demo (``Simulation.api_call`` delivers them).
CLOUDTRAIL_CALLS = frozenset({"RunInstances"})


def state_changed(sim: Simulation, change: dict[str, Any]) -> None:
    """EC2's state-change event (running, stopped, terminated): the usage session opens or closes."""
    sim.invoke("lifecycle", change)


def reconcile(sim: Simulation) -> None:
    """The scheduled reconcile: sessions of vanished instances closed, running GPU instances never seen starting
    (Karpenter's CreateFleet launches) given one."""
    sim.invoke("lifecycle", sim.scheduled({"sweep": "reconcile"}))


#: The day ends with a reconcile.
close = reconcile
