"""The sweep's plan, pure: decide once for every instance of the fleet (:mod:`governor.idle.decide`), then the circuit
breaker (:mod:`governor.idle.breaker`) holds correlated ones and the rate limit defers the surplus, longest idle
first. The handler gathers what this reads, and carries out and records what it returns; nothing here calls back.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from governor.domain.breaker import Breaker
from governor.domain.decision import Decision
from governor.domain.fleet import UNKNOWN, Instance, ownership
from governor.idle.assessment import assess_for_sweep
from governor.idle.breaker import (
    BreakerStep,
    Sweep,
    breaker_alarm,
    breaker_step,
    held_evidence,
    hold_note,
    rearmed_decision,
    renewed_decision,
)
from governor.idle.decide import InstanceOutcome, decide
from governor.idle.domain import (
    DEFAULT_INTERVAL,
    IDLE_BREAKER_TAG,
    IDLE_OUTCOMES,
    Mark,
    Signals,
    current_mark,
    lookback_start,
)
from governor.idle.onset import breaker_quiet_minutes, idle_onset
from governor.idle.policy import IdlePolicy
from governor.idle.purchase import report_only_reason
from governor.idle.signs import FailureSigns
from governor.idle.table import DEFERRED, HELD, Row
from governor.idle.window_statistics import WindowMaxima, assess_by_statistics
from governor.policy import Policy


@dataclass(frozen=True)
class Settled:
    """Instances the caller already judged not idle, carrying no mark and exempt by no policy (the backtest's bulk).

    Their outcome cannot change this sweep's decisions about them, yet they count: in the fleet size the rate limit
    takes its share of, in the monitored fleet the breaker compares with, and with their quiet-stretch onsets.
    """

    count: int = 0
    monitored: int = 0
    onsets: Mapping[str, float] = field(default_factory=dict)
    # The lookback's series of some of them, read only for the few the breaker looks at (failure signs).
    signals: Callable[[Sequence[str]], Mapping[str, Signals]] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SweepPlan:
    """Every instance's outcome, and the breaker: ``alarm`` is the one critical decision raised when it trips."""

    outcomes: list[InstanceOutcome]
    fleet_size: int
    alarm: Decision | None = None
    held_back: int = 0
    breaker: Breaker = field(default_factory=Breaker)
    deferred: int = 0
    rearmed: Decision | None = None
    renewed: Decision | None = None  # the hold renewed for what still shows the failure's signature (recorded)

    def acting(self) -> list[InstanceOutcome]:
        return [o for o in self.outcomes if o.outcome in ("checkpoint", "acted")]


def _withhold(
    outcome: InstanceOutcome, row: Row, why: str, evidence: Mapping[str, Any] | None = None
) -> InstanceOutcome:
    """The same decision with nothing enforced, and the mark as it was before this sweep (its place in line)."""
    decision = outcome.decision
    kept = decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, why],
            "evidence": {**decision.evidence, **(evidence or {}), "status": row.outcome},
            "rule": f"idle.{row.outcome}",
        }
    )
    return InstanceOutcome(outcome.instance, row.outcome, kept, outcome.prior, prior=outcome.prior, row=row)


def action_limit(fleet_size: int, policy: IdlePolicy) -> int:
    """Actions one sweep may take: both bounds, the percentage never rounded below one action (small fleets)."""
    if policy.max_fleet_percent <= 0:
        return 0
    share = max(1, math.floor(policy.max_fleet_percent * fleet_size / 100))
    return min(policy.max_actions_per_sweep, share)


@dataclass
class _Decided:
    """Every instance decided once, and what the breaker reads of them: quiet-stretch onsets, the monitored count."""

    outcomes: list[InstanceOutcome]
    onsets: dict[str, float]
    monitored: int


def _decide_each(
    instances: Sequence[Instance],
    signals: Mapping[str, Signals],
    marks: Mapping[str, Mark],
    policy: Policy,
    now: dt.datetime,
    interval: dt.timedelta,
    bulk: Settled,
    statistics: Mapping[str, WindowMaxima],
) -> _Decided:
    """Each instance assessed and decided once, and, for those with data, when its quiet stretch began; the instances
    in ``statistics`` were proved plainly busy by window statistics and have no minute series."""
    idle = policy.idle
    since = lookback_start(idle, now, interval)
    quiet_seconds = breaker_quiet_minutes(idle, interval) * 60
    decided = _Decided([], dict(bulk.onsets), bulk.monitored)
    for instance in instances:
        instance_signals = signals.get(instance.id, {})
        found = statistics.get(instance.id)
        if found is not None:  # plainly busy by the window's statistics (governor.idle.window_statistics)
            assessment, may_act = assess_by_statistics(instance, found, policy, now), True
        else:
            assessment, may_act = assess_for_sweep(instance, instance_signals, policy, now)
        mark = current_mark(instance, marks.get(instance.id))
        decided.outcomes.append(decide(instance, assessment, mark, policy, now, may_act=may_act, interval=interval))
        if assessment.status not in ("busy", "idle", "stalled"):
            continue
        decided.monitored += 1
        if found is not None:  # busy within the breaker's quiet span: no onset it would count
            continue
        onset = idle_onset(instance_signals, idle, now, since)
        if onset is not None and now.timestamp() - onset >= quiet_seconds:
            decided.onsets[instance.id] = onset
    return decided


