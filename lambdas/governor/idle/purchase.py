"""How an idle instance may be reclaimed, from its purchase model and who owns its capacity: stop or terminate, through
its Auto Scaling group or its Kubernetes cluster, or reported only (a Capacity Block, a reservation, a node group's
node, a scarce type the policy only warns about); and the checkpoint command to run first.
"""

from __future__ import annotations

from typing import Any, Literal

from governor.domain.capacity import idle_hold, purchase_model
from governor.domain.fleet import Instance, checkpoint_choice
from governor.idle.ownership import cluster_name, kubernetes_node
from governor.idle.policy import IdlePolicy
from governor.policy import Policy

ASG_TAG = "aws:autoscaling:groupName"


def reclaim_action(instance: Instance, policy: IdlePolicy) -> Literal["stop", "terminate"]:
    """Stop keeps the disks (on-demand, EBS-backed); Spot and instance-store roots cannot be kept, so terminate.

    A member of an Auto Scaling group is always terminated through the group: a stopped member is replaced. A
    Kubernetes node its cluster drains is removed (terminated) by its owner.
    """
    if (
        instance.root_device_type == "instance-store"
        or auto_scaling_group(instance)
        or draining_cluster(instance, policy)
    ):
        return "terminate"
    return policy.spot_action if instance.lifecycle == "spot" else policy.on_demand_action


def auto_scaling_group(instance: Instance) -> str | None:
    """The Auto Scaling group the instance belongs to (EC2 Auto Scaling tags its members), or None."""
    return instance.tags.get(ASG_TAG, "").strip() or None


def kubernetes_owner(instance: Instance) -> str | None:
    """Why a Kubernetes cluster (EKS, Karpenter) owns this node, or None: its tags claim it and AWS's own tags prove
    a node group launched it (``governor.idle.ownership``); a claim alone is reported, not honoured."""
    node = kubernetes_node(instance.tags)
    return node.describe() if node else None


def draining_cluster(instance: Instance, policy: IdlePolicy) -> str | None:
    """The ``idle.clusters`` entry with ``reclaim: drain`` this proven node belongs to (by name), or None."""
    if kubernetes_node(instance.tags) is None:
        return None
    name = cluster_name(instance.tags)
    return next((c.name for c in policy.clusters if c.name == name and c.reclaim == "drain"), None)


def report_only_reason(instance: Instance, policy: IdlePolicy) -> str | None:
    """Why this instance may only be reported, never reclaimed: its capacity is paid for or lent (a Capacity Block,
    a capacity reservation: ``governor.domain.capacity``), or belongs to a cluster or a group (unless the policy
    drains that cluster's idle nodes through its own API)."""
    held = idle_hold(purchase_model(instance), policy.reserved_capacity)
    if held:
        return held
    risk = restart_risk(instance, policy)
    if risk and policy.scarce_action == "warn":
        return f"{risk['why']}; idle.scarce_action is warn, so it is warned about and reported, never stopped"
    node = kubernetes_owner(instance)
    if node and draining_cluster(instance, policy):
        return None
    if node:
        return (
            f"{node}: its cluster autoscaler owns the capacity and would replace it, so it is reported only and its "
            "idle GPU-hours counted; drain or scale the node group instead"
        )
    group = auto_scaling_group(instance)
    if group and policy.asg_action == "report":
        return f"a member of Auto Scaling group {group}; asg_action is report, so it is reported only"
    return None


def checkpoint_command(instance: Instance, policy: Policy) -> str | None:
    """The command to run before acting: the allow-list entry the tag names, else ``idle.checkpoint_command``.

    Never the tag's own text, and nothing for an instance without ``fleet.fleet_tags`` (the SendCommand grant's
    condition would refuse it anyway).
    """
    if not policy.fleet.carries_fleet_tags(instance.tags):
        return None
    return checkpoint_choice(instance.tags, policy.fleet, policy.idle.checkpoint_command).command


def checkpoint_notes(instance: Instance, policy: Policy) -> list[str]:
    """Why the checkpoint is not what the instance's tags ask for: an unknown command name, or no command tags."""
    choice = checkpoint_choice(instance.tags, policy.fleet, policy.idle.checkpoint_command)
    notes = [choice.problem] if choice.problem else []
    if choice.command and not policy.fleet.carries_fleet_tags(instance.tags):
        wanted = ", ".join(f"{k}={v}" for k, v in policy.fleet.fleet_tags.items())
        notes.append(f"no checkpoint sent: the instance lacks fleet.fleet_tags ({wanted})")
    return notes


def restart_risk(instance: Instance, policy: IdlePolicy) -> dict[str, Any] | None:
    """The risk of stopping an instance of a type the policy marks scarce (``idle.scarce_types``): a stopped
    On-Demand instance gives its capacity back, and starting it again can fail with InsufficientInstanceCapacity for
    hours or days. None for other types, and for capacity the team keeps whatever happens (a reservation, a block)."""
    import fnmatch

    if purchase_model(instance).kind != "on-demand":
        return None
    pattern = next((p for p in policy.scarce_types if fnmatch.fnmatchcase(instance.type, p)), None)
    if pattern is None:
        return None
    return {
        "scarce": True,
        "pattern": pattern,
        "action": policy.scarce_action,
        "why": (
            f"{instance.type} is scarce (idle.scarce_types {pattern}): once stopped, its On-Demand capacity is "
            "given back and a restart may fail with InsufficientInstanceCapacity; a Capacity Reservation or "
            "Capacity Block keeps it"
        ),
    }
