"""GPU and instance metrics from CloudWatch, read in as few ``GetMetricData`` calls as the limits allow.

One query per instance and signal, 500 queries per call (fewer when the window is long, so a call stays under
100,800 datapoints), ``NextToken`` followed to the end. The period is 60 s with the ``Maximum`` statistic: with the
agent's InstanceId aggregation that is the busiest GPU's sample for each minute, never an average. The sweep asks
first for window statistics (:meth:`CloudWatchMetrics.window_maxima`, one bucket per query) and for minute points only
of the instances they do not prove plainly busy (``governor.idle.window_statistics``).

GPU memory arrives in the unit the metric source publishes (``idle.gpu_memory_unit``; the CloudWatch agent's
nvidia_smi plugin publishes ``nvidia_smi_memory_used`` in MB, which are nvidia-smi's MiB) and is handed to the
domain in MiB.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from governor.adapters.aws import client
from governor.idle.domain import (
    CPU_UTILIZATION,
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    MEMORY_UNITS,
    NETWORK_BYTES,
    Series,
)

IAM_ACTIONS = frozenset({"cloudwatch:GetMetricData"})
AGENT_NAMESPACE = "CWAgent"
MAX_QUERIES = 500
MAX_DATAPOINTS = 100_800
PERIOD = 60

# signal -> the CloudWatch metrics it is read from (namespace, name, statistic); network sums in and out.
METRICS: dict[str, tuple[tuple[str, str, str], ...]] = {
    GPU_UTILIZATION: ((AGENT_NAMESPACE, "nvidia_smi_utilization_gpu", "Maximum"),),
    GPU_MEMORY_USED: ((AGENT_NAMESPACE, "nvidia_smi_memory_used", "Maximum"),),
    GPU_POWER: ((AGENT_NAMESPACE, "nvidia_smi_power_draw", "Maximum"),),
    # The agent's nvidia_smi input has no graphics-engine activity (DCGM's GR_ENGINE_ACTIVE): nothing to read.
    GPU_ENGINE_ACTIVE: (),
    CPU_UTILIZATION: (("AWS/EC2", "CPUUtilization", "Maximum"),),
    NETWORK_BYTES: (("AWS/EC2", "NetworkIn", "Sum"), ("AWS/EC2", "NetworkOut", "Sum")),
}


def queries_per_call(start: dt.datetime, end: dt.datetime) -> int:
    """500, or fewer when each query's window holds so many points that 500 would pass 100,800 datapoints."""
    points = max(1, int((end - start).total_seconds() // PERIOD))
    return max(1, min(MAX_QUERIES, MAX_DATAPOINTS // points))


class CloudWatchMetrics:
    """Implements ``domain.idle.MetricSource``; counts its API calls so the benchmarks can report them."""

    def __init__(self, region: str | None = None, cloudwatch: Any = None, *, memory_unit: str = "MB") -> None:
        if memory_unit not in MEMORY_UNITS:
            raise ValueError(f"memory_unit {memory_unit!r}: expected one of {', '.join(sorted(MEMORY_UNITS))}")
        self._cloudwatch = cloudwatch or client("cloudwatch", region)
        self._memory_scale = MEMORY_UNITS[memory_unit]
        self.calls = 0

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        """Every signal of every instance between ``start`` and ``end``; an instance without data gets empty series.

        The range is widened to whole minutes, the period's boundaries, so no sample is cut in half.
        """
        start = start.replace(second=0, microsecond=0)
        if end.second or end.microsecond:
            end = end.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        plan: dict[str, tuple[str, str]] = {}
        queries: list[dict[str, Any]] = []
        for instance_id in instance_ids:
            for signal in signals:
                for namespace, name, stat in METRICS[signal]:
                    query_id = f"q{len(queries)}"
                    plan[query_id] = (instance_id, signal)
                    queries.append(metric_query(query_id, instance_id, namespace, name, stat))
        points: dict[tuple[str, str], dict[float, float]] = {(i, s): {} for i in instance_ids for s in signals}
        size = queries_per_call(start, end)
        for first in range(0, len(queries), size):
            for result in self._results(queries[first : first + size], start, end):
                key = plan[result["Id"]]
                by_time = points[key]
                seconds = [stamp.timestamp() for stamp in result.get("Timestamps", [])]
                answered = zip(seconds, result.get("Values", []), strict=False)
                if key[1] != NETWORK_BYTES:
                    by_time.update(answered)  # one metric per signal: each minute once
                    continue
                for second, value in answered:  # network sums in and out
                    by_time[second] = by_time.get(second, 0.0) + float(value)
        found: dict[str, dict[str, Series]] = {instance_id: {} for instance_id in instance_ids}
        for (instance_id, signal), by_time in points.items():
            times = sorted(by_time)
            scale = self._memory_scale if signal == GPU_MEMORY_USED else 1.0
            found[instance_id][signal] = Series(times, [float(by_time[t]) * scale for t in times])
        return found

    def window_maxima(
        self, asks: Mapping[str, Sequence[str]], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, float]]:
        """The sweep's first phase (``governor.idle.window_statistics``): for each instance, each asked signal's
        ``Maximum`` over ``[start, end)`` as one bucket; a signal without a sample there is absent.

        ``start`` and ``end`` are whole minutes and the query's Period is their distance: CloudWatch rounds a
        StartTime less than 15 days old down to the whole minute and buckets from there, so the one bucket holds
        exactly the samples of those minutes, and its ``Maximum`` is the largest per-minute ``Maximum`` the minute
        read would return for them. Only signals read from one metric with the ``Maximum`` statistic can be asked.
        """
        period = int((end - start).total_seconds())
        plan: dict[str, tuple[str, str]] = {}
        queries: list[dict[str, Any]] = []
        for instance_id, signals in asks.items():
            for signal in signals:
                ((namespace, name, stat),) = METRICS[signal]
                if stat != "Maximum":
                    raise ValueError(f"{signal}: only a Maximum over one metric is exact over a window")
                query_id = f"q{len(queries)}"
                plan[query_id] = (instance_id, signal)
                queries.append(metric_query(query_id, instance_id, namespace, name, stat, period))
        found: dict[str, dict[str, float]] = {}
        for first in range(0, len(queries), MAX_QUERIES):
            for result in self._results(queries[first : first + MAX_QUERIES], start, end):
                values = result.get("Values") or []
                if values:
                    instance_id, signal = plan[result["Id"]]
                    found.setdefault(instance_id, {})[signal] = float(max(values))
        return found

    def _results(self, queries: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        def counted() -> None:
            self.calls += 1

        return metric_data(self._cloudwatch, queries, start, end, counted)


def metric_query(
    query_id: str, instance_id: str, namespace: str, name: str, stat: str, period: int = PERIOD
) -> dict[str, Any]:
    """One GetMetricData query: a metric of one instance, ``stat`` per ``period`` seconds (default one minute)."""
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": namespace,
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
            },
            "Period": period,
            "Stat": stat,
        },
        "ReturnData": True,
    }


def metric_data(
    cloudwatch: Any,
    queries: list[dict[str, Any]],
    start: dt.datetime,
    end: dt.datetime,
    on_call: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Every result of one batch of queries (at most 500), ``NextToken`` followed to the end; ``on_call`` before
    each call (the counters of the sweep and of ``backtest --from-cloudwatch``)."""
    results: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": start,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    while True:
        if on_call is not None:
            on_call()
        page = cloudwatch.get_metric_data(**kwargs)
        results.extend(page.get("MetricDataResults", []))
        token = page.get("NextToken")
        if not token:
            return results
        kwargs["NextToken"] = token
