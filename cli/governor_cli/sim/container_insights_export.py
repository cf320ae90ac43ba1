"""``governor explain --metrics`` and ``governor backtest --metrics`` on what a platform team can export from
Container Insights: the performance log events the CloudWatch agent writes (``/aws/containerinsights/<cluster>/
performance``, Embedded Metric Format), from which CloudWatch makes the ``ContainerInsights`` metrics the sweep
reads. Accepted as ``aws logs filter-log-events`` prints them (``{"events": [{"timestamp", "message"}]}``, the
message the EMF JSON), as a JSON list of events or messages, or as JSON Lines (one EMF object a line, e.g. a Logs
Insights export of ``@message``).

Each GPU record carries the dimensions of the agent's per-GPU declaration (``ClusterName, GpuDevice, InstanceId,
InstanceType, NodeName``; tests/fixtures/container_insights) and the ``node_gpu_*`` fields. They are read with the
sweep's own mapping (``governor.idle.kubernetes.container_insights.METRICS``: memory bytes -> MiB) into one series
per GPU (``signal@GpuDevice``), at one sample a minute holding the minute's maximum, as the sweep's GetMetricData
(period 60 s, statistic Maximum) returns them. Pod records (``pod_gpu_utilization`` with Namespace and
FullPodName) give the GPU-hours by namespace, as the sweep's pod reading does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from governor.idle.domain import DEVICE_SEP, GPU_UTILIZATION, Series
from governor.idle.kubernetes.container_insights import METRICS, POD_UTILIZATION
from governor_cli.sim.metrics_file import MetricsFileError

#: The node GPU fields, and the dimensions a per-GPU record must carry to be judged.
NODE_FIELDS = {name: (signal, factor) for signal, (name, factor) in METRICS.items()}
GPU_DIMENSIONS = ("ClusterName", "InstanceId", "NodeName", "GpuDevice")


def is_container_insights_export(path: Path) -> bool:
    """JSON (or JSON Lines) whose first 64 KiB names a Container Insights GPU field."""
    with path.open("rb") as handle:
        head = handle.read(65536)
    if head.lstrip()[:1] not in (b"{", b"["):
        return False
    return any(name.encode() in head for name in (*NODE_FIELDS, POD_UTILIZATION))


def _records(text: str, where: str) -> Iterator[tuple[Mapping[str, Any], float | None]]:
    """Each EMF object and the log event's own timestamp (seconds), if the export has one."""
    try:
        document: Any = json.loads(text)
    except ValueError:
        document = None
        lines = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise MetricsFileError(f"{where}: line {number}: not a JSON object ({error.msg})") from None
        items: list[Any] = lines
    else:
        items = document.get("events", [document]) if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise MetricsFileError(f"{where}: expected log events (events[].message), a list or JSON Lines")
    for index, item in enumerate(items):
        stamp = None
        if isinstance(item, Mapping) and isinstance(item.get("message"), str):
            stamp = float(item["timestamp"]) / 1000 if isinstance(item.get("timestamp"), int | float) else None
            try:
                item = json.loads(item["message"])
            except ValueError:
                raise MetricsFileError(f"{where}: event {index}: its message is not EMF JSON") from None
        if not isinstance(item, Mapping):
            raise MetricsFileError(f"{where}: event {index}: not a JSON object")
        yield item, stamp


def _timestamp(record: Mapping[str, Any], stamp: float | None, where: str) -> float:
    """EMF's ``_aws.Timestamp`` (ms), else the agent's ``Timestamp`` field (ms, a string), else the log event's."""
    for value in ((record.get("_aws") or {}).get("Timestamp"), record.get("Timestamp")):
        if value is not None:
            try:
                return float(value) / 1000
            except (TypeError, ValueError):
                raise MetricsFileError(f"{where}: Timestamp {value!r} is not milliseconds since the epoch") from None
    if stamp is None:
        raise MetricsFileError(f"{where}: a record without a Timestamp (EMF _aws.Timestamp)")
    return stamp


