"""Real outage shapes laid over a generated fleet: what a metrics, agent or driver failure does to the data while
the jobs keep running (the ground truth stays "working"), and one team's job crashing (really idle).

Each shape starts at one minute for every instance it hits, as failures do (a bad agent rollout, a driver update,
a metrics pipeline fault). Used by ``bench/idle_quality.py`` and the breaker's tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from governor_cli.sim.workload import SyntheticInstance, Workload

Shape = Callable[[SyntheticInstance, int], SyntheticInstance]


def _from(values: list[float | None] | None, minute: int, value: float | None) -> list[float | None] | None:
    if values is None:
        return None
    return [v if m < minute or v is None else value for m, v in enumerate(values)]


def flatline(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """Every GPU series reads exactly 0 from ``minute`` (utilisation, memory, power): a broken exporter."""
    return dataclasses.replace(
        instance,
        gpu_utilization=_from(instance.gpu_utilization, minute, 0.0) or [],
        gpu_memory_used=_from(instance.gpu_memory_used, minute, 0.0) or [],
        gpu_power_draw=_from(instance.gpu_power_draw, minute, 0.0),
    )


def agent_stops(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """The CloudWatch agent stops: no GPU sample from ``minute`` on (EC2's CPU metric keeps coming)."""
    return dataclasses.replace(
        instance,
        gpu_utilization=_from(instance.gpu_utilization, minute, None) or [],
        gpu_memory_used=_from(instance.gpu_memory_used, minute, None) or [],
        gpu_power_draw=_from(instance.gpu_power_draw, minute, None),
    )


def driver_off_bus(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """The driver loses the GPU ("fallen off the bus"): utilisation and memory read 0, power N/A (not published)."""
    return dataclasses.replace(
        instance,
        gpu_utilization=_from(instance.gpu_utilization, minute, 0.0) or [],
        gpu_memory_used=_from(instance.gpu_memory_used, minute, 0.0) or [],
        gpu_power_draw=_from(instance.gpu_power_draw, minute, None),
    )


def utilisation_flatline(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """Only utilisation reads 0 from ``minute``; memory and power keep their real values."""
    return dataclasses.replace(instance, gpu_utilization=_from(instance.gpu_utilization, minute, 0.0) or [])


def crash(instance: SyntheticInstance, minute: int) -> SyntheticInstance:
    """The job crashes at ``minute``: the GPU is really idle from then on (ground truth too), the driver fine."""
    idle_power = None
    if instance.gpu_power_draw is not None:
        before = [p for p in instance.gpu_power_draw[:minute] if p is not None]
        idle_power = min(before) if before else None
    util = [u if m < minute or u is None else 0.2 + (m % 3) * 0.1 for m, u in enumerate(instance.gpu_utilization)]
    memory = [v if m < minute or v is None else 260.0 + (m % 7) for m, v in enumerate(instance.gpu_memory_used)]
    power = None
    if instance.gpu_power_draw is not None and idle_power is not None:
        power = [
            p if m < minute or p is None else round(idle_power + (m % 5) * 0.3, 2)
            for m, p in enumerate(instance.gpu_power_draw)
        ]
    working = [w and m < minute for m, w in enumerate(instance.working)]
    return dataclasses.replace(
        instance, gpu_utilization=util, gpu_memory_used=memory, gpu_power_draw=power, working=working
    )


def apply(workload: Workload, shape: Shape, minute: int, hit: Callable[[SyntheticInstance], bool]) -> Workload:
    """The workload with ``shape`` laid over every instance ``hit`` selects, from ``minute``."""
    return dataclasses.replace(workload, instances=[shape(i, minute) if hit(i) else i for i in workload.instances])
