"""The sweep's two-phase read of CloudWatch, pure: which window statistics can prove an instance plainly busy, and its
assessment from them.

Phase one asks, for every instance, the ``Maximum`` of GPU utilisation (and of power where a stall could be judged)
over one bucket of whole minutes (:func:`statistics_window`); phase two asks minute points only for the instances
phase one could not prove busy. A window ``Maximum`` is the maximum of the per-minute ``Maximum`` series the minute read
returns over the same minutes (max of max), so it is exact; ``Minimum`` and ``SampleCount`` are not (the agent
aggregates a host's GPUs into one InstanceId metric: the window ``Minimum`` is the least GPU's, ``SampleCount`` counts
raw samples, not minutes), and nothing here uses them.

"Plainly busy" (:func:`plainly_busy`) implies what the minute read would decide, for the whole window and for the
warning window ``assess_for_sweep`` also judges:

* busy: the bucket's minutes lie inside both windows, so a maximum at or above ``gpu_utilization_threshold`` there is
  one in each (the CloudWatch source publishes no engine activity, so utilisation is the activity judged);
* never stalled: a stall needs every power sample of the window at most the idle ceiling, and enough of them
  (``checks.stall_check``). A bucket maximum above the ceiling excludes it in both windows; no power sample in the
  bucket excludes it when the window's other minutes are too few to hold enough samples; no stall threshold, no power
  margin or no known ceiling excludes it outright;
* no quiet-stretch onset for the breaker: the bucket lies inside the breaker's quiet span
  (``onset.breaker_quiet_minutes``), so the instance's last busy minute is more recent than the span and it is not
  counted among the instances that turned quiet (``sweep._decide_each``). It is counted as monitored, as a busy one is.

Anything else goes to phase two, whose decision is today's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.assessment import not_judged, power_limit
from governor.idle.domain import (
    GPU_POWER,
    GPU_UTILIZATION,
    Assessment,
    expected_samples,
    fetched_signals,
    warning_window_minutes,
)
from governor.idle.onset import breaker_quiet_minutes
from governor.idle.policy import IdlePolicy
from governor.policy import Policy

#: ``evidence["judged_from"]`` of a decision made on phase one's statistics.
JUDGED_FROM = "window statistics"
_MINUTE = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class StatisticsWindow:
    """The whole minutes ``[start, end)`` phase one asks one bucket over."""

    start: dt.datetime
    end: dt.datetime

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())

    @property
    def minutes(self) -> int:
        return self.seconds // 60


@dataclass(frozen=True)
class WindowMaxima:
    """Phase one's answer for one instance: the bucket and each signal's ``Maximum`` in it (absent: no sample)."""

    window: StatisticsWindow
    maxima: Mapping[str, float]


def _ceil_minute(moment: dt.datetime) -> dt.datetime:
    floored = moment.replace(second=0, microsecond=0)
    return floored if floored == moment else floored + _MINUTE


def _judged_minutes(policy: IdlePolicy) -> tuple[int, ...]:
    """The windows the sweep judges: the whole window, and the warning window when it is shorter."""
    early = warning_window_minutes(policy)
    return (policy.window_minutes, early) if early < policy.window_minutes else (policy.window_minutes,)


def statistics_window(policy: IdlePolicy, now: dt.datetime, interval: dt.timedelta) -> StatisticsWindow | None:
    """The bucket: the minutes whose one-minute points the sweep's assessment of ``now`` reads (a point at minute
    ``m`` is judged when ``now - window <= m < now``), within the warning window and the breaker's quiet span.

    Its end is ``now`` rounded up to the minute (the last minute started before ``now``), its start the first whole
    minute of the span; None when that leaves no whole minute.
    """
    span = min(breaker_quiet_minutes(policy, interval), *_judged_minutes(policy))
    start, end = _ceil_minute(now - dt.timedelta(minutes=span)), _ceil_minute(now)
    return StatisticsWindow(start, end) if end - start >= _MINUTE else None


def _stall_judged(instance: Instance, policy: IdlePolicy) -> bool:
    """Whether a stall could be found at all: a stall threshold, a power margin and the type's idle ceiling."""
    if policy.stall_utilization_threshold is None or policy.idle_power_margin_percent is None:
        return False
    return power_limit(instance.type, policy).ceiling is not None


def statistics_signals(instance: Instance, policy: IdlePolicy) -> tuple[str, ...]:
    """What phase one asks of ``instance``: GPU utilisation, and power where a stall could be judged."""
    if _stall_judged(instance, policy) and GPU_POWER in fetched_signals(policy):
        return (GPU_UTILIZATION, GPU_POWER)
    return (GPU_UTILIZATION,)


def _no_stall(found: WindowMaxima, instance: Instance, policy: IdlePolicy) -> bool:
    """No stall in any judged window (see the module's docstring)."""
    if not _stall_judged(instance, policy):
        return True
    ceiling = power_limit(instance.type, policy).ceiling
    power = found.maxima.get(GPU_POWER)
    if power is not None:
        return ceiling is not None and power > ceiling
    # No power sample in the bucket: the window's other minutes (one point each at most) must be too few for a stall.
    outside = [minutes - found.window.minutes for minutes in _judged_minutes(policy)]
    needed = [policy.min_samples_fraction * expected_samples(GPU_POWER, minutes) for minutes in _judged_minutes(policy)]
    return all(points < enough for points, enough in zip(outside, needed, strict=True))


def plainly_busy(found: WindowMaxima, instance: Instance, policy: IdlePolicy) -> bool:
    """Whether phase one's statistics prove the minute read would judge ``instance`` busy in every judged window."""
    peak = found.maxima.get(GPU_UTILIZATION)
    if peak is None or not peak >= policy.gpu_utilization_threshold:
        return False
    return _no_stall(found, instance, policy)


def assess_by_statistics(instance: Instance, found: WindowMaxima, policy: Policy, now: dt.datetime) -> Assessment:
    """The assessment of a plainly busy instance: launch grace, exemptions and snoozes first, as ``assess``; then busy,
    in the words the minute read's busy reason uses, with the exact maxima it saw (no sample counts: it has none)."""
    held = not_judged(instance, policy, now)
    if held is not None:
        return held
    idle = policy.idle
    peak = found.maxima[GPU_UTILIZATION]
    evidence: dict[str, Any] = {
        "judged_from": JUDGED_FROM,
        "window_start": found.window.start.isoformat(),
        "window_end": found.window.end.isoformat(),
        "max_gpu_utilization": round(peak, 2),
    }
    if idle.idle_power_margin_percent is not None:
        limit = power_limit(instance.type, idle)
        evidence["power_limit"] = limit.note
        if limit.ceiling is not None:
            evidence["idle_power_ceiling_w"] = limit.ceiling
        if GPU_POWER in found.maxima:
            evidence["max_gpu_power_w"] = round(found.maxima[GPU_POWER], 2)
    reason = f"GPU utilisation reached {peak:.1f}% (threshold {idle.gpu_utilization_threshold:g}%)"
    return Assessment(instance.id, "busy", [reason], evidence)
