"""The idle function's deployed adapters with a clock the caller sets: the soak, the runbook's flush sweep and the
fault scenarios judge sweeps at a simulated time through it (its own module, so none of them imports another)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@contextmanager
def clocked_idle(clock: dt.datetime | Callable[[], dt.datetime]) -> Iterator[None]:
    """The idle function's deployed adapters with its clock set by the caller (a simulated time), except that the
    emulator cannot match DescribeInstances wildcards."""
    import governor.idle.handler as idle_handler
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader
    from governor.adapters.ssm import SsmCommands
    from governor.idle.autoscaling import AutoScalingGroups
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from governor.idle.metrics import CloudWatchMetrics
    from governor.idle.sources import metric_source

    now = clock if callable(clock) else (lambda: clock)

    @cache
    def aws(
        region: str | None, memory_unit: str, source: str = "cloudwatch_agent", clusters: Any = (), activity: Any = ()
    ) -> Any:
        """``governor.idle.handler._aws``'s signature, with the clock and the emulator's literal type filters."""
        groups = AutoScalingGroups(region)
        if not clusters and not activity:
            metrics: Any = CloudWatchMetrics(region, memory_unit=memory_unit)
        else:  # the clusters' sources (DCGM through Prometheus), the team's signals, a drain's API, as deployed
            metrics = metric_source(source, region, memory_unit=memory_unit, clusters=clusters, activity=activity)
        drains = any(c.reclaim == "drain" for c in clusters)
        return idle_handler.Adapters(
            Ec2Reader(region, wildcard_type_filter=False),
            Ec2Actions(region),
            metrics,
            SsmCommands(region),
            groups,
            now,
            nodes=KubernetesNodes(region, groups) if drains else None,
        )

    saved = idle_handler._aws
    idle_handler._aws = aws
    try:
        yield
    finally:
        idle_handler._aws = saved
