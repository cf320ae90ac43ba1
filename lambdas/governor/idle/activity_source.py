"""Reads the team's activity signals (``idle.activity_signals``) with the instances' GPU series: a metric source
wrapping the policy's own (:func:`governor.idle.sources.metric_source`), so the sweep, the re-read right before
acting and Stop now all see them. One batched ``GetMetricData`` per 500 queries, one query per signal and instance,
each signal's dimensions with ``{instance_id}`` replaced by the instance judged; each series is added as
``activity:<name>`` (:mod:`governor.idle.activity` judges them).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from governor.adapters.aws import client
from governor.idle.activity_policy import ActivitySignal
from governor.idle.domain import ACTIVITY_PREFIX, MetricSource, Series
from governor.idle.metrics import metric_data, queries_per_call
from governor.observability import logger


class WithActivitySignals:
    """``inner``'s series, plus each activity signal of each instance; anything else is ``inner``'s (provenance)."""

    def __init__(
        self, inner: MetricSource, signals: Sequence[ActivitySignal], region: str | None, cloudwatch: Any = None
    ) -> None:
        self._inner = inner
        self._signals = tuple(signals)
        self._region = region
        self._cloudwatch = cloudwatch
        self.calls = 0

    @property
    def wrapped(self) -> MetricSource:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        found = self._inner.fetch(instance_ids, signals, start, end)
        start = start.replace(second=0, microsecond=0)
        if end.second or end.microsecond:
            end = end.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        for read in (self.read, self.read_promql):
            for instance_id, series in read(instance_ids, start, end).items():
                found.setdefault(instance_id, {}).update(series)
        return found

    def read(self, instance_ids: Sequence[str], start: dt.datetime, end: dt.datetime) -> dict[str, dict[str, Series]]:
        """Each CloudWatch signal of each instance over the range; no data (or a failed read): an empty series, which
        the judge calls unknown."""
        plan: dict[str, tuple[str, str]] = {}
        queries: list[dict[str, Any]] = []
        for instance_id in instance_ids:
            for signal in self._signals:
                if signal.promql is None:
                    query_id = f"a{len(queries)}"
                    plan[query_id] = (instance_id, signal.name)
                    queries.append(_query(query_id, signal, instance_id))
        points: dict[tuple[str, str], dict[float, float]] = {key: {} for key in plan.values()}
        try:
            self._cloudwatch_points(queries, plan, points, start, end)
        except Exception as error:  # a signal that cannot be read is unknown (never idle), not a failed sweep
            logger.warning("activity signals not read", extra={"reason": f"{type(error).__name__}: {error}"})
            points = {key: {} for key in plan.values()}
        return _as_series(points)

    def _cloudwatch_points(
        self,
        queries: list[dict[str, Any]],
        plan: dict[str, tuple[str, str]],
        points: dict[tuple[str, str], dict[float, float]],
        start: dt.datetime,
        end: dt.datetime,
    ) -> None:
        if not queries:
            return
        cloudwatch = self._cloudwatch or client("cloudwatch", self._region)
        size = queries_per_call(start, end)
        for first in range(0, len(queries), size):
            for result in metric_data(cloudwatch, queries[first : first + size], start, end, self._counted):
                by_time = points[plan[result["Id"]]]
                for stamp, value in zip(result.get("Timestamps", []), result.get("Values", []), strict=False):
                    by_time[stamp.timestamp()] = float(value)

    def read_promql(
        self, instance_ids: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        """Each PromQL signal, for the instances its cluster's source spoke for in this fetch (its proven nodes): a
        series whose ``label`` names such a node, or the instance itself; any other series is nobody's."""
        clusters: dict[str, Any] = getattr(self._inner, "clusters", {}) or {}
        judged: dict[str, str] = getattr(self._inner, "judged_by", {}) or {}
        points: dict[tuple[str, str], dict[float, float]] = {}
        for signal in self._signals:
            source = clusters.get(signal.cluster or "")
            mine = [i for i in instance_ids if judged.get(i) == signal.cluster]
            if signal.promql is None or source is None or not mine:
                continue
            names = {name: i for i in mine for name in (i, *source.nodes_of(i))}
            for i in mine:
                points[(i, signal.name)] = {}
            try:
                answer = source.range_query(signal.query, start, end)
            except Exception as error:  # unknown for its nodes, never idle
                logger.warning("activity signal not read", extra={"signal": signal.name, "reason": str(error)})
                continue
            for item in answer:
                instance = names.get(str((item.get("metric") or {}).get(signal.label, "")))
                if instance is None:
                    continue
                by_time = points[(instance, signal.name)]
                for stamp, raw in item.get("values", []):
                    value = _number(raw)
                    if value is not None:
                        by_time[float(stamp)] = max(by_time.get(float(stamp), value), value)
        return _as_series(points)

    def _counted(self) -> None:
        self.calls += 1


def _query(query_id: str, signal: ActivitySignal, instance_id: str) -> dict[str, Any]:
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": signal.namespace,
                "MetricName": signal.metric,
                "Dimensions": signal.dimensions_for(instance_id),
            },
            "Period": signal.period_seconds,
            "Stat": signal.statistic,
        },
        "ReturnData": True,
    }


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _as_series(points: dict[tuple[str, str], dict[float, float]]) -> dict[str, dict[str, Series]]:
    found: dict[str, dict[str, Series]] = {}
    for (instance_id, name), by_time in points.items():
        times = sorted(by_time)
        found.setdefault(instance_id, {})[f"{ACTIVITY_PREFIX}{name}"] = Series(times, [by_time[t] for t in times])
    return found
