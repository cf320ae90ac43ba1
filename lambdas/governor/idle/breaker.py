"""The circuit breaker for correlated idling: it trips on the signature of a measurement failure (many instances
turning quiet in the same minutes, with the signs of :mod:`governor.idle.signs`), never on a count alone, holds
those instances briefly, renews the hold only while its evidence lasts, and re-arms by itself.

Pure: :func:`breaker_step` is the breaker after one sweep; the decisions the ledger keeps of a trip, a renewal and a
re-arm are built here too, so the sweep only asks and applies.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from governor.domain.actions import Notify
from governor.domain.breaker import Breaker
from governor.domain.decision import Decision
from governor.domain.fleet import UNKNOWN
from governor.idle.domain import POLICY
from governor.idle.policy import IdlePolicy
from governor.policy import Policy


@dataclass(frozen=True)
class BreakerStep:
    """The breaker after one sweep: tripped now, released now (why), or its hold renewed for what still shows a sign."""

    state: Breaker
    tripped: bool = False
    rearmed: str | None = None
    renewed: bool = False


@dataclass(frozen=True)
class Sweep:
    """What the breaker reads of one sweep: the instances judged idle now, when quiet stretches began (those quiet
    for ``breaker_quiet_minutes``), each one's failure signs and team (asked only of the few it looks at), the
    monitored fleet, the policy and the clock."""

    idle_now: set[str]
    onsets: Mapping[str, float]
    signs_of: Callable[[str], list[str]]
    team_of: Callable[[str], str]
    monitored: int
    policy: IdlePolicy
    now: dt.datetime

    @property
    def share(self) -> int:
        """The most instances turning idle together that stay within ``breaker_fleet_percent`` of the fleet."""
        return math.floor(self.policy.breaker_fleet_percent * self.monitored / 100)

    @property
    def hold(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.policy.breaker_hold_minutes)

    @property
    def window(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.policy.window_minutes)


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


def breaker_step(state: Breaker, sweep: Sweep) -> BreakerStep:
    """The breaker after this sweep.

    It trips on the signature of a measurement failure, never on a count alone: at least ``breaker_min_instances``
    whose quiet stretches began within ``breaker_onset_minutes`` of each other (a failure hits every node in the same
    minute; a serving fleet's evening lull spreads over hours) and, among them, more than ``breaker_fleet_percent``
    of the monitored fleet, or half with a failure sign, or ``breaker_min_teams`` teams at once. It holds those, and
    any quiet instance showing a sign since shortly before. The hold is short and lasts only as long as its evidence:
    every ``breaker_hold_minutes`` it is renewed (and recorded) for the instances still showing a sign, or for all of
    them while they still make up more than the share of the fleet that tripped it; the rest are released and judged
    like any other instance, warned first. Held instances that are busy again leave; with none left it re-arms.
    """
    quiet = sweep.idle_now | set(sweep.onsets)
    released = frozenset(i for i in state.released if i in quiet)
    if state.open:
        return _while_open(state, sweep, quiet, released)
    return _trip(sweep, released)


def _while_open(state: Breaker, sweep: Sweep, quiet: set[str], released: frozenset[str]) -> BreakerStep:
    """An open breaker: who it holds now (joined by those quiet since shortly before its anomaly), and when its hold
    ends, renewed for what still shows the signature or released."""
    start = (state.anomaly_start or sweep.now) - sweep.window
    by_share = bool(state.evidence.get("by_share"))
    joined = {
        i
        for i, t in sweep.onsets.items()
        if t >= start.timestamp() and i not in state.held and i not in released and (by_share or sweep.signs_of(i))
    }
    held = (frozenset(i for i in state.held if i in quiet) | joined) - released
    if not held:
        return BreakerStep(Breaker(released=released), rearmed="every held instance is busy again or gone")
    if state.hold_until is not None and sweep.now < state.hold_until:
        return BreakerStep(replace(state, held=held, released=released))
    return _hold_ended(state, sweep, held, released)


def _hold_ended(state: Breaker, sweep: Sweep, held: frozenset[str], released: frozenset[str]) -> BreakerStep:
    """The hold is over: renewed for the instances still showing a sign (all of them while they still make up more
    than the share of the fleet), the others released; with none left it re-arms."""
    signs = {i: sweep.signs_of(i) for i in sorted(held)}
    persisting = frozenset(i for i, found in signs.items() if found)
    if state.evidence.get("by_share") and len(held) > sweep.share:
        # Still more than the share of the fleet, all quiet since the same minutes: the signature persists.
        persisting = held
    let_go = held - persisting
    if not persisting:
        why = (
            f"the {sweep.policy.breaker_hold_minutes}-minute hold ended and none of the {len(held)} held instances "
            "shows a measurement failure's sign: they are judged like any other instance from now on (warned first)"
        )
        return BreakerStep(Breaker(released=released | let_go), rearmed=why)
    evidence = {
        **state.evidence,
        "renewed_at": sweep.now.isoformat(),
        "still_showing_signs": {i: signs[i] for i in sorted(persisting)[:20]},
        "released_without_signs": sorted(let_go),
    }
    until = sweep.now + sweep.hold
    kept = replace(state, held=persisting, hold_until=until, released=released | let_go, evidence=evidence)
    return BreakerStep(kept, renewed=True)


def _signature(
    cohort: list[str], fresh: Mapping[str, float], signed: list[str], teams: list[str], sweep: Sweep
) -> list[str]:
    """What about the instances that turned idle together says a measurement failed (nothing: it does not trip)."""
    first, last = min(fresh[i] for i in cohort), max(fresh[i] for i in cohort)
    together = f"{len(cohort)} instances turned idle within {int((last - first) // 60) + 1} min"
    found: list[str] = []
    if len(cohort) > sweep.share:
        found.append(
            f"{together}: more than {sweep.policy.breaker_fleet_percent:g}% of the {sweep.monitored} monitored"
        )
    if 2 * len(signed) >= len(cohort):
        found.append(f"{together}, {len(signed)} of them with a measurement failure's sign")
    if len(teams) >= sweep.policy.breaker_min_teams:
        found.append(f"{together} across {len(teams)} unrelated teams")
    return found


def _trip(sweep: Sweep, released: frozenset[str]) -> BreakerStep:
    """A closed breaker: trips when the densest group of onsets shows a measurement failure's signature."""
    fresh = {i: t for i, t in sweep.onsets.items() if i not in released}
    cohort = _densest(fresh, sweep.policy.breaker_onset_minutes * 60)
    if len(cohort) < sweep.policy.breaker_min_instances:
        return BreakerStep(Breaker(released=released))
    signs = {i: sweep.signs_of(i) for i in cohort}
    signed = [i for i in cohort if signs[i]]
    teams = sorted({sweep.team_of(i) for i in cohort} - {UNKNOWN})
    found = _signature(cohort, fresh, signed, teams, sweep)
    if not found:
        return BreakerStep(Breaker(released=released))
    first, last = min(fresh[i] for i in cohort), max(fresh[i] for i in cohort)
    window_start = first - sweep.window.total_seconds()
    # With the fleet share (a failure's scale), every instance that turned quiet up to one window before joins: its
    # whole window overlaps the anomaly. Otherwise only those showing a sign themselves.
    by_share = len(cohort) > sweep.share
    joined = {i for i, t in fresh.items() if i not in cohort and t >= window_start and (by_share or sweep.signs_of(i))}
    trip_evidence: dict[str, Any] = {
        "cohort": len(cohort),
        "monitored": sweep.monitored,
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
        tripped_at=sweep.now,
        anomaly_start=dt.datetime.fromtimestamp(first, dt.UTC),
        held=frozenset(cohort) | frozenset(joined),
        hold_until=sweep.now + sweep.hold,
        released=released,
        signature="; ".join(found),
        evidence=trip_evidence,
    )
    return BreakerStep(tripped, tripped=True)


def hold_note(state: Breaker, now: dt.datetime) -> str:
    """The reason a held instance's decision gains: with how many, since when, and until when."""
    return (
        f"circuit breaker: held with {len(state.held)} instances that turned idle together from "
        f"{state.anomaly_start.isoformat() if state.anomaly_start else now.isoformat()} ({state.signature}); "
        f"nothing done until {state.hold_until.isoformat() if state.hold_until else 'the hold ends'}, longer only "
        "while it still shows a measurement failure's sign"
    )


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
    """The one critical decision of a trip: what tripped it, who is held, until when, and how to let them go."""
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


def rearmed_decision(step: BreakerStep) -> Decision | None:
    """The record of a re-arm (why the breaker let go), or None."""
    if step.rearmed is None:
        return None
    return Decision(
        policy=POLICY,
        verdict="ok",
        resource="gpu-fleet",
        reasons=[f"circuit breaker re-armed: {step.rearmed}"],
        evidence={"status": "rearmed"},
        rule="idle.breaker-rearmed",
    )


def renewed_decision(step: BreakerStep) -> Decision | None:
    """The record of a renewed hold (for what still shows a sign, and who was released), or None."""
    if not step.renewed:
        return None
    state = step.state
    return Decision(
        policy=POLICY,
        verdict="ok",
        resource="gpu-fleet",
        reasons=[
            f"circuit breaker hold renewed until {state.hold_until.isoformat() if state.hold_until else '?'} for "
            f"{len(state.held)} instances still showing a measurement failure's sign; "
            f"{len(state.evidence.get('released_without_signs', []))} released"
        ],
        evidence={"status": "renewed", **state.evidence},
        rule="idle.breaker-renewed",
    )
