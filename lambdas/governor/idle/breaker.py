"""The circuit breaker for correlated idling: it trips on the signature of a measurement failure (many instances
turning quiet in the same minutes, with signs such as power reading 0 or frozen, memory emptied, samples missing),
never on a count alone, holds those instances briefly, and re-arms by itself.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from governor.domain.actions import Notify
from governor.domain.breaker import Breaker
from governor.domain.decision import Decision
from governor.domain.fleet import UNKNOWN
from governor.idle.domain import (
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    POLICY,
    Signals,
    devices,
)
from governor.idle.policy import IdlePolicy
from governor.policy import Policy


def _densest(onsets: Mapping[str, float], span: float) -> list[str]:
    """The largest set of instances whose quiet stretches began within ``span`` seconds of each other."""
    ordered = sorted(onsets.items(), key=lambda item: (item[1], item[0]))
    best: tuple[int, int] = (0, 0)
    low = 0
    for high in range(len(ordered)):
        while ordered[high][1] - ordered[low][1] > span:
            low += 1
        if high + 1 - low > best[1] - best[0]:
            best = (low, high + 1)
    return [instance_id for instance_id, _ in ordered[best[0] : best[1]]]


_AROUND_ONSET = 180.0  # seconds either side of an onset in which missing samples mean the agent or driver restarted
_RUN = 10  # samples of one repeated reading that make a sign (a live power sensor never repeats itself this long)


def _trailing_run(values: Sequence[float]) -> tuple[float, int]:
    """The last value and how many samples at the end repeat it exactly."""
    if not values:
        return math.nan, 0
    last = values[-1]
    length = 0
    for value in reversed(values):
        if value != last:
            break
        length += 1
    return last, length


def failure_signs(
    signals: Signals, onset: float | None, now: dt.datetime, since: float, floor: float | None = None
) -> tuple[list[str], float | None]:
    """What in one instance's data says a measurement failed, not the workload, since its quiet stretch began
    (``onset``; None for an instance already held, whose onset has left the lookback that starts at ``since``).

    Each sign is read from the latest samples, whenever the failure began. A working GPU never draws 0 W; a driver
    that lost its GPU reports 0 MiB where a model was loaded; a live power sensor never repeats one reading for ten
    minutes; a GPU whose utilisation fell to 0 while its power stayed at
    the working level is still working (``floor``: the lowest power it drew before, kept while it is held); samples
    missing around the minute activity stopped mean the agent or driver restarted. An evening lull shows none of
    these: the model stays loaded, power settles at the idle draw and wanders, and the data keeps coming. Returns
    the signs and the power floor to keep.
    """
    signs: list[str] = []
    end = now.timestamp()
    kept: float | None = floor
    for device, found in sorted(devices(signals).items()):
        label = f"GPU {device}: " if device else ""
        memory = found.get(GPU_MEMORY_USED)
        if memory is not None:
            values = memory.window(since, end + 1)
            run, length = _trailing_run(values)
            loaded = any(v > 0 for v in values[: len(values) - length]) or onset is None
            if values and run == 0 and length >= _RUN and loaded:
                signs.append(f"{label}GPU memory in use reads exactly 0 MiB for {length} samples (it held a model)")
        power = found.get(GPU_POWER)
        if power is not None:
            values = power.window(since, end + 1)
            before = power.window(since, onset) if onset is not None else ()
            if before:
                kept = min(before) if kept is None else min(kept, min(before))
            run, length = _trailing_run(values)
            recent = power.window(end - 1800, end + 1)
            if values and run == 0 and length >= _RUN:
                signs.append(f"{label}power reads exactly 0 W for {length} samples")
            elif length >= _RUN:
                signs.append(f"{label}power frozen at {run:g} W for {length} samples")
            elif recent and kept is not None and kept > 0:
                middle = sorted(recent)[len(recent) // 2]
                level = sorted(before)[len(before) // 2] if before else middle
                if middle >= 2 * kept and middle >= 0.7 * level:
                    signs.append(
                        f"{label}utilisation fell to idle while power stayed at {middle:.0f} W (it idles at "
                        f"{kept:.0f} W): the GPU is still working"
                    )
        activity = found.get(GPU_ENGINE_ACTIVE) or found.get(GPU_UTILIZATION)
        if activity is not None and onset is not None:
            low, high = max(onset - _AROUND_ONSET, since), min(onset + _AROUND_ONSET, end)
            near = activity.window(low, high)
            expected = (high - low) / 60
            if expected >= 4 and len(near) <= expected - 2:
                signs.append(f"{label}{int(expected - len(near))} samples missing around the onset (agent restart)")
    return signs, kept


@dataclass(frozen=True)
class BreakerStep:
    """The breaker after one sweep: tripped now, released now (why), or its hold renewed for what still shows a sign."""

    state: Breaker
    tripped: bool = False
    rearmed: str | None = None
    renewed: bool = False


def breaker_step(
    state: Breaker,
    idle_now: set[str],
    onsets: Mapping[str, float],
    signs_of: Any,
    team_of: Any,
    monitored: int,
    policy: IdlePolicy,
    now: dt.datetime,
) -> BreakerStep:
    """The breaker after this sweep. ``onsets`` are when quiet stretches began (those quiet for
    ``breaker_quiet_minutes``); ``signs_of(id)`` an instance's :func:`failure_signs`; ``team_of(id)`` its team.

    It trips on the signature of a measurement failure, never on a count alone: at least ``breaker_min_instances``
    whose quiet stretches began within ``breaker_onset_minutes`` of each other (a failure hits every node in the same
    minute; a serving fleet's evening lull spreads over hours) and, among them, more than ``breaker_fleet_percent``
    of the monitored fleet, or half with a failure sign, or ``breaker_min_teams`` teams at once. It holds those, and
    any quiet instance showing a sign since shortly before. The hold is short and lasts only as long as its evidence:
    every ``breaker_hold_minutes`` it is renewed (and recorded) for the instances still showing a sign, or for all of
    them while they still make up more than the share of the fleet that tripped it; the rest are released and judged
    like any other instance, warned first. Held instances that are busy again leave; with none left it re-arms.
    """
    quiet = idle_now | set(onsets)
    released = frozenset(i for i in state.released if i in quiet)
    hold = dt.timedelta(minutes=policy.breaker_hold_minutes)
    window = dt.timedelta(minutes=policy.window_minutes)
    if state.open:
        start = (state.anomaly_start or now) - window
        by_share = bool(state.evidence.get("by_share"))
        joined = {
            i
            for i, t in onsets.items()
            if t >= start.timestamp() and i not in state.held and i not in released and (by_share or signs_of(i))
        }
        held = (frozenset(i for i in state.held if i in quiet) | joined) - released
        if not held:
            return BreakerStep(Breaker(released=released), rearmed="every held instance is busy again or gone")
        if state.hold_until is not None and now < state.hold_until:
            return BreakerStep(replace(state, held=held, released=released))
        signs = {i: signs_of(i) for i in sorted(held)}
        persisting = frozenset(i for i, found in signs.items() if found)
        share = math.floor(policy.breaker_fleet_percent * monitored / 100)
        if state.evidence.get("by_share") and len(held) > share:
            # Still more than the share of the fleet, all quiet since the same minutes: the signature persists.
            persisting = held
        let_go = held - persisting
        if not persisting:
            why = (
                f"the {policy.breaker_hold_minutes}-minute hold ended and none of the {len(held)} held instances shows "
                "a measurement failure's sign: they are judged like any other instance from now on (warned first)"
            )
            return BreakerStep(Breaker(released=released | let_go), rearmed=why)
        evidence = {
            **state.evidence,
            "renewed_at": now.isoformat(),
            "still_showing_signs": {i: signs[i] for i in sorted(persisting)[:20]},
            "released_without_signs": sorted(let_go),
        }
        kept = replace(state, held=persisting, hold_until=now + hold, released=released | let_go, evidence=evidence)
        return BreakerStep(kept, renewed=True)
    fresh = {i: t for i, t in onsets.items() if i not in released}
    cohort = _densest(fresh, policy.breaker_onset_minutes * 60)
    if len(cohort) < policy.breaker_min_instances:
        return BreakerStep(Breaker(released=released))
    signs = {i: signs_of(i) for i in cohort}
    signed = [i for i in cohort if signs[i]]
    teams = sorted({team_of(i) for i in cohort} - {UNKNOWN})
    share = math.floor(policy.breaker_fleet_percent * monitored / 100)
    first, last = min(fresh[i] for i in cohort), max(fresh[i] for i in cohort)
    together = f"{len(cohort)} instances turned idle within {int((last - first) // 60) + 1} min"
    found: list[str] = []
    if len(cohort) > share:
        found.append(f"{together}: more than {policy.breaker_fleet_percent:g}% of the {monitored} monitored")
    if 2 * len(signed) >= len(cohort):
        found.append(f"{together}, {len(signed)} of them with a measurement failure's sign")
    if len(teams) >= policy.breaker_min_teams:
        found.append(f"{together} across {len(teams)} unrelated teams")
    if not found:
        return BreakerStep(Breaker(released=released))
    anomaly_start = dt.datetime.fromtimestamp(first, dt.UTC)
    window_start = first - window.total_seconds()
    # With the fleet share (a failure's scale), every instance that turned quiet up to one window before joins: its
    # whole window overlaps the anomaly. Otherwise only those showing a sign themselves.
    by_share = len(cohort) > share
    joined = {i for i, t in fresh.items() if i not in cohort and t >= window_start and (by_share or signs_of(i))}
    trip_evidence: dict[str, Any] = {
        "cohort": len(cohort),
        "monitored": monitored,
        "onsets": [
            dt.datetime.fromtimestamp(first, dt.UTC).isoformat(),
            dt.datetime.fromtimestamp(last, dt.UTC).isoformat(),
        ],
        "with_signs": len(signed),
        "signs": {i: signs[i] for i in signed[:20]},
        "teams": teams[:20],
        "joined_with_signs": sorted(joined)[:50],
        "by_share": by_share,
    }
    tripped = Breaker(
        tripped_at=now,
        anomaly_start=anomaly_start,
        held=frozenset(cohort) | frozenset(joined),
        hold_until=now + hold,
        released=released,
        signature="; ".join(found),
        evidence=trip_evidence,
    )
    return BreakerStep(tripped, tripped=True)


def held_evidence(state: Breaker, instance_id: str, signs: Mapping[str, list[str]]) -> dict[str, Any]:
    """What the ledger keeps about one held instance: why the breaker tripped, and this instance's own signs."""
    return {
        "breaker": {
            "signature": state.signature,
            "tripped_at": state.tripped_at.isoformat() if state.tripped_at else None,
            "hold_until": state.hold_until.isoformat() if state.hold_until else None,
            "signs": signs.get(instance_id, []),
        }
    }


def breaker_alarm(state: Breaker, monitored: int, policy: Policy, now: dt.datetime) -> Decision:
    idle = policy.idle
    since = state.anomaly_start.isoformat() if state.anomaly_start else now.isoformat()
    until = state.hold_until.isoformat() if state.hold_until else now.isoformat()
    return Decision(
        policy=POLICY,
        verdict="act",
        resource="gpu-fleet",
        actions=[Notify(enforced=idle.enforce, held_back=sorted(state.held))],
        reasons=[
            f"circuit breaker: a measurement failure's signature from {since}: {state.signature}",
            f"none of the {len(state.held)} held instances is warned or acted on until {until}; after that only those "
            "still showing a sign (memory or power reading 0, power frozen, samples missing) stay held. Check the "
            "agents; `governor idle rearm` (or the tag governor:idle-breaker=release) lets them go now",
        ],
        evidence={
            "status": "held",
            "held_back": len(state.held),
            "monitored": monitored,
            "anomaly_start": since,
            "hold_until": until,
            "signature": state.signature,
            **state.evidence,
            "breaker_fleet_percent": idle.breaker_fleet_percent,
            "breaker_min_instances": idle.breaker_min_instances,
            "breaker_onset_minutes": idle.breaker_onset_minutes,
        },
        severity="critical",
        rule="idle.circuit-breaker",
    )
