"""Idle GPU-hours from the idle function's own decision records: detected (the windows judged idle), reclaimed
(from an enforced stop until the instance runs again) and would-reclaim (a report-only stop decision, until the
instance is next judged not idle), per instance and in GPU-hours. Pure; works on plain ledger items like
``governor.domain.costs``. Dollars, offenders and paid-for capacity are :mod:`governor.idle.costs`'s.

Record shape read here (see docs/lifecycle.md): an idle decision (``kind="decision"``, ``policy="idle"``, recorded
by ``DynamoLedger.record``): ``verdict``, ``resource`` (instance id), ``at``, ``actions`` (``type`` stop|terminate
with ``enforced``), ``evidence`` with ``status`` (idle|warned|checkpoint|acted|held: the instance was judged idle),
``window_start`` / ``window_end`` and ``idle_since`` (ISO 8601; or ``window_minutes``), optionally
``instance_type`` and ``gpus``; and the usage sessions of ``governor.domain.costs``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from governor.domain.costs import RECLAIM_ACTIONS, IdleRow, IdleSummary, _clip, _hours, _merge, _sessions_by_instance
from governor.domain.times import parse_time

# ``evidence.status`` values of idle decisions whose assessment said idle (see governor.idle.domain).
IDLE_STATUSES = frozenset({"idle", "warned", "checkpoint", "acted", "held", "reported"})


def idle_decisions(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Idle-policy decisions whose assessment was "idle" (``evidence.status``), or ``act`` ones without a status."""
    found = []
    for item in items:
        if item.get("kind") != "decision" or item.get("policy") != "idle":
            continue
        status = (item.get("evidence") or {}).get("status")
        if status in IDLE_STATUSES or (status is None and item.get("verdict") == "act"):
            found.append(item)
    return found


