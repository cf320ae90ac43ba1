"""The Spot capability's typed actions: after an interruption warning, out of the target groups, the Auto Scaling
lifecycle hook released, and capacity relaunched, each with the IAM actions it takes under the spot policy. The
checkpoint within the two-minute warning is shared with idle (``governor.domain.actions.Checkpoint``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from governor.core_policy import CorePolicy, section_of
from governor.domain.actions import Acting, Action, Outcome
from governor.spot.policy import SpotPolicy

if TYPE_CHECKING:
    from governor.domain.fleet import Instance


def _spot(policy: CorePolicy) -> SpotPolicy:
    return section_of(policy, "spot", SpotPolicy)


class _Recovery(Protocol):
    def deregister(self, instance: Instance, fleet_tags: Mapping[str, str]) -> Any: ...

    def complete_lifecycle_action(self, instance_id: str) -> Any: ...

    def replace(self, instance: Instance, candidates: Any, market: Literal["spot", "on-demand"]) -> Any: ...


class SpotChanges(Protocol):
    @property
    def recovery(self) -> _Recovery: ...


class Deregister(Action):
    type: Literal["deregister"] = "deregister"
    target_groups: str | None = None
    IAM = frozenset(
        {
            "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth",
            "elasticloadbalancing:DescribeTags",
            "elasticloadbalancing:DeregisterTargets",
        }
    )

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        return cls.IAM if _spot(policy).deregister_from_target_groups else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        """Only from target groups carrying ``fleet.fleet_tags`` (the IAM grant has the same condition)."""
        result = aws.recovery.deregister(at.live, at.policy.fleet.fleet_tags)
        groups, left = list(result.groups), list(result.left_alone)
        done = f"deregistered from {len(groups)} target group(s)"
        if left:
            done += f"; left in {len(left)} target group(s) without fleet.fleet_tags: {', '.join(left)}"
        return Outcome(ok=True, done=done, data={"target_groups": groups, "left_alone": left})


class CompleteLifecycleAction(Action):
    type: Literal["complete_lifecycle_action"] = "complete_lifecycle_action"
    auto_scaling_group: str | None = None
    when: str | None = None
    IAM = frozenset(
        {
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLifecycleHooks",
            "autoscaling:CompleteLifecycleAction",
        }
    )

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        return cls.IAM if _spot(policy).complete_lifecycle_action else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        note = str(aws.recovery.complete_lifecycle_action(at.resource).note)
        return Outcome(ok=True, done=f"lifecycle action: {note}", data={"note": note})


#: How ``Replace.candidates`` writes "wherever the launch template puts it".
ANY_ZONE = "any"


class Place(NamedTuple):
    """One place ``Replace`` tries, in the shape the recovery adapter reads: a type and a zone (None: any)."""

    instance_type: str
    zone: str | None


class Replace(Action):
    """Relaunch capacity from the interrupted instance's launch template (``spot.replacement``)."""

    type: Literal["replace"] = "replace"
    market: str | None = None
    launch_template: str | None = None
    version: str | None = None
    candidates: list[dict[str, str]] | None = None
    IAM = frozenset({"ec2:DescribeSubnets", "ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"})
    FIXES = True

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        return cls.IAM if _spot(policy).replacement != "none" else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        """Relaunch from the candidates the decision listed (the policy's fallback types and zones), in the policy's
        market; the launch's client token is derived from the interrupted instance inside the adapter, so a retry finds
        the same launch. Without a list, the instance's own type, in any zone."""
        instance = at.live
        market: Literal["spot", "on-demand"] = "spot" if _spot(at.policy).replacement == "spot" else "on-demand"
        listed = self.candidates or [{"instance_type": instance.type, "zone": ANY_ZONE}]
        places = [Place(c["instance_type"], None if c.get("zone", ANY_ZONE) == ANY_ZONE else c["zone"]) for c in listed]
        replacement = aws.recovery.replace(instance, places, market)
        done = f"replacement {replacement.instance_id} launched" if replacement.instance_id else ""
        return Outcome(
            ok=bool(replacement.instance_id),
            done=done,
            message=replacement.reason or "",
            data={"replacement": replacement},
        )
