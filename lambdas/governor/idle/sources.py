"""The metric sources the idle sweep reads GPU signals from, by the name ``idle.metric_source`` gives, combined with
the sources of the EKS clusters ``idle.clusters`` names.

Each source implements ``governor.idle.domain.MetricSource``: for each instance, the series of the signals asked
for (utilisation or graphics-engine activity, memory in MiB, power in W; CPU and network from EC2), keyed by signal,
or ``signal@device`` per GPU or MIG slice where the source publishes them. The decision code reads only that shape,
so a new source is one module and one entry here; nothing in the idle rule changes. Each factory imports its adapter
only when chosen.

One sweep may combine sources (:class:`CombinedMetrics`): each cluster's source is asked for every instance and
answers for the nodes it has series of (the DCGM exporter's node label, or Container Insights' InstanceId); every
other instance is read from ``idle.metric_source``. Which source judges a node is decided by where its metrics are,
never by its tags. A cluster source that cannot be read leaves its nodes to the instance source, where a node without
the CloudWatch agent has no data: unmonitored, never idle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from governor.domain.decision import Decision
from governor.idle.domain import DEVICE_SEP, HOST_SIGNALS, MetricSource, Series
from governor.idle.policy import IdlePolicy, KubernetesCluster


def _cloudwatch_agent(region: str | None, cloudwatch: Any, memory_unit: str) -> MetricSource:
    from governor.idle.metrics import CloudWatchMetrics

    return CloudWatchMetrics(region, cloudwatch, memory_unit=memory_unit)


#: ``idle.metric_source`` -> factory(region, CloudWatch client or None, GPU memory unit).
SOURCES: dict[str, Callable[[str | None, Any, str], MetricSource]] = {"cloudwatch_agent": _cloudwatch_agent}


def _prometheus(
    cluster: KubernetesCluster, region: str | None, cloudwatch: Any, credentials: Callable[[], Any] | None = None
) -> MetricSource:
    """``credentials``: what AMP requests are signed with (the spoke role's in a member account; default the
    function's own)."""
    from governor.idle.kubernetes.prometheus import PrometheusMetrics

    return PrometheusMetrics(
        str(cluster.prometheus_url),
        node_label=cluster.node_label,
        selector=cluster.selector,
        sign=cluster.sigv4_region,
        credentials=credentials,
    )


def _container_insights(
    cluster: KubernetesCluster, region: str | None, cloudwatch: Any, credentials: Callable[[], Any] | None = None
) -> MetricSource:
    from governor.idle.kubernetes.container_insights import ContainerInsightsMetrics

    return ContainerInsightsMetrics(cluster.name, region, cloudwatch)


#: ``idle.clusters[].metric_source`` -> factory(cluster, region, CloudWatch client or None, signing credentials or
#: None).
CLUSTER_SOURCES: dict[str, Callable[[KubernetesCluster, str | None, Any, Callable[[], Any] | None], MetricSource]] = {
    "prometheus": _prometheus,
    "container_insights": _container_insights,
}


class CombinedMetrics:
    """Implements ``MetricSource``: the clusters' sources for their nodes, the instance source for the rest."""

    def __init__(self, instances: MetricSource, clusters: dict[str, MetricSource]) -> None:
        self.instances = instances
        self.clusters = clusters
        #: instance id -> the cluster whose source judged it (last fetch); cluster -> why it could not be read.
        self.judged_by: dict[str, str] = {}
        self.failures: dict[str, str] = {}

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        found: dict[str, dict[str, Series]] = {}
        self.judged_by, self.failures = {}, {}
        for name, source in self.clusters.items():
            remaining = [i for i in instance_ids if i not in found]
            if not remaining:
                break
            try:
                answer = source.fetch(remaining, signals, start, end)
            except Exception as error:  # one cluster's endpoint down must not blind the whole sweep
                self.failures[name] = f"{type(error).__name__}: {error}"
                continue
            for instance, series in answer.items():
                if any(s.times for key, s in series.items() if key.partition(DEVICE_SEP)[0] not in HOST_SIGNALS):
                    found[instance] = dict(series)
                    self.judged_by[instance] = name
        rest = [i for i in instance_ids if i not in found]
        answer = self.instances.fetch(rest, signals, start, end) if rest else {}
        found.update(answer)
        host = [s for s in signals if s in HOST_SIGNALS]
        judged = list(self.judged_by)
        if host and judged:  # CPU and network of a node still come from EC2 (the instance source)
            for instance, series in self.instances.fetch(judged, host, start, end).items():
                found[instance].update({k: v for k, v in series.items() if k in HOST_SIGNALS})
        return found


def attribution(source: MetricSource, policy: IdlePolicy, start: dt.datetime, end: dt.datetime) -> list[Decision]:
    """GPU-hours by namespace of each cluster whose source knows the pods (DCGM through Prometheus, Container
    Insights' pod metrics), over the sweep's interval ``[start, end)``: ledger records for the report."""
    if not isinstance(source, CombinedMetrics):
        return []
    from governor.idle.kubernetes.promql import gpu_hours_decision

    teams = {c.name: c.namespace_teams for c in policy.clusters}
    found = []
    for name, cluster in source.clusters.items():
        gpu_hours = getattr(cluster, "gpu_hours", None)  # Prometheus (DCGM pod labels), Container Insights (pod_gpu_*)
        if gpu_hours is None:
            continue
        rows = gpu_hours(policy.gpu_utilization_threshold, teams.get(name, {}), start.timestamp(), end.timestamp())
        decision = gpu_hours_decision(name, rows, start.timestamp(), end.timestamp())
        if decision is not None:
            found.append(decision)
    return found


def metric_source(
    name: str,
    region: str | None,
    cloudwatch: Any = None,
    memory_unit: str = "MB",
    clusters: tuple[KubernetesCluster, ...] = (),
    credentials: Callable[[], Any] | None = None,
) -> MetricSource:
    """The source the policy names, reading in ``region`` (through ``cloudwatch`` when given: a member account),
    combined with the sources of ``clusters`` when there are any (AMP signed with ``credentials`` when given: the
    spoke role's in a member account)."""
    try:
        factory = SOURCES[name]
    except KeyError:
        raise ValueError(f"idle.metric_source {name!r}: expected one of {', '.join(sorted(SOURCES))}") from None
    instances = factory(region, cloudwatch, memory_unit)
    if not clusters:
        return instances
    return CombinedMetrics(
        instances, {c.name: CLUSTER_SOURCES[c.metric_source](c, region, cloudwatch, credentials) for c in clusters}
    )
