"""The idle capability's typed actions: stopping or terminating an idle GPU instance (directly, through its Auto
Scaling group, or by draining its EKS node), with the IAM actions each takes under the idle policy and the re-read
that says whether it took effect. The checkpoint before a stop and the idle mark's tags are shared
(``governor.domain.actions``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol

from governor.core_policy import CorePolicy, section_of
from governor.domain.actions import Acting, Action, Outcome
from governor.domain.verification import Verification
from governor.idle.policy import IdlePolicy

#: EC2 states in which a stop or terminate has taken effect (the instance no longer runs the workload).
STOPPED = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
TERMINATED = frozenset({"shutting-down", "terminated"})


class _Reclaims(Protocol):
    def stop(self, instance_id: str) -> None: ...

    def terminate(self, instance_id: str) -> None: ...


class _ScaleIn(Protocol):
    def scale_in(self, instance_id: str) -> str: ...


class Reclaiming(Protocol):
    """EC2 instance writes and, for group members, Auto Scaling (``adapters.ec2.Ec2Actions``, ``autoscaling``)."""

    @property
    def actions(self) -> _Reclaims: ...

    @property
    def groups(self) -> _ScaleIn | None: ...


class _Reclaim(Action):
    """Stop or terminate an idle instance, directly or (``via`` autoscaling) through its Auto Scaling group."""

    lifecycle: str | None = None
    root_device: str | None = None
    requested_by: str | None = None
    via: str | None = None
    group: str | None = None
    decrement_desired: bool | None = None

    #: Reclaiming an Auto Scaling group member through its group (``idle.asg_action: scale_in``).
    SCALE_IN: ClassVar[frozenset[str]] = frozenset(
        {"autoscaling:DescribeAutoScalingGroups", "autoscaling:TerminateInstanceInAutoScalingGroup"}
    )

    #: Draining an EKS node (``idle.clusters[].reclaim: drain``): the cluster's endpoint, then its Kubernetes API
    #: (the role's EKS access entry) and, for a managed node group, terminate-in-group.
    DRAIN: ClassVar[frozenset[str]] = frozenset({"eks:DescribeCluster"}) | SCALE_IN

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        idle = section_of(policy, "idle", IdlePolicy)
        drains = any(c.reclaim == "drain" for c in idle.clusters)
        return (
            cls.IAM
            | (cls.SCALE_IN if idle.asg_action == "scale_in" else frozenset())
            | (cls.DRAIN if drains else frozenset())
        )

    #: EC2 states in which the action has taken effect (the instance no longer runs the workload).
    DONE: ClassVar[frozenset[str]] = frozenset()

    def verify(self, aws: Any, at: Acting) -> Verification:
        live = aws.instances.instance(at.resource)
        if live is None:
            return Verification(fixed=True, seen=f"instance {at.resource} no longer exists")
        return Verification(fixed=live.state in self.DONE, seen=f"instance {at.resource} is {live.state}")


class Stop(_Reclaim):
    type: Literal["stop"] = "stop"
    IAM = frozenset({"ec2:StopInstances"})
    FIXES = True
    DONE = STOPPED

    def execute(self, aws: Reclaiming, at: Acting) -> Outcome:
        aws.actions.stop(at.resource)
        return Outcome(ok=True, done="stopped")


class Terminate(_Reclaim):
    type: Literal["terminate"] = "terminate"
    IAM = frozenset({"ec2:TerminateInstances"})
    FIXES = True
    DONE = TERMINATED

    def execute(self, aws: Reclaiming, at: Acting) -> Outcome:
        if self.via == "kubernetes":
            nodes = getattr(aws, "nodes", None)
            # A failed drain says so in ``done`` ("not drained: ..."), which the ledger, the finding and Stop now's
            # answer carry (Stop now refuses on it instead of answering "terminated").
            if nodes is None:  # a member account's sweep: the hub reaches no cluster there (docs/kubernetes.md)
                why = f"no access to cluster {self.group}"
                return Outcome(ok=False, error_code="NoKubernetesAccess", message=why, done=f"not drained: {why}")
            # One pass of the node's drain, resumed from where the ledger says it stopped; ok only once it is gone.
            outcome: Outcome = nodes.reclaim_outcome(aws, at, str(self.group))
            return outcome
        if self.via == "autoscaling":
            if aws.groups is None:
                raise RuntimeError("no Auto Scaling client configured")
            activity = aws.groups.scale_in(at.resource)
            return Outcome(
                ok=True, done=f"terminated through Auto Scaling group {self.group} (desired capacity -1; {activity})"
            )
        aws.actions.terminate(at.resource)
        return Outcome(ok=True, done="terminated")


def reclaim(kind: str, **fields: Any) -> Stop | Terminate:
    """The idle policy's reclaim action (``idle.action`` is ``stop`` or ``terminate``)."""
    return Terminate(**fields) if kind == "terminate" else Stop(**fields)
