"""GPU metrics of EKS nodes from Container Insights with enhanced observability (namespace ``ContainerInsights``).

Schema (AWS, "Amazon EKS and Kubernetes Container Insights with enhanced observability metrics",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html):
``node_gpu_utilization`` (percent), ``node_gpu_memory_used`` (bytes), ``node_gpu_power_draw`` (W), per node with
dimensions ClusterName, InstanceId, NodeName and per GPU with GpuDevice as well. The exact dimension sets are found
with ``ListMetrics`` filtered on the cluster (one paginated call per metric name, not per node): GetMetricData
needs every dimension, and SEARCH expressions are billed per metric they find. Then one ``GetMetricData`` query per
series, 500 a call. There is no graphics-engine activity here (DCGM's GR_ENGINE_ACTIVE): utilisation is judged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from governor.adapters.aws import client
from governor.idle.domain import DEVICE_SEP, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, Series
from governor.idle.metrics import PERIOD, metric_data, queries_per_call

IAM_ACTIONS = frozenset({"cloudwatch:ListMetrics", "cloudwatch:GetMetricData"})
NAMESPACE = "ContainerInsights"
#: signal -> (metric name, factor to the domain's unit): memory arrives in bytes, the domain reads MiB.
METRICS: dict[str, tuple[str, float]] = {
    GPU_UTILIZATION: ("node_gpu_utilization", 1.0),
    GPU_MEMORY_USED: ("node_gpu_memory_used", 1.0 / (1024 * 1024)),
    GPU_POWER: ("node_gpu_power_draw", 1.0),
}


class ContainerInsightsMetrics:
    """Implements ``governor.idle.domain.MetricSource`` for one EKS cluster's Container Insights GPU metrics."""

    def __init__(self, cluster: str, region: str | None = None, cloudwatch: Any = None) -> None:
        self._cluster = cluster
        self._cloudwatch = cloudwatch or client("cloudwatch", region)
        self.nodes: dict[str, str] = {}  # instance id -> node name
        self.calls = 0

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        """Per GPU (``signal@GpuDevice``) where published, else the node's aggregate, of the instances asked for
        that are nodes of this cluster; the others are left out."""
        ids = set(instance_ids)
        start = start.replace(second=0, microsecond=0)
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
        found: dict[str, dict[str, Series]] = {}
        size = queries_per_call(start, end)
        for first in range(0, len(queries), size):
            for result in metric_data(self._cloudwatch, queries[first : first + size], start, end, self._counted):
                instance, key, factor = plan[result["Id"]]
                pairs = sorted(
                    zip((t.timestamp() for t in result.get("Timestamps", [])), result.get("Values", []), strict=False)
                )
                found.setdefault(instance, {})[key] = Series(
                    [t for t, _ in pairs], [float(v) * factor for _, v in pairs]
                )
        return found

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