def _breaker(
    decided: _Decided,
    state: Breaker,
    signs: FailureSigns,
    instances: Sequence[Instance],
    policy: Policy,
    now: dt.datetime,
) -> BreakerStep:
    """The breaker after this sweep (its power floors kept for the instances it holds)."""
    outcomes = decided.outcomes
    # An operator (or the owner) releases one held instance with the tag; it is then judged like any other.
    by_tag = {o.instance.id for o in outcomes if o.instance.tags.get(IDLE_BREAKER_TAG, "").strip() == "release"}
    idle_now = {o.instance.id for o in outcomes if o.outcome in IDLE_OUTCOMES}
    state = replace(state, released=state.released | (by_tag & idle_now))
    teams = {i.id: ownership(i.tags, policy.fleet).team for i in instances}

    def team_of(instance_id: str) -> str:
        return teams.get(instance_id, UNKNOWN)

    step = breaker_step(state, Sweep(idle_now, decided.onsets, signs, team_of, decided.monitored, policy.idle, now))
    floors = signs.floors
    held = replace(step.state, power_floor={i: floors[i] for i in sorted(step.state.held) if i in floors})
    return replace(step, state=held)


def _rate_limit(
    outcomes: list[InstanceOutcome], fleet_size: int, policy: Policy, now: dt.datetime
) -> tuple[list[InstanceOutcome], int]:
    """At most ``action_limit`` checkpoints and reclaims this sweep; the rest deferred, their marks kept."""
    idle = policy.idle
    prices = policy.pricing.prices

    def hourly(instance: Instance) -> float:
        entry = prices.get(instance.type)
        return entry.on_demand if entry is not None else 0.0

    # Longest idle first; among as long idle, the dearest first (it gives back the most), then by id, so which one
    # waits never depends on the order EC2 listed them or on their random ids.
    acting = sorted(
        (o for o in outcomes if o.outcome in ("checkpoint", "acted")),
        key=lambda o: (o.prior.idle_since if o.prior else now, -hourly(o.instance), o.instance.id),
    )
    fleet = fleet_size - len(_reported_for_action(outcomes, idle))
    limit = action_limit(fleet, idle)
    deferred_ids = {o.instance.id for o in acting[limit:]}
    if not deferred_ids:
        return outcomes, 0
    why = (
        f"deferred: {len(acting)} actions due, at most {limit} per sweep (max_actions_per_sweep "
        f"{idle.max_actions_per_sweep}, max_fleet_percent {idle.max_fleet_percent:g}% of {fleet}); "
        "longest idle first (then the dearest), next sweep"
    )
    return [_withhold(o, DEFERRED, why) if o.instance.id in deferred_ids else o for o in outcomes], len(deferred_ids)


def sweep(
    instances: Sequence[Instance],
    signals: Mapping[str, Signals],
    marks: Mapping[str, Mark],
    policy: Policy,
    now: dt.datetime,
    *,
    interval: dt.timedelta = DEFAULT_INTERVAL,
    breaker: Breaker | None = None,
    settled: Settled | None = None,
    statistics: Mapping[str, WindowMaxima] | None = None,
) -> SweepPlan:
    """Decide every running GPU instance; the breaker holds correlated ones, the rate limit defers the surplus.

    The rate limit lets at most ``action_limit`` checkpoints and reclaims through per sweep, longest idle first; the
    rest are ``deferred`` with their marks kept, so a backlog drains over the next sweeps. The breaker (see
    :func:`governor.idle.breaker.breaker_step`) holds instances that turned idle together and raises one critical
    alarm per trip. ``settled`` summarises instances decided outside this call (see :class:`Settled`); the sweep
    Lambda passes none. ``statistics``: the instances the CloudWatch source's first phase proved plainly busy
    (:func:`governor.idle.window_statistics.plainly_busy`), judged busy from those statistics; their decisions are the
    ones their minute points would give.
    """
    state = breaker or Breaker()
    bulk = settled or Settled()
    decided = _decide_each(instances, signals, marks, policy, now, interval, bulk, statistics or {})
    since = lookback_start(policy.idle, now, interval).timestamp()
    signs = FailureSigns(signals, decided.onsets, now, since, dict(state.power_floor), bulk.signals)
    step = _breaker(decided, state, signs, instances, policy, now)
    state = step.state
    note = hold_note(state, now)
    outcomes = [
        _withhold(o, HELD, note, held_evidence(state, o.instance.id, signs.found))
        if o.instance.id in state.held and o.outcome in IDLE_OUTCOMES
        else o
        for o in decided.outcomes
    ]
    fleet_size = len(instances) + bulk.count
    outcomes, deferred = _rate_limit(outcomes, fleet_size, policy, now)
    alarm = breaker_alarm(state, decided.monitored, policy, now) if step.tripped else None
    held_now = sum(1 for o in outcomes if o.outcome == "held")
    rearmed, renewed = rearmed_decision(step), renewed_decision(step)
    return SweepPlan(outcomes, fleet_size, alarm, held_now, state, deferred, rearmed, renewed)


def _reported_for_action(outcomes: Sequence[InstanceOutcome], policy: IdlePolicy) -> set[str]:
    """Report-only: instances already reported as "would be stopped" and still idle.

    An enforcing policy would have stopped them, so they are left out of the fleet the rate limit is a share of, as
    they would be; that is what keeps the report-only "would reclaim" figure equal to what enforcing reclaims.
    Instances that may only be reported (Kubernetes nodes, ``asg_action: report``) stay in the fleet.
    """
    if policy.enforce:
        return set()
    return {
        o.instance.id
        for o in outcomes
        if o.outcome in IDLE_OUTCOMES
        and o.prior is not None
        and o.prior.reported_at is not None
        and report_only_reason(o.instance, policy) is None
    }
