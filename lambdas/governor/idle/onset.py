"""When an instance's current quiet stretch began, read sample by sample: the breaker groups these onsets, and only
stretches quiet for :func:`breaker_quiet_minutes` count.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left

from governor.idle.domain import (
    CPU_UTILIZATION,
    GPU_ENGINE_ACTIVE,
    GPU_UTILIZATION,
    NETWORK_BYTES,
    SAMPLE_SECONDS,
    Signals,
    devices,
    warning_window_minutes,
)
from governor.idle.policy import IdlePolicy


def onset_limits(policy: IdlePolicy) -> list[tuple[str, float]]:
    """The signals and thresholds whose busy samples end a quiet stretch (see :func:`idle_onset`)."""
    limits = [
        (GPU_UTILIZATION, policy.gpu_utilization_threshold),
        (GPU_ENGINE_ACTIVE, policy.gpu_utilization_threshold),
    ]
    if policy.cpu_utilization_threshold is not None:
        limits.append((CPU_UTILIZATION, policy.cpu_utilization_threshold))
    if policy.network_bytes_threshold is not None:
        limits.append((NETWORK_BYTES, policy.network_bytes_threshold))
    return limits


def idle_onset(signals: Signals, policy: IdlePolicy, now: dt.datetime, since: dt.datetime) -> float | None:
    """When the instance's current quiet stretch began: just after its last busy sample since ``since``.

    Read from GPU utilisation (and CPU and network when configured), sample by sample; None when no sample since
    ``since`` was busy (quiet since before the data) or there is no GPU data at all. The breaker groups these.
    """
    limits = onset_limits(policy)
    latest: float | None = None
    reports = False
    first, last = since.timestamp(), now.timestamp()
    for device_signals in devices(signals).values():
        for name in (GPU_UTILIZATION, GPU_ENGINE_ACTIVE):
            series = device_signals.get(name)
            reports = reports or (series is not None and bool(series.times))
        for signal, limit in limits:
            series = device_signals.get(signal)
            if series is None:
                continue
            low = bisect_left(series.times, first)
            high = bisect_left(series.times, last, lo=low)
            for index in range(high - 1, low - 1, -1):
                if series.values[index] >= limit:
                    busy_end = series.times[index] + SAMPLE_SECONDS[signal]
                    latest = busy_end if latest is None else max(latest, busy_end)
                    break
    return latest if reports else None


def breaker_quiet_minutes(policy: IdlePolicy, interval: dt.timedelta) -> float:
    """How long an instance must have been quiet to count as having turned idle, for the breaker.

    Half the warning window (45 min by default), at least one interval: long enough that a sparse inference server
    between requests or a job's checkpoint pause is not counted, short enough that the breaker trips before anything
    that turned idle with the anomaly is warned (``window - warning``) or acted on (``window``).
    """
    return max(interval.total_seconds() / 60, warning_window_minutes(policy) / 2)
