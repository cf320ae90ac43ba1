"""EC2 Auto Scaling: reclaim an idle group member through its group, so the group does not replace it.

Stopping a member out of band makes the group mark it unhealthy and launch a replacement: nothing is saved and the
workload churns. ``TerminateInstanceInAutoScalingGroup`` with ``ShouldDecrementDesiredCapacity`` shrinks the group
instead; AWS refuses it when the desired capacity would drop below the minimum, and so do we, before asking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.adapters.aws import client


@dataclass(frozen=True)
class GroupCapacity:
    """A group's bounds as read right before acting, and whether the instance is still one of its members."""

    name: str
    minimum: int
    desired: int
    member: bool
    tags: Mapping[str, str] = field(default_factory=dict)

    def refusal(self, instance_id: str, fleet_tags: Mapping[str, str] | None = None) -> str | None:
        """Why scaling the group in by this instance is not allowed now, or None. Only a group carrying
        ``fleet.fleet_tags`` is the fleet's to shrink (the IAM grant has the same condition)."""
        if not self.member:
            return f"{instance_id} is no longer a member of Auto Scaling group {self.name}"
        missing = {k: v for k, v in (fleet_tags or {}).items() if self.tags.get(k) != v}
        if missing:
            wanted = ", ".join(f"{k}={v}" for k, v in missing.items())
            return f"Auto Scaling group {self.name} lacks fleet.fleet_tags ({wanted}): not the fleet's to scale in"
        if self.desired - 1 < self.minimum:
            return (
                f"Auto Scaling group {self.name} is at its minimum (desired {self.desired}, minimum {self.minimum}); "
                "reported only: lower the group's minimum to reclaim it"
            )
        return None


class AutoScalingGroups:
    """Reads a group's capacity and scales it in by one instance; counts API calls for the benchmarks."""

    def __init__(self, region: str | None = None, autoscaling: Any = None) -> None:
        self._autoscaling = autoscaling or client("autoscaling", region)
        self.calls = 0

    def capacity(self, group: str, instance_id: str) -> GroupCapacity | None:
        """The group's minimum and desired capacity now; None when the group no longer exists."""
        self.calls += 1
        found = self._autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group]).get(
            "AutoScalingGroups", []
        )
        if not found:
            return None
        raw = found[0]
        members = {i.get("InstanceId") for i in raw.get("Instances", [])}
        return GroupCapacity(
            name=group,
            minimum=int(raw.get("MinSize", 0)),
            desired=int(raw.get("DesiredCapacity", 0)),
            member=instance_id in members,
            tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags", []) if "Key" in t},
        )

    def scale_in(self, instance_id: str) -> str:
        """Terminate the instance and decrement the group's desired capacity; returns the scaling activity id."""
        self.calls += 1
        response = self._autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
        )
        return str((response.get("Activity") or {}).get("ActivityId", ""))
