"""The ``idle`` function: a scheduled sweep that reclaims GPU instances every signal says are idle, and Stop now.

Parse at the edge (:mod:`governor.idle.events`), then one pass (:func:`governor.idle.sweep_run.run_sweep`): gather
the fleet, its metrics and marks once, decide once for the fleet (:mod:`governor.idle.sweep`, pure), record every
verdict, carry out what is enforced after re-reading, and publish; or Stop now for one clicked instance
(:mod:`governor.idle.stop_click`). This module wires the AWS adapters (in the home account, or through the spoke role
in a member's) and nothing else.
"""

from __future__ import annotations

from typing import Any

from governor.adapters.aws import per_session
from governor.adapters.capacity import CapacityReservations
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.hyperpod import HyperPodNodes
from governor.adapters.instance_types import GpuTypes
from governor.adapters.ssm import SsmCommands
from governor.adapters.volumes import InstanceStorage
from governor.events.envelopes import GovernorEvent
from governor.idle.activity_policy import ActivitySignal
from governor.idle.autoscaling import AutoScalingGroups
from governor.idle.domain import POLICY
from governor.idle.events import StopRequestEvent, parse
from governor.idle.kubernetes.nodes import KubernetesNodes
from governor.idle.policy import KubernetesCluster
from governor.idle.ports import Adapters
from governor.idle.sources import metric_source
from governor.idle.stop_click import stop_now
from governor.idle.sweep_run import run_sweep
from governor.runtime import Handler, Invocation, Runtime, default_runtime


@per_session
def _aws(
    region: str | None,
    memory_unit: str,
    source: str = "cloudwatch_agent",
    clusters: tuple[KubernetesCluster, ...] = (),
    activity: tuple[ActivitySignal, ...] = (),
) -> Adapters:
    groups = AutoScalingGroups(region)
    drains = any(c.reclaim == "drain" for c in clusters)
    return Adapters(
        Ec2Reader(region),
        Ec2Actions(region),
        metric_source(source, region, memory_unit=memory_unit, clusters=clusters, activity=activity),
        SsmCommands(region),
        groups,
        reservations=CapacityReservations(region),
        nodes=KubernetesNodes(region, groups) if drains else None,
        hyperpod=HyperPodNodes(region),
        gpu_types=GpuTypes(region),
        storage=InstanceStorage(region),
    )


def process(parsed: GovernorEvent, runtime: Runtime, aws: Adapters, call: Invocation | None = None) -> dict[str, Any]:
    if isinstance(parsed, StopRequestEvent):
        return stop_now(parsed, runtime, aws, call.account if call is not None else None)
    return run_sweep(parsed, runtime, aws)


def handle(event: Any, runtime: Runtime, aws: Adapters | None = None, context: Any = None) -> dict[str, Any]:
    """Parse at the edge (bad input goes to the DLQ with its reason), then sweep (or Stop now) once per schedule
    execution id or click; ``context`` lets the idempotency record of a sweep that times out expire with it."""
    return HANDLER.handle(event, runtime, aws, context=context)


def _home_aws(event: Any, runtime: Runtime) -> Adapters:
    idle = runtime.policy.idle
    return _aws(
        runtime.region, idle.gpu_memory_unit, idle.metric_source, _home_clusters(idle.clusters), idle.activity_signals
    )


def target_aws(event: dict[str, Any], runtime: Runtime) -> Adapters:
    """The sweep's adapters in a fan-out target's account and region (through the spoke role in a member account)."""
    from governor.adapters.aws import client, member_target

    unit = runtime.policy.idle.gpu_memory_unit
    source = runtime.policy.idle.metric_source
    member = member_target(event)
    if member is None:
        clusters = _home_clusters(runtime.policy.idle.clusters)
        return _aws(runtime.region, unit, source, clusters, runtime.policy.idle.activity_signals)
    account, region, event_id = member
    where: dict[str, Any] = {"account": account, "event_id": event_id}
    # A member's clusters are read and drained with the spoke role's credentials there (idle.clusters[].account).
    clusters = tuple(c for c in runtime.policy.idle.clusters if c.in_target(account, region))
    groups = AutoScalingGroups(region, client("autoscaling", region, **where))
    nodes = None
    if any(c.reclaim == "drain" for c in clusters):
        nodes = KubernetesNodes(
            region,
            groups,
            api=lambda cluster: _member_api(cluster, region, where),
        )
    return Adapters(
        Ec2Reader(region, **where),
        Ec2Actions(region, **where),
        metric_source(
            source,
            region,
            client("cloudwatch", region, **where),
            unit,
            clusters,
            credentials=lambda: client.credentials(account, region, event_id),
            activity=runtime.policy.idle.activity_signals,
        ),
        SsmCommands(region, **where),
        groups,
        reservations=CapacityReservations(region, **where),
        nodes=nodes,
        hyperpod=HyperPodNodes(region, **where),
        gpu_types=GpuTypes(region),  # the same in every account of a region: read with the home role
        storage=InstanceStorage(region, **where),
    )


def _member_api(cluster: str, region: str | None, where: dict[str, Any]) -> Any:
    """A member cluster's API: DescribeCluster and the EKS token (presigned STS) with the spoke role's credentials, so
    the cluster maps the spoke role through its access entry (created by that account's spoke stack)."""
    from governor.adapters.aws import client
    from governor.idle.kubernetes.api import eks_api

    return eks_api(cluster, region, eks=client("eks", region, **where), sts=client("sts", region, **where))


def _home_clusters(clusters: tuple[KubernetesCluster, ...]) -> tuple[KubernetesCluster, ...]:
    """The clusters the governor's own account and region sweep reads (those without ``account``)."""
    return tuple(c for c in clusters if c.in_target(None, None))


#: EventBridge Scheduler invokes this every ``idle.schedule`` (default 15 minutes); the interactions function invokes
#: it asynchronously for Stop now. In organisation mode the schedule plans one sweep per account and region and the
#: targets queue runs each (``governor.fanout``).
HANDLER: Handler[GovernorEvent, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=_home_aws,
    sweep=POLICY,
    targets=target_aws,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
)
lambda_handler = HANDLER.lambda_handler()
