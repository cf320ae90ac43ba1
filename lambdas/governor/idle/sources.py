"""The metric sources the idle sweep reads GPU signals from, by the name ``idle.metric_source`` gives.

Each source implements ``governor.idle.domain.MetricSource``: for each instance, the series of the signals asked
for (utilisation or graphics-engine activity, memory in MiB, power in W; CPU and network from EC2), keyed by signal,
or ``signal@device`` per GPU or MIG slice where the source publishes them. The decision code reads only that shape,
so a new source (Container Insights, Prometheus / Amazon Managed Prometheus with DCGM) is one module and one entry
here; nothing in the idle rule changes. Each factory imports its adapter only when chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from governor.idle.domain import MetricSource


def _cloudwatch_agent(region: str | None, cloudwatch: Any, memory_unit: str) -> MetricSource:
    from governor.idle.metrics import CloudWatchMetrics

    return CloudWatchMetrics(region, cloudwatch, memory_unit=memory_unit)


#: ``idle.metric_source`` -> factory(region, CloudWatch client or None, GPU memory unit).
SOURCES: dict[str, Callable[[str | None, Any, str], MetricSource]] = {"cloudwatch_agent": _cloudwatch_agent}


def metric_source(name: str, region: str | None, cloudwatch: Any = None, memory_unit: str = "MB") -> MetricSource:
    """The source the policy names, reading in ``region`` (through ``cloudwatch`` when given: a member account)."""
    try:
        factory = SOURCES[name]
    except KeyError:
        raise ValueError(f"idle.metric_source {name!r}: expected one of {', '.join(sorted(SOURCES))}") from None
    return factory(region, cloudwatch, memory_unit)
