"""Spot's scenarios: interruption warnings for a Spot GPU instance (checkpointed and recorded) and for a non-GPU one
(never touched)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from governor_cli.testing.events import envelope
from governor_cli.testing.scenarios import Case

if TYPE_CHECKING:
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
