"""The idle rule's checks on one window's statistics: which signals show activity, which lack data, whether a job
looks hung. One rule for the sweep (plain numbers) and the backtest's columnar replay (NumPy arrays, one element per
instance), so both judge alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from governor.idle.domain import (
    CPU_UTILIZATION,
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    NETWORK_BYTES,
    expected_samples,
    required_signals,
)
from governor.idle.policy import IdlePolicy


def _pick(condition: Any, yes: Any, no: Any) -> Any:
    """``yes if condition else no`` for plain numbers, element by element for NumPy arrays (the backtest's)."""
    if hasattr(condition, "shape"):
        import numpy as np  # only the CLI's columnar replay passes arrays; the Lambda never imports NumPy

        return np.where(condition, yes, no)
    return yes if condition else no


_NO_SAMPLES = (0, math.nan, math.nan)


def activity_stats(stats: Mapping[str, tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    """The GPU activity judged: graphics-engine activity where the window holds any, else utilisation."""
    engine = stats.get(GPU_ENGINE_ACTIVE, _NO_SAMPLES)
    util = stats[GPU_UTILIZATION]
    use = engine[0] > 0
    return (_pick(use, engine[0], util[0]), _pick(use, engine[1], util[1]), _pick(use, engine[2], util[2]))


def idle_checks(
    stats: Mapping[str, tuple[Any, Any, Any]],
    newest_age: Any,
    policy: IdlePolicy,
    minutes: float,
    ceiling: Any = math.nan,
) -> dict[str, Any]:
    """Every check of the idle rule on one window's statistics: which signals show activity, which lack data.

    ``stats`` maps each signal to (sample count, maximum, minimum) over the window, NaN maximum and minimum without
    samples; ``newest_age`` is the newest GPU sample's age in minutes (NaN without one); ``ceiling`` the most power
    an idle GPU of the instance's model draws (NaN: unknown, power not judged). It works on plain numbers (the
    sweep) and on NumPy arrays with one element per instance (the backtest), so both apply one rule.
    """
    checks: dict[str, Any] = {}
    activity = activity_stats(stats)
    for signal in required_signals(policy):
        count = activity[0] if signal == GPU_UTILIZATION else stats[signal][0]
        checks[f"gap:{signal}"] = count < policy.min_samples_fraction * expected_samples(signal, minutes)
    checks["stale"] = newest_age > policy.max_sample_age_minutes
    checks[f"busy:{GPU_UTILIZATION}"] = activity[1] >= policy.gpu_utilization_threshold
    if policy.memory_change_tolerance_mib is not None:
        _, high, low = stats[GPU_MEMORY_USED]
        checks[f"busy:{GPU_MEMORY_USED}"] = high - low > policy.memory_change_tolerance_mib
    if policy.cpu_utilization_threshold is not None:
        checks[f"busy:{CPU_UTILIZATION}"] = stats[CPU_UTILIZATION][1] >= policy.cpu_utilization_threshold
    if policy.network_bytes_threshold is not None:
        checks[f"busy:{NETWORK_BYTES}"] = stats[NETWORK_BYTES][1] >= policy.network_bytes_threshold
    if policy.idle_power_margin_percent is not None:
        count, high, _ = stats.get(GPU_POWER, _NO_SAMPLES)
        # Published power must be complete (a sensor that stops mid-window is missing data), and near idle.
        checks[f"gap:{GPU_POWER}"] = (count > 0) & (
            count < policy.min_samples_fraction * expected_samples(GPU_POWER, minutes)
        )
        checks[f"busy:{GPU_POWER}"] = high > ceiling
    return checks


def stall_check(
    stats: Mapping[str, tuple[Any, Any, Any]], policy: IdlePolicy, minutes: float, ceiling: Any = math.nan
) -> Any:
    """A hung job's signature over the window: activity never below ``stall_utilization_threshold`` while power
    stays near idle (complete power data, a known idle draw) and memory does not move."""
    if policy.stall_utilization_threshold is None or policy.idle_power_margin_percent is None:
        return False
    count, _, low = activity_stats(stats)
    enough = count >= policy.min_samples_fraction * expected_samples(GPU_UTILIZATION, minutes)
    p_count, p_high, _ = stats.get(GPU_POWER, _NO_SAMPLES)
    powered = (p_count >= policy.min_samples_fraction * expected_samples(GPU_POWER, minutes)) & (p_high <= ceiling)
    stalled = enough & (low >= policy.stall_utilization_threshold) & powered
    if policy.memory_change_tolerance_mib is not None:
        m_count, m_high, m_low = stats[GPU_MEMORY_USED]
        stalled = stalled & (m_count > 0) & (m_high - m_low <= policy.memory_change_tolerance_mib)
    return stalled


def checks_status(checks: Mapping[str, Any]) -> tuple[Any, Any]:
    """(any activity, any missing or stale data) from :func:`idle_checks`; activity wins, idle is neither."""
    busy: Any = False
    gap: Any = False
    for name, flag in checks.items():
        if name.startswith("busy:"):
            busy = busy | flag
        else:
            gap = gap | flag
    return busy, gap


def window_stats(values: Sequence[float]) -> tuple[int, float, float]:
    return (len(values), max(values), min(values)) if values else (0, math.nan, math.nan)