class Export:
    """What a Container Insights export holds: per node (instance id) its GPUs' signals, its node name and
    cluster, and the pods' GPU utilisation per (namespace, pod, GPU)."""

    def __init__(self) -> None:
        self.minutes: dict[str, dict[str, dict[float, float]]] = {}
        self.nodes: dict[str, str] = {}
        self.clusters: dict[str, str] = {}
        self.pod_minutes: dict[tuple[str, str, str], dict[float, float]] = {}

    def signals(self) -> dict[str, dict[str, Series]]:
        return {
            instance: {key: _series(points) for key, points in keyed.items()}
            for instance, keyed in self.minutes.items()
        }

    def pod_gpus(self) -> dict[tuple[str, str, str], Series]:
        return {key: _series(points) for key, points in self.pod_minutes.items()}

    def node_gpus(self) -> dict[tuple[str, str], Series]:
        return {
            (instance, key.partition(DEVICE_SEP)[2]): series
            for instance, keyed in self.signals().items()
            for key, series in keyed.items()
            if key.startswith(GPU_UTILIZATION + DEVICE_SEP)
        }


def _series(points: Mapping[float, float]) -> Series:
    times = sorted(points)
    return Series(times, [points[t] for t in times])


def _keep_max(points: dict[float, float], minute: float, value: float) -> None:
    points[minute] = max(value, points.get(minute, value))


def read_export(path: Path) -> Export:
    where = str(path)
    export = Export()
    for record, stamp in _records(path.read_text(encoding="utf-8-sig"), where):
        fields = [name for name in NODE_FIELDS if name in record]
        pod = POD_UTILIZATION in record and all(record.get(d) for d in ("Namespace", "FullPodName", "GpuDevice"))
        if not fields and not pod:
            continue  # CPU, memory, network and the other Container Insights records
        minute = _timestamp(record, stamp, where) // 60 * 60
        if pod:
            held = (str(record["Namespace"]), str(record["FullPodName"]), str(record["GpuDevice"]))
            _keep_max(export.pod_minutes.setdefault(held, {}), minute, _number(record, POD_UTILIZATION, where))
        if not fields:
            continue
        missing = [d for d in GPU_DIMENSIONS if not record.get(d)]
        if missing:  # a rollup (the cluster's or the node's over its GPUs): the sweep judges per GPU
            continue
        instance = str(record["InstanceId"])
        export.nodes[instance] = str(record["NodeName"])
        export.clusters[instance] = str(record["ClusterName"])
        for name in fields:
            signal, factor = NODE_FIELDS[name]
            key = f"{signal}{DEVICE_SEP}{record['GpuDevice']}"
            points = export.minutes.setdefault(instance, {}).setdefault(key, {})
            _keep_max(points, minute, _number(record, name, where) * factor)
    if not export.minutes:
        raise MetricsFileError(
            f"{where}: no Container Insights GPU records ({', '.join(NODE_FIELDS)} with dimensions "
            f"{', '.join(GPU_DIMENSIONS)})"
        )
    return export


def _number(record: Mapping[str, Any], name: str, where: str) -> float:
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetricsFileError(f"{where}: {name} {value!r} is not a number")
    return float(value)


def namespaces(export: Export, threshold: float) -> list[dict[str, Any]]:
    """GPU-hours by namespace over the whole export, counted by the sweep's Container Insights source."""
    from governor.idle.kubernetes.container_insights import ContainerInsightsMetrics

    source = ContainerInsightsMetrics("export", cloudwatch=_NO_CLOUDWATCH)
    source.pod_gpus, source.node_gpus = export.pod_gpus(), export.node_gpus()
    return [
        {
            "namespace": row.namespace,
            "gpu_hours": row.gpu_hours,
            "idle_gpu_hours": row.idle_gpu_hours,
            "allocated_but_idle": row.allocated_but_idle,
            "pods": list(row.pods),
        }
        for row in source.gpu_hours(threshold, {}, float("-inf"), float("inf"))
    ]


class _NoCloudWatch:
    """The export is already read: the source only counts, it calls nothing."""


_NO_CLOUDWATCH = _NoCloudWatch()
