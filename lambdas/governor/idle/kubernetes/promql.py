"""DCGM exporter metrics through PromQL: the queries (written once, for the sweep and for ``governor backtest``) and
the reading of a range query's answer into the idle domain's series, per GPU or MIG slice, with the pods that held it.

DCGM exporter labels (``internal/pkg/rendermetrics/render_metrics.go``): ``gpu`` (index), ``UUID``, ``device``,
``modelName``, ``GPU_I_PROFILE`` / ``GPU_I_ID`` on a MIG slice, ``hostname`` (``Hostname`` before 3.x), and, with
the kubelet pod-resources mapping, ``namespace``, ``pod``, ``container``. A series names its node; which EC2 instance
that node is comes from kube-state-metrics' ``kube_node_info`` (``provider_id`` ``aws:///<zone>/<instance id>``), or
from the node name itself when it is the instance id (EKS resource-name hostnames). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.domain.decision import Decision
from governor.idle.domain import DEVICE_SEP, GPU_ENGINE_ACTIVE, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, Series

#: signal -> (DCGM field, factor to the domain's unit). GR_ENGINE_ACTIVE is a ratio, the domain reads percent;
#: FB_USED is MiB, the domain's unit; POWER_USAGE is W.
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    GPU_UTILIZATION: ("DCGM_FI_DEV_GPU_UTIL", 1.0),
    GPU_ENGINE_ACTIVE: ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0),
    GPU_MEMORY_USED: ("DCGM_FI_DEV_FB_USED", 1.0),
    GPU_POWER: ("DCGM_FI_DEV_POWER_USAGE", 1.0),
}
SIGNAL_OF_FIELD = {name: signal for signal, (name, _) in DCGM_FIELDS.items()}
#: The labels kept per series: the node, the device (GPU, MIG slice) and who held it.
DEVICE_LABELS = ("gpu", "GPU_I_ID", "GPU_I_PROFILE", "modelName")
POD_LABELS = ("namespace", "pod", "container")
NODE_INFO = "kube_node_info"
_PROVIDER_ID = re.compile(r"^aws:///[^/]*/(i-[0-9a-f]{8,17})$")
_INSTANCE_NAME = re.compile(r"^(i-[0-9a-f]{8,17})(\..*)?$")


def gpu_query(signal: str, node_label: str, selector: str = "") -> str:
    """The one PromQL for a signal: its DCGM field, one series per node, device and pod (max over any duplicates a
    second scrape job would add)."""
    name = DCGM_FIELDS[signal][0]
    by = ", ".join((node_label, *DEVICE_LABELS, *POD_LABELS))
    return f"max by ({by}) ({name}{{{selector}}})"


def node_query(selector: str = "") -> str:
    """Which instance each node is (kube-state-metrics)."""
    return f"max by (node, provider_id) ({NODE_INFO}{{{selector}}})"


def instance_of_provider(provider_id: str) -> str | None:
    match = _PROVIDER_ID.match(provider_id.strip())
    return match.group(1) if match else None


def nodes_to_instances(result: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """node name -> instance id, from ``kube_node_info``'s answer (vector or matrix)."""
    return node_instances(result)[0]


