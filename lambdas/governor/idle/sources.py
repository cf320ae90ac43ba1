"""The metric sources the idle sweep reads GPU signals from, by the name ``idle.metric_source`` gives, combined with
the sources of the EKS clusters ``idle.clusters`` names.

Each source implements ``governor.idle.domain.MetricSource``: for each instance, the series of the signals asked
for (utilisation or graphics-engine activity, memory in MiB, power in W; CPU and network from EC2), keyed by signal,
or ``signal@device`` per GPU or MIG slice where the source publishes them. The decision code reads only that shape,
so a new source is one module and one entry here; nothing in the idle rule changes. Each factory imports its adapter
only when chosen.

One sweep may combine sources (:class:`CombinedMetrics`): each cluster's source is asked for every instance and
speaks only for the instances EC2's own record proves are its nodes (``governor.idle.provenance``: the cluster tags as
DescribeInstances returns them, AWS's launch tags, and the node's providerID where the Kubernetes API is read); its
series for any other instance are refused, counted and named in that instance's decision. ``idle.metric_source`` is
read for every instance, and where both have data both are judged: busy from either wins. A cluster source that
cannot be read leaves its nodes to the instance source, where a node without the CloudWatch agent has no data:
unmonitored, never idle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from governor.domain.decision import Decision
from governor.domain.fleet import Instance
from governor.idle.activity_policy import ActivitySignal
from governor.idle.domain import MetricSource, Series
from governor.idle.policy import IdlePolicy, KubernetesCluster
from governor.idle.provenance import (
    INSTANCE_SOURCE_DEVICE,
    Provenance,
    api_refusal,
    cluster_refusal,
    combined,
    has_gpu_data,
)
from governor.observability import logger, metrics


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
    """Implements ``MetricSource``: each cluster's source for the instances EC2's record proves are its nodes
    (``governor.idle.provenance``), the instance source for every instance; busy from either wins."""

    def __init__(self, instances: MetricSource, clusters: dict[str, MetricSource]) -> None:
        self.instances = instances
        self.clusters = clusters
        #: instance id -> the cluster whose source judged it (last fetch); cluster -> why it could not be read.
        self.judged_by: dict[str, str] = {}
        self.failures: dict[str, str] = {}
        self.provenance = Provenance()
        #: The sweep's own EC2 records (``provenance.vouch``): a cluster's source speaks for none of the others.
        self._records: dict[str, Instance] = {}
        self._nodes: Any = None
        self._read_api: frozenset[str] = frozenset()
        self._api: dict[str, dict[str, str] | str] = {}

    def know(self, instances: Iterable[Instance], nodes: Any = None, read_api: frozenset[str] = frozenset()) -> None:
        """The instances as the sweep's DescribeInstances returned them; ``nodes`` reads the API of the clusters in
        ``read_api`` (their nodes' providerIDs), once per sweep."""
        self._records = {i.id: i for i in instances}
        self._nodes, self._read_api, self._api = nodes, read_api, {}

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        asked = list(instance_ids)
        spoken: dict[str, tuple[str, dict[str, Series]]] = {}
        self.judged_by, self.failures, self.provenance = {}, {}, Provenance()
        for name, source in self.clusters.items():
            try:
                answer = source.fetch(asked, signals, start, end)
            except Exception as error:  # one cluster's endpoint down must not blind the whole sweep
                self.failures[name] = f"{type(error).__name__}: {error}"
                continue
            for instance, why in (getattr(source, "refused", None) or {}).items():
                self.provenance.refuse(instance, name, why)
            for instance, series in answer.items():
                if not has_gpu_data(series):
                    continue
                why = self._refusal(name, source, instance)
                if why is None and instance in spoken:
                    why = f"cluster {spoken[instance][0]} already speaks for it"
                if why is not None:
                    self.provenance.refuse(instance, name, why)
                    continue
                spoken[instance] = (name, dict(series))
            keep = getattr(source, "keep_only", None)
            if callable(keep):
                keep({i for i, (cluster, _) in spoken.items() if cluster == name})
        # The instance source for every instance: an agent on a node speaks for it too, and its host signals are EC2's.
        found = self.instances.fetch(asked, signals, start, end) if asked else {}
        for instance in asked:
            if has_gpu_data(found.get(instance, {})):
                self.provenance.speak(instance, INSTANCE_SOURCE_DEVICE)
        for instance, (name, series) in spoken.items():
            found[instance] = combined(series, found.get(instance, {}))
            self.judged_by[instance] = name
            self.provenance.speak(instance, f"cluster {name}")
        if self.provenance.refused:
            logger.warning(
                "metric series refused: no proof the source speaks for the instance",
                extra={"refused": self.provenance.refused},
            )
            metrics.add_metric(name="MetricSeriesRefused", unit="Count", value=len(self.provenance.refused))
        return found

    def _refusal(self, cluster: str, source: Any, instance: str) -> str | None:
        why = cluster_refusal(cluster, self._records.get(instance))
        if why is not None or cluster not in self._read_api or self._nodes is None:
            return why
        api = self._api_nodes(cluster)
        if isinstance(api, str):
            return api
        nodes_of = getattr(source, "nodes_of", None)
        return api_refusal(instance, nodes_of(instance) if callable(nodes_of) else (), api)

    def _api_nodes(self, cluster: str) -> dict[str, str] | str:
        """node -> instance from the cluster's API (its providerIDs), read once a sweep; why not, when it cannot be."""
        if cluster not in self._api:
            try:
                self._api[cluster] = dict(self._nodes.node_instances(cluster))
            except Exception as error:  # unreadable: the series are unproven, the nodes unmonitored (never idle)
                self._api[cluster] = f"the cluster's API could not be read to prove its nodes ({error})"
        return self._api[cluster]


def attribution(source: MetricSource, policy: IdlePolicy, start: dt.datetime, end: dt.datetime) -> list[Decision]:
    """GPU-hours by namespace of each cluster whose source knows the pods (DCGM through Prometheus, Container
    Insights' pod metrics), over the sweep's interval ``[start, end)``: ledger records for the report."""
    source = getattr(source, "wrapped", source)  # under the team's activity signals (activity_source)
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
    activity: Sequence[ActivitySignal] = (),
) -> MetricSource:
    """The source the policy names, reading in ``region`` (through ``cloudwatch`` when given: a member account),
    combined with the sources of ``clusters`` when there are any (AMP signed with ``credentials`` when given: the
    spoke role's in a member account), and the team's ``activity`` signals read with them."""
    try:
        factory = SOURCES[name]
    except KeyError:
        raise ValueError(f"idle.metric_source {name!r}: expected one of {', '.join(sorted(SOURCES))}") from None
    source = factory(region, cloudwatch, memory_unit)
    if clusters:
        source = CombinedMetrics(
            source, {c.name: CLUSTER_SOURCES[c.metric_source](c, region, cloudwatch, credentials) for c in clusters}
        )
    if not activity:
        return source
    from governor.idle.activity_source import WithActivitySignals

    return WithActivitySignals(source, activity, region, cloudwatch)
