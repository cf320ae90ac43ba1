"""GPU metrics of EKS nodes from Container Insights with enhanced observability (namespace ``ContainerInsights``).

Schema (AWS, "Amazon EKS and Kubernetes Container Insights with enhanced observability metrics",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html):
``node_gpu_utilization`` (percent), ``node_gpu_memory_used`` (bytes), ``node_gpu_power_draw`` (W), per node with
dimensions ClusterName, InstanceId, NodeName and per GPU with GpuDevice as well. The exact dimension sets are found
with ``ListMetrics`` filtered on the cluster (one paginated call per metric name, not per node): GetMetricData
needs every dimension, and SEARCH expressions are billed per metric they find. Then one ``GetMetricData`` query per
series, 500 a call. There is no graphics-engine activity here (DCGM's GR_ENGINE_ACTIVE): utilisation is judged.

Namespace attribution reads the pod-level ``pod_gpu_utilization`` (the same DCGM reading as the node's, copied by the
agent for the GPU a pod holds) at its finest published dimension set, ``ClusterName, FullPodName, GpuDevice,
Namespace, PodName`` (the agent's own EMF declarations: tests/fixtures/container_insights). Those carry no node, so
the figures are the cluster's: GPU-hours and idle GPU-hours per namespace from the pods' series, and the GPUs of the
judged nodes no pod held as "(no pod)" (their node minutes less the pods' minutes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from governor.adapters.aws import client
from governor.idle.domain import DEVICE_SEP, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, Series
from governor.idle.kubernetes.promql import GpuHours
from governor.idle.metrics import PERIOD, metric_data, queries_per_call

IAM_ACTIONS = frozenset({"cloudwatch:ListMetrics", "cloudwatch:GetMetricData"})
NAMESPACE = "ContainerInsights"
#: signal -> (metric name, factor to the domain's unit): memory arrives in bytes, the domain reads MiB.
METRICS: dict[str, tuple[str, float]] = {
    GPU_UTILIZATION: ("node_gpu_utilization", 1.0),
    GPU_MEMORY_USED: ("node_gpu_memory_used", 1.0 / (1024 * 1024)),
    GPU_POWER: ("node_gpu_power_draw", 1.0),
}
POD_UTILIZATION = "pod_gpu_utilization"
#: The finest dimension set ``pod_gpu_*`` is published with (one series per pod and GPU).
POD_DIMENSIONS = frozenset({"ClusterName", "FullPodName", "GpuDevice", "Namespace", "PodName"})


class ContainerInsightsMetrics:
    """Implements ``governor.idle.domain.MetricSource`` for one EKS cluster's Container Insights GPU metrics."""

    def __init__(self, cluster: str, region: str | None = None, cloudwatch: Any = None) -> None:
        self._cluster = cluster
        self._cloudwatch = cloudwatch or client("cloudwatch", region)
        self.nodes: dict[str, str] = {}  # instance id -> node name
        self.calls = 0
        #: The last fetch's per-GPU utilisation of the judged nodes, and per (namespace, pod, GPU) of the pods.
        self.node_gpus: dict[tuple[str, str], Series] = {}
        self.pod_gpus: dict[tuple[str, str, str], Series] = {}
        #: instance id -> its NodeName (last fetch); instance id -> why its series were refused (two NodeNames).
        self.node_names: dict[str, set[str]] = {}
        self.refused: dict[str, str] = {}

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        """Per GPU (``signal@GpuDevice``) where published, else the node's aggregate, of the instances asked for
        that are nodes of this cluster; the others are left out."""
        ids = set(instance_ids)
        start = start.replace(second=0, microsecond=0)
        names: dict[str, set[str]] = {}
        plan: dict[str, tuple[str, str, float]] = {}
        queries: list[dict[str, Any]] = []
        for signal in signals:
            if signal not in METRICS:
                continue
            name, factor = METRICS[signal]
            for metric in self._list(name):
                dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                instance = dims.get("InstanceId")
                if instance not in ids or "NodeName" not in dims:
                    continue
                self.nodes[instance] = dims["NodeName"]
                names.setdefault(instance, set()).add(dims["NodeName"])
                device = dims.get("GpuDevice")
                key = f"{signal}{DEVICE_SEP}{device}" if device else signal
                query_id = f"q{len(queries)}"
                plan[query_id] = (instance, key, factor)
                queries.append(
                    {
                        "Id": query_id,
                        "MetricStat": {
                            "Metric": {"Namespace": NAMESPACE, "MetricName": name, "Dimensions": metric["Dimensions"]},
                            "Period": PERIOD,
                            "Stat": "Maximum",
                        },
                        "ReturnData": True,
                    }
                )
        # One InstanceId under two NodeNames: one of them is not that instance (anyone may PutMetricData here).
        self.refused = {
            i: f"InstanceId {i} is published under nodes {' and '.join(sorted(n))}"
            for i, n in names.items()
            if len(n) > 1
        }
        self.node_names = {i: n for i, n in names.items() if i not in self.refused}
        found: dict[str, dict[str, Series]] = {}
        for query_id, series in self._read(queries, start, end).items():
            instance, key, factor = plan[query_id]
            if instance in self.refused:
                continue
            found.setdefault(instance, {})[key] = Series(series.times, [v * factor for v in series.values])
        self.node_gpus = {
            (instance, key.partition(DEVICE_SEP)[2]): series
            for instance, keyed in found.items()
            for key, series in keyed.items()
            if key.startswith(GPU_UTILIZATION + DEVICE_SEP)
        }
        self.pod_gpus = self._pods(start, end) if found else {}
        return found

    def nodes_of(self, instance_id: str) -> set[str]:
        """The NodeName the last fetch's series of ``instance_id`` were published under."""
        return set(self.node_names.get(instance_id, ()))

    def keep_only(self, instance_ids: set[str]) -> None:
        """Forget the node readings of instances this source may not speak for (they count in no GPU-hours)."""
        self.node_gpus = {key: s for key, s in self.node_gpus.items() if key[0] in instance_ids}

    def _pods(self, start: dt.datetime, end: dt.datetime) -> dict[tuple[str, str, str], Series]:
        """``pod_gpu_utilization`` per (namespace, full pod name, GPU) of this cluster."""
        keys: dict[str, tuple[str, str, str]] = {}
        queries: list[dict[str, Any]] = []
        for metric in self._list(POD_UTILIZATION):
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            if set(dims) != POD_DIMENSIONS:
                continue  # a rollup (namespace, service, pod without GPU): counted at the finest set only
            query_id = f"p{len(queries)}"
            keys[query_id] = (dims["Namespace"], dims["FullPodName"], dims["GpuDevice"])
            queries.append(
                {
                    "Id": query_id,
                    "MetricStat": {
                        "Metric": {
                            "Namespace": NAMESPACE,
                            "MetricName": POD_UTILIZATION,
                            "Dimensions": metric["Dimensions"],
                        },
                        "Period": PERIOD,
                        "Stat": "Maximum",
                    },
                    "ReturnData": True,
                }
            )
        return {keys[query_id]: series for query_id, series in self._read(queries, start, end).items()}

    def _read(self, queries: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> dict[str, Series]:
        read: dict[str, Series] = {}
        size = queries_per_call(start, end)
        for first in range(0, len(queries), size):
            for result in metric_data(self._cloudwatch, queries[first : first + size], start, end, self._counted):
                pairs = sorted(
                    zip((t.timestamp() for t in result.get("Timestamps", [])), result.get("Values", []), strict=False)
                )
                read[result["Id"]] = Series([t for t, _ in pairs], [float(v) for _, v in pairs])
        return read

    def gpu_hours(self, threshold: float, teams: Mapping[str, str], start: float, end: float) -> list[GpuHours]:
        """GPU-hours and idle GPU-hours by namespace over ``[start, end)`` from the pods' series (a minute is idle
        below ``threshold``), and the judged nodes' GPU minutes no pod accounts for as namespace None."""
        totals: dict[str | None, list[float]] = {}
        pods: dict[str, set[str]] = {}

        def add(namespace: str | None, series: Series) -> None:
            row = totals.setdefault(namespace, [0.0, 0.0])
            for at, value in zip(series.times, series.values, strict=False):
                if start <= at < end:
                    row[0] += 1 / 60
                    row[1] += 1 / 60 if value < threshold else 0.0

        for (namespace, pod, _), series in self.pod_gpus.items():
            add(namespace, series)
            pods.setdefault(namespace, set()).add(f"{namespace}/{pod}")
        held = [row[:] for key, row in totals.items() if key is not None]
        for series in self.node_gpus.values():
            add(None, series)
        if None in totals:  # the nodes' GPU minutes less those the pods held (never below zero)
            nobody = totals[None]
            nobody[0] = max(nobody[0] - sum(r[0] for r in held), 0.0)
            nobody[1] = max(nobody[1] - sum(r[1] for r in held), 0.0)
        return [
            GpuHours(
                namespace,
                teams.get(namespace, namespace) if namespace else None,
                round(hours, 3),
                round(idle, 3),
                tuple(sorted(pods.get(namespace or "", ()))),
            )
            for namespace, (hours, idle) in sorted(totals.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
            if hours > 0
        ]

    def _list(self, name: str) -> list[dict[str, Any]]:
        metrics: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "Namespace": NAMESPACE,
            "MetricName": name,
            "Dimensions": [{"Name": "ClusterName", "Value": self._cluster}],
        }
        while True:
            self._counted()
            page = self._cloudwatch.list_metrics(**kwargs)
            metrics.extend(page.get("Metrics", []))
            token = page.get("NextToken")
            if not token:
                return metrics
            kwargs["NextToken"] = token

    def _counted(self) -> None:
        self.calls += 1