def node_instances(result: Iterable[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """node name -> instance id from ``kube_node_info``'s answer, and the nodes it maps to several instances (a
    relabelled or forged series beside the real one): those are nobody's, never the last one read."""
    claims: dict[str, set[str]] = {}
    for item in result:
        labels = item.get("metric", {})
        instance = instance_of_provider(str(labels.get("provider_id", "")))
        if instance and labels.get("node"):
            claims.setdefault(str(labels["node"]), set()).add(instance)
    known = {node: next(iter(ids)) for node, ids in claims.items() if len(ids) == 1}
    doubled = {node: sorted(ids) for node, ids in claims.items() if len(ids) > 1}
    return known, doubled


def instance_of_node(node: str, known: Mapping[str, str]) -> str | None:
    """The instance a node is: from ``kube_node_info``, else from a resource-name hostname (``i-0abc....internal``)."""
    if node in known:
        return known[node]
    match = _INSTANCE_NAME.match(node)
    return match.group(1) if match else None


def device_of(labels: Mapping[str, str]) -> str:
    """``0`` for GPU 0; ``0/mig11`` for its MIG GPU instance 11 (a slice is judged on its own)."""
    gpu = str(labels.get("gpu", "")).strip() or "?"
    slice_id = str(labels.get("GPU_I_ID", "")).strip()
    return f"{gpu}/mig{slice_id}" if slice_id else gpu


@dataclass(frozen=True)
class Holder:
    """A pod's container that held a GPU (or MIG slice) of a node, as the DCGM exporter's kubelet mapping saw it."""

    namespace: str
    pod: str
    container: str


@dataclass
class NodeReadings:
    """One node's series (``signal@device``) and, per device and minute, the pod that held it."""

    node: str
    series: dict[str, Series] = field(default_factory=dict)
    #: Every node whose series named this instance (more than one: the instance is claimed twice, nobody's).
    nodes: set[str] = field(default_factory=set)
    holders: dict[str, dict[float, Holder]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)


def gpu_pod_series(reading: NodeReadings) -> Series:
    """Per minute the node's devices were read, how many a pod held (the exporter labels a device with the pod the
    kubelet allocated it to, through ``nvidia.com/gpu`` or a MIG resource): 0 for a minute means no pod held a GPU."""
    times = sorted({t for series in reading.series.values() for t in series.times})
    held = [sum(1 for by_time in reading.holders.values() if t in by_time) for t in times]
    return Series(times, [float(n) for n in held])


def holder_of(labels: Mapping[str, str]) -> Holder | None:
    namespace, pod = str(labels.get("namespace", "")).strip(), str(labels.get("pod", "")).strip()
    if not pod:
        return None
    return Holder(namespace or "default", pod, str(labels.get("container", "")).strip())


def read_matrix(
    by_signal: Mapping[str, Iterable[Mapping[str, Any]]], node_label: str, known: Mapping[str, str]
) -> tuple[dict[str, NodeReadings], list[str]]:
    """Range-query answers (``data.result`` of a matrix, per signal) -> readings per instance, and the nodes that
    could not be matched to an instance (reported, never guessed).

    A device seen under several pods in the window (one finished, another started) is one series: the highest
    value per minute, and the pod of that minute kept apart.
    """
    points: dict[str, dict[str, dict[float, float]]] = {}
    readings: dict[str, NodeReadings] = {}
    unmatched: set[str] = set()
    for signal, result in by_signal.items():
        factor = DCGM_FIELDS[signal][1]
        for item in result:
            labels = {str(k): str(v) for k, v in item.get("metric", {}).items()}
            node = labels.get(node_label) or labels.get("Hostname") or labels.get("hostname") or ""
            instance = instance_of_node(node, known)
            if instance is None:
                unmatched.add(node or "(no node label)")
                continue
            reading = readings.setdefault(instance, NodeReadings(node))
            reading.nodes.add(node)
            device = device_of(labels)
            if labels.get("modelName"):
                reading.models[device] = labels["modelName"]
            key = f"{signal}{DEVICE_SEP}{device}"
            by_time = points.setdefault(instance, {}).setdefault(key, {})
            holder = holder_of(labels)
            held = reading.holders.setdefault(device, {})
            for stamp, raw in item.get("values", []):
                value = _number(raw)
                if value is None:
                    continue  # NaN / Inf: no reading, never zero
                second = float(stamp)
                value *= factor
                by_time[second] = max(by_time.get(second, value), value)
                if holder is not None:
                    held[second] = holder
    for instance, keyed in points.items():
        for key, by_time in keyed.items():
            times = sorted(by_time)
            readings[instance].series[key] = Series(times, [by_time[t] for t in times])
    return readings, sorted(unmatched)


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


@dataclass(frozen=True)
class GpuHours:
    """GPU-hours of one namespace (or of nobody: ``namespace`` None), and how many of them the GPU sat idle."""

    namespace: str | None
    team: str | None
    gpu_hours: float
    idle_gpu_hours: float
    pods: tuple[str, ...]

    @property
    def allocated_but_idle(self) -> bool:
        """Held by pods that did not use it: the whole of its hours idle."""
        return self.namespace is not None and self.gpu_hours > 0 and self.idle_gpu_hours >= self.gpu_hours


def attribute(
    readings: Mapping[str, NodeReadings],
    threshold: float,
    teams: Mapping[str, str] | None = None,
    start: float | None = None,
    end: float | None = None,
) -> list[GpuHours]:
    """GPU-hours and idle GPU-hours by namespace (the pod the DCGM exporter mapped to each device, minute by
    minute), including devices no pod held (namespace None). A minute is idle when the device's activity (engine
    activity where published, else utilisation) is below ``threshold``; a minute without a reading counts neither.
    """
    totals: dict[str | None, list[float]] = {}
    pods: dict[str | None, set[str]] = {}
    for reading in readings.values():
        for device, held in _devices(reading).items():
            activity = reading.series.get(f"{GPU_ENGINE_ACTIVE}{DEVICE_SEP}{device}") or reading.series.get(
                f"{GPU_UTILIZATION}{DEVICE_SEP}{device}"
            )
            if activity is None:
                continue
            times = _minutes(activity.times, start, end)
            values = dict(zip(activity.times, activity.values, strict=False))
            for second in times:
                holder = held.get(second)
                namespace = holder.namespace if holder else None
                row = totals.setdefault(namespace, [0.0, 0.0])
                row[0] += 1 / 60
                row[1] += (1 / 60) if values[second] < threshold else 0.0
                if holder:
                    pods.setdefault(namespace, set()).add(f"{holder.namespace}/{holder.pod}")
    return [
        GpuHours(
            namespace,
            (teams or {}).get(namespace, namespace) if namespace else None,
            round(hours, 3),
            round(idle, 3),
            tuple(sorted(pods.get(namespace, ()))),
        )
        for namespace, (hours, idle) in sorted(totals.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    ]


def _devices(reading: NodeReadings) -> dict[str, dict[float, Holder]]:
    names = {key.partition(DEVICE_SEP)[2] for key in reading.series}
    return {device: reading.holders.get(device, {}) for device in sorted(names)}


def _minutes(times: Sequence[float], start: float | None, end: float | None) -> list[float]:
    return [t for t in times if (start is None or t >= start) and (end is None or t < end)]


def attribution_decision(
    cluster: str,
    readings: Mapping[str, NodeReadings],
    threshold: float,
    teams: Mapping[str, str],
    start: float,
    end: float,
) -> Decision | None:
    """One ledger record per cluster and sweep: GPU-hours and idle GPU-hours by namespace over ``[start, end)`` (the
    sweep's own interval, so the records of successive sweeps add up without counting a minute twice)."""
    return gpu_hours_decision(cluster, attribute(readings, threshold, teams, start, end), start, end)


def gpu_hours_decision(cluster: str, rows: Sequence[GpuHours], start: float, end: float) -> Decision | None:
    """The ``idle.gpu-hours`` ledger record of one cluster's rows (from DCGM's pod labels or Container Insights'
    pod metrics), or None when there are none."""
    if not rows:
        return None
    held_idle = [r for r in rows if r.allocated_but_idle]
    reasons = [
        f"{r.namespace or '(no pod)'}: {r.gpu_hours:.2f} GPU-h, {r.idle_gpu_hours:.2f} idle"
        + (" (allocated but idle)" if r.allocated_but_idle else "")
        for r in rows
    ]
    return Decision(
        policy="idle",
        verdict="ok",
        resource=f"eks:{cluster}",
        reasons=reasons,
        evidence={
            "status": "gpu-hours",
            "cluster": cluster,
            "start": start,
            "end": end,
            "namespaces": [
                {
                    "namespace": r.namespace,
                    "team": r.team,
                    "gpu_hours": r.gpu_hours,
                    "idle_gpu_hours": r.idle_gpu_hours,
                    "allocated_but_idle": r.allocated_but_idle,
                    "pods": list(r.pods),
                }
                for r in rows
            ],
        },
        severity="warning" if held_idle else "info",
        rule="idle.gpu-hours",
    )
