"""A fleet's own metric history from CloudWatch, for ``governor backtest --from-cloudwatch`` (an adapter: boto3).

CloudWatch keeps one-minute data for 15 days. The history is read in time order, a slice at a time, with
``GetMetricData`` at its limits: 500 queries a call, each over at most 201 one-minute points (500 x 201 = 100,500,
under the 100,800 datapoints a call may return), ``NextToken`` followed to the end. Each slice of the whole fleet
becomes one Parquet row group, so memory holds one slice, never the fortnight. The queries are the sweep's own
(``governor.idle.metrics.METRICS``: the agent's ``Maximum`` per minute under the InstanceId aggregation; no SEARCH
expression, which the emulator would ignore and AWS would bill per metric found). GetMetricData is billed per metric
requested: instances x signals x slices (``cost_estimate``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from governor.idle.domain import GPU_MEMORY_USED, MEMORY_UNITS, NETWORK_BYTES
from governor.idle.metrics import MAX_DATAPOINTS, MAX_QUERIES, METRICS, metric_data, metric_query

IAM_ACTIONS = frozenset({"cloudwatch:GetMetricData", "ec2:DescribeInstances"})
SLICE_MINUTES = MAX_DATAPOINTS // MAX_QUERIES  # 201 points a query, so 500 queries stay under 100,800 datapoints
RETENTION_DAYS = 15  # one-minute CloudWatch data
USD_PER_1000_METRICS = 0.01  # GetMetricData, us-east-1 list price (https://aws.amazon.com/cloudwatch/pricing/)


def plan(instances: int, signals: Sequence[str], start: dt.datetime, end: dt.datetime) -> tuple[int, int, int]:
    """(slices, queries per slice, GetMetricData calls) for a history read."""
    queries = instances * sum(len(METRICS[s]) for s in signals)
    slices = math.ceil((end - start).total_seconds() / 60 / SLICE_MINUTES)
    return slices, queries, slices * math.ceil(queries / MAX_QUERIES)


def cost_estimate(instances: int, signals: Sequence[str], start: dt.datetime, end: dt.datetime) -> float:
    """What the read costs at the list price: every query of every slice is one metric requested."""
    slices, queries, _ = plan(instances, signals, start, end)
    return slices * queries * USD_PER_1000_METRICS / 1000


class CloudWatchHistory:
    """Reads every signal of every instance between two times, in time-ordered slices; counts its calls."""

    def __init__(
        self,
        cloudwatch: Any,
        *,
        memory_unit: str = "MB",
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self._cloudwatch = cloudwatch
        self._memory_scale = MEMORY_UNITS[memory_unit]
        self._progress = progress
        self.calls = 0
        self.datapoints = 0

    def groups(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> Iterator[tuple[Any, Any, Any, Any]]:
        """Row groups for ``governor_cli.sim.parquet.write``: (epoch seconds, (instance indexes, ids), (metric
        codes, names), values), one per slice, in time order; GPU memory in MiB."""
        import numpy as np

        start = start.replace(second=0, microsecond=0)
        end = end.replace(second=0, microsecond=0)
        names = list(signals)
        queries: list[dict[str, Any]] = []
        owners: list[tuple[int, int]] = []  # per query: (instance index, signal code)
        for position, instance_id in enumerate(instance_ids):
            for code, signal in enumerate(names):
                for namespace, metric, stat in METRICS[signal]:
                    owners.append((position, code))
                    queries.append(metric_query(f"q{len(queries)}", instance_id, namespace, metric, stat))
        if NETWORK_BYTES in names:
            raise ValueError("network_bytes is not read into a backtest (it sums two metrics); leave it out")
        owner_position = np.array([o[0] for o in owners], dtype=np.int64)
        owner_code = np.array([o[1] for o in owners], dtype=np.int64)
        memory = names.index(GPU_MEMORY_USED) if GPU_MEMORY_USED in names else -1
        _, _, total = plan(len(instance_ids), signals, start, end)
        slice_length = dt.timedelta(minutes=SLICE_MINUTES)
        low = start
        while low < end:
            high = min(end, low + slice_length)
            stamps: list[Any] = []
            where: list[Any] = []
            values: list[Any] = []
            for first in range(0, len(queries), MAX_QUERIES):
                batch = queries[first : first + MAX_QUERIES]
                for result in self._results(batch, low, high, total):
                    times = result.get("Timestamps", [])
                    if not times:
                        continue
                    stamps.append(np.array([int(t.timestamp()) for t in times], dtype=np.int64))
                    where.append(np.full(len(times), int(result["Id"][1:]), dtype=np.int64))
                    values.append(np.array(result.get("Values", []), dtype=np.float64))
            if stamps:
                second, query, value = np.concatenate(stamps), np.concatenate(where), np.concatenate(values)
                self.datapoints += len(value)
                position, code = owner_position[query], owner_code[query]
                order = np.lexsort((code, position, second))
                second, position, code, value = second[order], position[order], code[order], value[order]
                value = np.where(code == memory, value * self._memory_scale, value)
                yield (second, (position.astype(np.int32), list(instance_ids)), (code.astype(np.int8), names), value)
            low = high

    def _results(self, queries: list[dict[str, Any]], start: dt.datetime, end: dt.datetime, total: int) -> list[Any]:
        def counted() -> None:
            self.calls += 1
            if self._progress is not None:
                self._progress(self.calls, total)

        return metric_data(self._cloudwatch, queries, start, end, counted)