def _idle_interval(decision: Mapping[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    """From the earliest of ``idle_since``, ``window_start``, ``end - window_minutes`` to ``window_end`` (or ``at``)."""
    at = parse_time(decision.get("at"))
    evidence = decision.get("evidence") or {}
    finish = parse_time(evidence.get("window_end")) or at
    if finish is None:
        return None
    starts = [t for t in (parse_time(evidence.get("idle_since")), parse_time(evidence.get("window_start"))) if t]
    minutes = evidence.get("window_minutes")
    if isinstance(minutes, int | float) and not isinstance(minutes, bool) and minutes > 0:
        starts.append(finish - dt.timedelta(minutes=float(minutes)))
    if not starts:
        return None
    begin = min(starts)
    return (begin, finish) if finish > begin else None


def _reclaim_time(decision: Mapping[str, Any], enforced: bool = True) -> dt.datetime | None:
    """When a stop/terminate was done (``enforced``) or, report-only, when it would have been done."""
    for action in decision.get("actions") or []:
        if (
            isinstance(action, Mapping)
            and action.get("type") in RECLAIM_ACTIONS
            and bool(action.get("enforced")) is enforced
        ):
            return parse_time(action.get("at")) or parse_time(decision.get("at"))
    return None


def _would_reclaim_time(decision: Mapping[str, Any]) -> dt.datetime | None:
    """When a report-only policy decided to stop/terminate: an ``acted`` decision whose reclaim action was not enforced.

    Held decisions (over the blast radius) do not count: an enforcing policy would not have acted on them either.
    """
    if (decision.get("evidence") or {}).get("status") != "acted":
        return None
    return _reclaim_time(decision, enforced=False)


def _busy_times(items: Iterable[Mapping[str, Any]]) -> dict[str, list[dt.datetime]]:
    """Per instance, when an idle sweep judged it not idle (working, or no data): a report-only stop would have been
    undone by its owner then, so the hours it would have given back end there."""
    found: dict[str, list[dt.datetime]] = defaultdict(list)
    for item in items:
        if item.get("kind") != "decision" or item.get("policy") != "idle":
            continue
        status = (item.get("evidence") or {}).get("status")
        at = parse_time(item.get("at"))
        if status is not None and status not in IDLE_STATUSES and at is not None:
            found[str(item.get("resource"))].append(at)
    return found


def idle_windows(items: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    """Per instance, the merged windows the idle policy judged idle (the "idle" band of the fleet chart)."""
    windows: dict[str, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for decision in idle_decisions(items):
        window = _idle_interval(decision)
        if window:
            windows[str(decision.get("resource"))].append(window)
    return {instance: _merge(found) for instance, found in windows.items()}


def _instance_facts(decisions: list[Mapping[str, Any]], sessions: list[Mapping[str, Any]]) -> tuple[str | None, int]:
    """Type and GPU count of one instance: from the idle evidence, else its latest session."""
    for decision in decisions:
        evidence = decision.get("evidence") or {}
        if evidence.get("instance_type"):
            return str(evidence["instance_type"]), int(evidence.get("gpus") or _session_gpus(sessions) or 1)
    latest = max(sessions, key=lambda s: str(s.get("start", "")), default=None)
    if latest is None:
        return None, 1
    return str(latest.get("instance_type") or "") or None, int(latest.get("gpus") or 1)


def _session_gpus(sessions: list[Mapping[str, Any]]) -> int | None:
    return next((int(s["gpus"]) for s in sessions if s.get("gpus")), None)


def _clipped_hours(windows: list[tuple[dt.datetime, dt.datetime]], start: dt.datetime, end: dt.datetime) -> float:
    """Hours of the merged ``windows`` inside [start, end)."""
    hours = 0.0
    for begin, finish in _merge(windows):
        clipped = _clip(begin, finish, start, end)
        hours += _hours(*clipped) if clipped else 0.0
    return hours


def _reclaim_windows(
    decisions: list[Mapping[str, Any]], sessions: list[Mapping[str, Any]], end: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """From each enforced stop/terminate until the instance's next usage session starts (or ``end``)."""
    starts = sorted(t for t in (parse_time(s.get("start")) for s in sessions) if t)
    windows = []
    for decision in decisions:
        stopped_at = _reclaim_time(decision)
        if stopped_at is None:
            continue
        restart = next((t for t in starts if t > stopped_at), None)
        windows.append((stopped_at, restart or end))
    return windows


def _would_windows(
    decisions: list[Mapping[str, Any]], busy: list[dt.datetime], sessions: list[Mapping[str, Any]], end: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """From each report-only stop/terminate decision until the instance is next judged not idle, its session ends,
    or ``end``."""
    windows = []
    for decision in decisions:
        decided_at = _would_reclaim_time(decision)
        if decided_at is None:
            continue
        stops = [t for t in busy if t > decided_at]
        stops += [t for t in (parse_time(s.get("end")) for s in sessions) if t and t > decided_at]
        windows.append((decided_at, min(stops, default=end)))
    return windows


def _idle_row(
    instance_id: str,
    decisions: list[Mapping[str, Any]],
    sessions: list[Mapping[str, Any]],
    busy: list[dt.datetime],
    start: dt.datetime,
    end: dt.datetime,
) -> IdleRow:
    """One instance's idle, reclaimed and would-reclaim hours in [start, end), and in GPU-hours."""
    instance_type, gpus = _instance_facts(decisions, sessions)
    idle = _clipped_hours([w for w in map(_idle_interval, decisions) if w], start, end)
    reclaimed = _clipped_hours(_reclaim_windows(decisions, sessions, end), start, end)
    would = _clipped_hours(_would_windows(decisions, busy, sessions, end), start, end)
    return IdleRow(
        instance_id=instance_id,
        instance_type=instance_type,
        gpus=gpus,
        idle_hours=round(idle, 4),
        idle_gpu_hours=round(idle * gpus, 4),
        reclaimed_hours=round(reclaimed, 4),
        reclaimed_gpu_hours=round(reclaimed * gpus, 4),
        would_reclaim_hours=round(would, 4),
        would_reclaim_gpu_hours=round(would * gpus, 4),
    )


def idle_hours(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> IdleSummary:
    """Idle GPU-hours detected and reclaimed in [start, end), from idle decisions and usage sessions.

    Detected: the union, per instance, of the windows the idle policy judged idle (``act`` decisions).
    Reclaimed: from an enforced stop/terminate until the instance's next usage session starts (or ``end``).
    Would reclaim: from a report-only stop/terminate decision until the instance is next judged not idle, its
    session ends, or ``end``: what the same decision, enforced, would have given back.
    """
    items = list(items)
    sessions = _sessions_by_instance(items)
    busy = _busy_times(items)
    by_instance: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for decision in idle_decisions(items):
        by_instance[str(decision.get("resource"))].append(decision)
    rows = [
        _idle_row(instance_id, decisions, sessions.get(instance_id, []), busy.get(instance_id, []), start, end)
        for instance_id, decisions in sorted(by_instance.items())
    ]
    return IdleSummary(
        detected_hours=round(sum(r.idle_hours for r in rows), 4),
        detected_gpu_hours=round(sum(r.idle_gpu_hours for r in rows), 4),
        reclaimed_hours=round(sum(r.reclaimed_hours for r in rows), 4),
        reclaimed_gpu_hours=round(sum(r.reclaimed_gpu_hours for r in rows), 4),
        instances=rows,
        would_reclaim_hours=round(sum(r.would_reclaim_hours for r in rows), 4),
        would_reclaim_gpu_hours=round(sum(r.would_reclaim_gpu_hours for r in rows), 4),
    )
