"""The team's activity signals judged on the window (``idle.activity_signals``), pure.

They arrive with the instance's other series, keyed ``activity:<name>`` (:mod:`governor.idle.activity_source`). They
are read only to keep a machine: once the GPU signals call an instance idle, a signal above its threshold at any point
of the window makes it busy, and a signal with too few samples (or none recent) makes it unmonitored, since a
publisher that died says nothing about the machine. They never make a busy or unmonitored machine idle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from governor.idle.activity_policy import ActivitySignal
from governor.idle.domain import ACTIVITY_PREFIX, Assessment, Series
from governor.idle.policy import IdlePolicy


def activity_key(name: str) -> str:
    return f"{ACTIVITY_PREFIX}{name}"


def _judge(
    signal: ActivitySignal, series: Series | None, policy: IdlePolicy, start: float, end: float
) -> dict[str, Any]:
    """One signal on the window: its samples, expected samples, newest age and maximum, and busy / unknown / quiet."""
    values = list(series.window(start, end)) if series is not None else []
    expected = max(1, int(policy.window_minutes * 60 // signal.period_seconds))
    newest = series.newest(end + 1) if series is not None else None
    found: dict[str, Any] = {
        "source": f"{signal.namespace} {signal.metric}" if signal.promql is None else f"PromQL on {signal.cluster}",
        "threshold": signal.threshold,
        "samples": len(values),
        "expected_samples": expected,
    }
    if values:
        found["max"] = round(max(values), 4)
    if newest is not None:
        found["newest_sample_age_minutes"] = round(max(end - newest, 0.0) / 60, 1)
    stale = newest is None or end - newest > 2 * signal.period_seconds + policy.max_sample_age_minutes * 60
    if values and max(values) > signal.threshold:
        found["state"] = "busy"
    elif len(values) < policy.min_samples_fraction * expected or stale:
        found["state"] = "unknown"
    else:
        found["state"] = "quiet"
    return found


def with_activity(
    assessment: Assessment, signals: Mapping[str, Series], policy: IdlePolicy, now: dt.datetime
) -> Assessment:
    """An idle assessment kept busy by a signal above its threshold, or unmonitored by one without data; any other
    assessment as it was (a signal can only keep a machine)."""
    if assessment.status != "idle" or not policy.activity_signals:
        return assessment
    end = now.timestamp()
    start = end - policy.window_minutes * 60
    # A signal judges the instances it was read for (a PromQL signal: its cluster's nodes); the production source
    # always hands those an entry, empty when nothing was read (unknown).
    judged = {
        s.name: _judge(s, signals[activity_key(s.name)], policy, start, end)
        for s in policy.activity_signals
        if activity_key(s.name) in signals
    }
    if not judged:
        return assessment
    evidence = {**assessment.evidence, "activity_signals": judged}
    busy = [
        f"activity signal {name} ({j['source']}) read {j['max']:g}, above its threshold "
        f"{j['threshold']:g}: the team's own signal keeps it (GPU signals alone said idle)"
        for name, j in judged.items()
        if j["state"] == "busy"
    ]
    if busy:
        evidence["kept_by_signal"] = sorted(n for n, j in judged.items() if j["state"] == "busy")
        return Assessment(assessment.instance_id, "busy", busy, evidence)
    unknown = [
        f"activity signal {name} ({j['source']}): {j['samples']} of {j['expected_samples']} "
        "expected samples or none recent: unknown, and unknown is never idle"
        for name, j in judged.items()
        if j["state"] == "unknown"
    ]
    if unknown:
        evidence["signal_unknown"] = sorted(n for n, j in judged.items() if j["state"] == "unknown")
        return Assessment(assessment.instance_id, "unmonitored", unknown, evidence)
    return Assessment(assessment.instance_id, "idle", assessment.reasons, evidence)
