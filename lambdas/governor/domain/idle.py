"""Idle GPU reclamation: is an instance idle by every signal, and what happens next (mark, then act).

Pure code shared by the sweep Lambda, ``governor backtest`` and the benchmarks. Metric series arrive as sorted
epoch-second timestamps with values (one point per minute, the ``Maximum`` of the busiest GPU); missing or partial
data is never idle. The first idle verdict marks and warns; only a later sweep, still idle after the warning period,
acts; and a sweep that would act on more than the blast-radius bounds acts on nothing.
"""

from __future__ import annotations

import datetime as dt
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from governor.domain.decision import Action, Decision, Severity, Verdict
from governor.domain.fleet import Instance, exemption, ownership, snoozed_until
from governor.domain.times import parse_time
from governor.policy import IdlePolicy, Policy

POLICY = "idle"
IDLE_SINCE_TAG = "governor:idle-since"
IDLE_ACTION_TAG = "governor:idle-action"
MARK_KIND = "idle-mark"
MIB = 1024 * 1024

GPU_UTILIZATION = "gpu_utilization"
GPU_MEMORY_USED = "gpu_memory_used"
CPU_UTILIZATION = "cpu_utilization"
NETWORK_BYTES = "network_bytes"
SIGNALS = (GPU_UTILIZATION, GPU_MEMORY_USED, CPU_UTILIZATION, NETWORK_BYTES)
# EC2's own metrics (CPU, network) arrive every 5 minutes under basic monitoring; GPU agent metrics every minute.
SAMPLE_SECONDS = {GPU_UTILIZATION: 60, GPU_MEMORY_USED: 60, CPU_UTILIZATION: 300, NETWORK_BYTES: 300}
# SSM command states after which the checkpoint is over, one way or the other.
_PAST = {"stop": "stopped", "terminate": "terminated"}
CHECKPOINT_DONE = frozenset({"Success", "Failed", "TimedOut", "Cancelled", "Undeliverable", "Terminated", "NotSent"})

Status = Literal["grace", "exempt", "snoozed", "unmonitored", "busy", "idle"]
Outcome = Literal[
    "grace", "exempt", "snoozed", "unmonitored", "busy", "idle", "warned", "checkpoint", "acted", "held", "reported"
]


@dataclass(frozen=True)
class Series:
    """One metric of one instance: ascending epoch seconds and their values (one sample per point)."""

    times: Sequence[float]
    values: Sequence[float]

    def window(self, start: float, end: float) -> Sequence[float]:
        """Values of the points with ``start <= time < end``."""
        low = bisect_left(self.times, start)
        high = bisect_left(self.times, end, lo=low)
        return self.values[low:high]


Signals = Mapping[str, Series]


class MetricSource(Protocol):
    """Where the sweep reads metrics: CloudWatch ``GetMetricData`` in the cloud, a CSV in ``backtest``."""

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]: ...


@dataclass(frozen=True)
class Mark:
    """The mark-then-act state of one instance, kept between sweeps (ledger item, plus a tag when enforcing)."""

    idle_since: dt.datetime
    warned_at: dt.datetime | None = None
    checkpoint_sent_at: dt.datetime | None = None
    checkpoint_command_id: str | None = None
    checkpoint_status: str | None = None
    reported_at: dt.datetime | None = None

    def to_item(self, instance_id: str) -> dict[str, Any]:
        return {
            "instance_id": instance_id,
            "idle_since": self.idle_since.isoformat(),
            "warned_at": _iso(self.warned_at),
            "checkpoint_sent_at": _iso(self.checkpoint_sent_at),
            "checkpoint_command_id": self.checkpoint_command_id,
            "checkpoint_status": self.checkpoint_status,
            "reported_at": _iso(self.reported_at),
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Mark | None:
        """None for a cleared or unreadable mark."""
        since = parse_time(item.get("idle_since"))
        if since is None:
            return None
        return cls(
            idle_since=since,
            warned_at=parse_time(item.get("warned_at")),
            checkpoint_sent_at=parse_time(item.get("checkpoint_sent_at")),
            checkpoint_command_id=item.get("checkpoint_command_id") or None,
            checkpoint_status=item.get("checkpoint_status") or None,
            reported_at=parse_time(item.get("reported_at")),
        )


@dataclass(frozen=True)
class Assessment:
    """Whether one instance is idle right now, with the evidence the ledger keeps."""

    instance_id: str
    status: Status
    reasons: list[str]
    evidence: dict[str, Any]


@dataclass(frozen=True)
class InstanceOutcome:
    """The decision about one instance in one sweep, and the mark to keep for the next sweep (None: no mark)."""

    instance: Instance
    outcome: Outcome
    decision: Decision
    mark: Mark | None
    finding: str | None = None
    prior: Mark | None = None


@dataclass(frozen=True)
class SweepPlan:
    """Every instance's outcome; ``alarm`` is the critical decision raised when the blast radius held actions back."""

    outcomes: list[InstanceOutcome]
    fleet_size: int
    alarm: Decision | None = None
    held_back: int = 0

    def acting(self) -> list[InstanceOutcome]:
        return [o for o in self.outcomes if o.outcome in ("checkpoint", "acted")]


@dataclass
class _Window:
    start: float
    end: float
    minutes: float
    evidence: dict[str, Any] = field(default_factory=dict)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def required_signals(policy: IdlePolicy) -> tuple[str, ...]:
    """The signals this policy decides on: GPU utilisation and memory always, CPU and network when configured."""
    wanted = [GPU_UTILIZATION, GPU_MEMORY_USED]
    if policy.cpu_utilization_threshold is not None:
        wanted.append(CPU_UTILIZATION)
    if policy.network_bytes_threshold is not None:
        wanted.append(NETWORK_BYTES)
    return tuple(wanted)


def _coverage(values: Sequence[float], signal: str, window: _Window, policy: IdlePolicy) -> str | None:
    expected = max(1, math.floor(window.minutes * 60 / SAMPLE_SECONDS[signal]))
    window.evidence.setdefault("samples", {})[signal] = len(values)
    window.evidence.setdefault("expected_samples", {})[signal] = expected
    if len(values) < policy.min_samples_fraction * expected:
        return f"{signal}: {len(values)} of {expected} expected samples in the window (missing data is never idle)"
    return None


def assess_signals(instance_id: str, signals: Signals, policy: IdlePolicy, now: dt.datetime) -> Assessment:
    """Idle only when every configured signal says idle over the whole window; any data gap means unmonitored.

    This is the heart shared by the sweep and the backtest; grace, exemptions and snoozes are applied by ``assess``.
    """
    end = now.timestamp()
    window = _Window(start=end - policy.window_minutes * 60, end=end, minutes=policy.window_minutes)
    window.evidence.update(
        {
            "window_start": dt.datetime.fromtimestamp(window.start, dt.UTC).isoformat(),
            "window_end": now.isoformat(),
        }
    )
    data: dict[str, Sequence[float]] = {}
    gaps: list[str] = []
    for signal in required_signals(policy):
        series = signals.get(signal)
        values = series.window(window.start, window.end) if series is not None else ()
        data[signal] = values
        gap = _coverage(values, signal, window, policy)
        if gap:
            gaps.append(gap)
    busy: list[str] = []
    evidence = window.evidence
    if data[GPU_UTILIZATION]:
        peak = max(data[GPU_UTILIZATION])
        evidence["max_gpu_utilization"] = round(peak, 2)
        if peak >= policy.gpu_utilization_threshold:
            busy.append(f"GPU utilisation reached {peak:.1f}% (threshold {policy.gpu_utilization_threshold:g}%)")
    if data[GPU_MEMORY_USED]:
        change = (max(data[GPU_MEMORY_USED]) - min(data[GPU_MEMORY_USED])) / MIB
        evidence["max_gpu_memory_used_mib"] = round(max(data[GPU_MEMORY_USED]) / MIB, 1)
        evidence["gpu_memory_change_mib"] = round(change, 1)
        if change > policy.memory_change_tolerance_mib:
            busy.append(
                f"GPU memory in use changed by {change:.0f} MiB (tolerance {policy.memory_change_tolerance_mib:g} MiB)"
            )
    if policy.cpu_utilization_threshold is not None and data[CPU_UTILIZATION]:
        peak = max(data[CPU_UTILIZATION])
        evidence["max_cpu_utilization"] = round(peak, 2)
        if peak >= policy.cpu_utilization_threshold:
            busy.append(f"CPU utilisation reached {peak:.1f}% (threshold {policy.cpu_utilization_threshold:g}%)")
    if policy.network_bytes_threshold is not None and data[NETWORK_BYTES]:
        peak = max(data[NETWORK_BYTES])
        evidence["max_network_bytes"] = round(peak, 1)
        if peak >= policy.network_bytes_threshold:
            busy.append(f"network traffic reached {peak:.0f} bytes (threshold {policy.network_bytes_threshold:g})")
    if busy:
        return Assessment(instance_id, "busy", busy, evidence)
    if gaps:
        return Assessment(instance_id, "unmonitored", gaps, evidence)
    reasons = [
        f"idle by every signal for {policy.window_minutes} min: GPU max "
        f"{evidence['max_gpu_utilization']:.1f}%, memory moved {evidence['gpu_memory_change_mib']:.0f} MiB"
    ]
    return Assessment(instance_id, "idle", reasons, evidence)


def assess(instance: Instance, signals: Signals, policy: Policy, now: dt.datetime) -> Assessment:
    """Launch grace, exemptions and the owner's snooze first; then the signals."""
    idle = policy.idle
    grace_end = instance.launch_time + dt.timedelta(minutes=idle.launch_grace_minutes)
    if now < grace_end:
        reason = f"launched {instance.launch_time.isoformat()}; in launch grace until {grace_end.isoformat()}"
        return Assessment(instance.id, "grace", [reason], {})
    exempt = exemption(instance.id, instance.tags, policy.fleet, idle.exemptions, now)
    if exempt:
        return Assessment(instance.id, "exempt", [exempt], {})
    snooze = snoozed_until(instance.tags, policy.fleet, now)
    if snooze:
        return Assessment(
            instance.id, "snoozed", [f"owner snoozed reclamation ({policy.fleet.keep_until_tag}) until {snooze}"], {}
        )
    return assess_signals(instance.id, signals, idle, now)


def warning_window_minutes(policy: IdlePolicy) -> int:
    """The owner is warned once every signal has been idle for ``window - warning`` minutes (at least 15).

    The action still needs the whole window idle and the warning ``warning_minutes`` old, so an instance idle since
    ``t`` is warned at ``t + window - warning`` and acted on at ``t + window``: warned first, yet reclaimed as early as
    a rule that acts after the window without any warning.
    """
    return max(15, policy.window_minutes - policy.warning_minutes)


def assess_for_sweep(instance: Instance, signals: Signals, policy: Policy, now: dt.datetime) -> tuple[Assessment, bool]:
    """The assessment to decide on, and whether it allows an action (the whole window idle) or only a warning."""
    full = assess(instance, signals, policy, now)
    early_minutes = warning_window_minutes(policy.idle)
    judged_on_signals = full.status in ("busy", "unmonitored")
    if judged_on_signals and early_minutes < policy.idle.window_minutes:
        early_policy = policy.idle.model_copy(update={"window_minutes": early_minutes})
        early = assess_signals(instance.id, signals, early_policy, now)
        if early.status == "idle":
            return early, False
    return full, True


def reclaim_action(instance: Instance, policy: IdlePolicy) -> Literal["stop", "terminate"]:
    """Stop keeps the disks (on-demand, EBS-backed); Spot and instance-store roots cannot be kept, so terminate."""
    if instance.root_device_type == "instance-store":
        return "terminate"
    return policy.spot_action if instance.lifecycle == "spot" else policy.on_demand_action


def checkpoint_command(instance: Instance, policy: Policy) -> str | None:
    """The instance's own checkpoint tag wins over the policy's command."""
    tagged = instance.tags.get(policy.fleet.checkpoint_command_tag, "").strip()
    return tagged or policy.idle.checkpoint_command


def _mark_from_tag(instance: Instance) -> Mark | None:
    since = parse_time(instance.tags.get(IDLE_SINCE_TAG))
    return Mark(idle_since=since, warned_at=since) if since else None


def current_mark(instance: Instance, stored: Mark | None) -> Mark | None:
    """The stored mark, else the tag; a mark from before the instance's last start is stale and ignored."""
    mark = stored or _mark_from_tag(instance)
    if mark is None or mark.idle_since < instance.launch_time:
        return None
    return mark


def _decision(
    instance: Instance,
    verdict: Verdict,
    outcome: Outcome,
    reasons: list[str],
    evidence: dict[str, Any],
    actions: Iterable[Action] = (),
    severity: Severity = "info",
) -> Decision:
    return Decision(
        policy=POLICY,
        verdict=verdict,
        resource=instance.id,
        actions=list(actions),
        reasons=reasons,
        evidence={"status": outcome, **evidence},
        severity=severity,
        rule=f"idle.{outcome}",
    )


def decide(
    instance: Instance,
    assessment: Assessment,
    mark: Mark | None,
    policy: Policy,
    now: dt.datetime,
    *,
    may_act: bool = True,
) -> InstanceOutcome:
    """Mark, then act: warn on the first idle verdict, act only when still idle after the warning period.

    Any verdict other than idle clears the mark, so activity (or a data gap) in between starts the clock again.
    ``may_act`` is false when only the warning window (not yet the whole window) is idle: the owner is warned, the
    action waits until every signal has been idle for the whole window.
    """
    idle = policy.idle
    enforce = idle.enforce
    owner = ownership(instance.tags, policy.fleet)
    evidence = dict(assessment.evidence)
    if assessment.status != "idle":
        actions: list[Action] = []
        reasons = list(assessment.reasons)
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
            if IDLE_SINCE_TAG in instance.tags:
                actions.append(Action(type="untag", enforced=enforce, keys=[IDLE_SINCE_TAG]))
        verdict: Verdict = "ignored" if assessment.status in ("grace", "exempt", "snoozed") else "ok"
        severity: Severity = "warning" if assessment.status == "unmonitored" else "info"
        decision = _decision(instance, verdict, assessment.status, reasons, evidence, actions, severity)
        return InstanceOutcome(instance, assessment.status, decision, None)

    if mark is None:
        due = now + dt.timedelta(minutes=idle.warning_minutes)
        action = reclaim_action(instance, idle)
        reasons = [*assessment.reasons, f"{action} due at {due.isoformat()} unless the instance is used or snoozed"]
        actions = [
            Action(type="tag", enforced=enforce, tags={IDLE_SINCE_TAG: now.isoformat()}),
            Action(
                type="warn",
                enforced=enforce,
                owner=owner.owner,
                due=due.isoformat(),
                planned=action,
                snooze_tag=policy.fleet.keep_until_tag,
                exempt_tag=policy.fleet.exempt_tag,
            ),
        ]
        decision = _decision(instance, "act", "warned", reasons, evidence, actions, "warning")
        title = f"Idle GPU instance {instance.id} ({instance.type}) will be {_PAST[action]} at {due:%Y-%m-%d %H:%M} UTC"
        return InstanceOutcome(instance, "warned", decision, Mark(idle_since=now, warned_at=now), title)

    evidence["idle_since"] = mark.idle_since.isoformat()
    warned = mark.warned_at or mark.idle_since
    due = warned + dt.timedelta(minutes=idle.warning_minutes)
    if now < due or not may_act:
        reasons = [*assessment.reasons, f"warned at {warned.isoformat()}; action due at {due.isoformat()}"]
        if not may_act:
            reasons.append(f"no action before every signal has been idle for the whole {idle.window_minutes} min")
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark)
    if mark.reported_at is not None:
        reasons = [*assessment.reasons, f"reported for action at {mark.reported_at.isoformat()} (report-only policy)"]
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark)

    command = checkpoint_command(instance, policy)
    if command and mark.checkpoint_sent_at is None:
        reasons = [*assessment.reasons, "still idle after the warning; checkpoint first, then act on the next sweep"]
        actions = [
            Action(type="checkpoint", enforced=enforce, command=command, timeout=idle.checkpoint_timeout_seconds)
        ]
        new_mark = replace(mark, checkpoint_sent_at=now, checkpoint_status=None if enforce else "NotSent")
        decision = _decision(instance, "act", "checkpoint", reasons, evidence, actions)
        return InstanceOutcome(instance, "checkpoint", decision, new_mark, prior=mark)
    if command and mark.checkpoint_sent_at is not None:
        status = mark.checkpoint_status or "Pending"
        evidence["checkpoint_status"] = status
        deadline = mark.checkpoint_sent_at + dt.timedelta(seconds=idle.checkpoint_timeout_seconds)
        if status not in CHECKPOINT_DONE and now < deadline:
            reasons = [*assessment.reasons, f"checkpoint {status}; waiting until {deadline.isoformat()}"]
            return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark)

    action = reclaim_action(instance, idle)
    reasons = [
        *assessment.reasons,
        f"idle since {mark.idle_since.isoformat()}, warned at {warned.isoformat()}; still idle after "
        f"{idle.warning_minutes} min",
    ]
    if "checkpoint_status" in evidence:
        reasons.append(f"checkpoint command ended {evidence['checkpoint_status']}")
    actions = [
        Action(type=action, enforced=enforce, lifecycle=instance.lifecycle, root_device=instance.root_device_type),
        Action(
            type="tag", enforced=enforce, tags={IDLE_ACTION_TAG: f"{action}@{now.isoformat()}"}, remove=[IDLE_SINCE_TAG]
        ),
    ]
    decision = _decision(instance, "act", "acted", reasons, evidence, actions, "warning")
    title = (
        f"Idle GPU instance {instance.id} ({instance.type}) {_PAST[action]}"
        if enforce
        else f"Idle GPU instance {instance.id} ({instance.type}) would be {_PAST[action]} (report-only: not done)"
    )
    next_mark = None if enforce else replace(mark, reported_at=now)
    return InstanceOutcome(instance, "acted", decision, next_mark, title, prior=mark)


def _hold(outcome: InstanceOutcome, why: str) -> InstanceOutcome:
    decision = outcome.decision
    held = decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, why],
            "evidence": {**decision.evidence, "status": "held"},
            "rule": "idle.held",
        }
    )
    return InstanceOutcome(outcome.instance, "held", held, outcome.prior, prior=outcome.prior)


def blast_radius(acting: int, fleet_size: int, policy: IdlePolicy) -> str | None:
    """Why ``acting`` actions are too many for one sweep, or None. Both bounds must hold."""
    if acting == 0:
        return None
    if acting > policy.max_actions_per_sweep:
        return f"{acting} actions exceed max_actions_per_sweep {policy.max_actions_per_sweep}"
    if acting * 100 > policy.max_fleet_percent * fleet_size:
        share = 100 * acting / max(fleet_size, 1)
        limit = policy.max_fleet_percent
        return f"{acting} actions are {share:.1f}% of {fleet_size} instances, over max_fleet_percent {limit:g}%"
    return None


def sweep(
    instances: Sequence[Instance],
    signals: Mapping[str, Signals],
    marks: Mapping[str, Mark],
    policy: Policy,
    now: dt.datetime,
) -> SweepPlan:
    """Decide every running GPU instance; over either blast-radius bound, act on nothing and raise a critical alarm."""
    outcomes = []
    for instance in instances:
        assessment, may_act = assess_for_sweep(instance, signals.get(instance.id, {}), policy, now)
        mark = current_mark(instance, marks.get(instance.id))
        outcomes.append(decide(instance, assessment, mark, policy, now, may_act=may_act))
    acting = [o for o in outcomes if o.outcome in ("checkpoint", "acted")]
    why = blast_radius(len(acting), len(instances), policy.idle)
    if why is None:
        return SweepPlan(outcomes, len(instances))
    held_ids = {o.instance.id for o in acting}
    message = f"blast radius: {why}; nothing acted on this sweep"
    outcomes = [_hold(o, message) if o.instance.id in held_ids else o for o in outcomes]
    alarm = Decision(
        policy=POLICY,
        verdict="act",
        resource="gpu-fleet",
        actions=[Action(type="notify", enforced=policy.idle.enforce, held_back=sorted(held_ids))],
        reasons=[message, "check for a metrics outage or a policy change before raising the bounds"],
        evidence={
            "status": "held",
            "held_back": len(held_ids),
            "fleet_size": len(instances),
            "max_actions_per_sweep": policy.idle.max_actions_per_sweep,
            "max_fleet_percent": policy.idle.max_fleet_percent,
        },
        severity="critical",
        rule="idle.blast-radius",
    )
    return SweepPlan(outcomes, len(instances), alarm, len(held_ids))


def naive_stop(
    series: Series,
    start: float,
    end: float,
    *,
    period_seconds: int = 3600,
    threshold: float = 5.0,
    periods: int = 2,
) -> float | None:
    """The usual rule, for comparison only: mean utilisation under 5% for two consecutive hours, then stop.

    Periods run from ``start`` to ``end``; a period with no data counts as 0% (missing data read as idle, as
    alarms with ``treat_missing_data: breaching`` do). Returns the epoch second of the stop, or None.
    """
    below = 0
    edge = start
    while edge + period_seconds <= end:
        values = series.window(edge, edge + period_seconds)
        mean = sum(values) / len(values) if values else 0.0
        below = below + 1 if mean < threshold else 0
        edge += period_seconds
        if below >= periods:
            return edge
    return None


@dataclass
class ReplayedInstance:
    """What the replayed policy did to one instance: warnings and the action with their times."""

    actions: list[tuple[dt.datetime, str]] = field(default_factory=list)
    stopped_at: dt.datetime | None = None
    gpu_hours_reclaimed: float = 0.0


@dataclass
class Replay:
    """The backtest: per-instance actions, verdict counts over every sweep, and the sweeps the blast radius held."""

    start: dt.datetime
    end: dt.datetime
    interval: dt.timedelta
    sweeps: int = 0
    instances: dict[str, ReplayedInstance] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    held_back_sweeps: list[dt.datetime] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(1 for r in self.instances.values() for _, kind in r.actions if kind == action)

    @property
    def gpu_hours_reclaimed(self) -> float:
        return sum(r.gpu_hours_reclaimed for r in self.instances.values())


def replay(
    signals: Mapping[str, Signals],
    policy: Policy,
    *,
    start: dt.datetime,
    end: dt.datetime,
    interval: dt.timedelta,
    gpus: Mapping[str, int] | None = None,
    launch_times: Mapping[str, dt.datetime] | None = None,
) -> Replay:
    """Run the sweep every ``interval`` over recorded metrics, as if enforcing, with the warning period applied.

    An instance counts as gone after its first stop or terminate; its GPU-hours from then to ``end`` are
    reclaimed (times its GPU count, default 1). A checkpoint command is assumed to succeed by the next sweep.
    Launch time defaults to the instance's first sample, so the launch grace applies from there.
    """
    enforcing = policy.model_copy(update={"idle": policy.idle.model_copy(update={"enforce": True})})
    firsts = {
        instance_id: min((s.times[0] for s in series.values() if s.times), default=start.timestamp())
        for instance_id, series in signals.items()
    }
    fleet = [
        Instance(
            id=instance_id,
            type="unknown",
            state="running",
            launch_time=(launch_times or {}).get(instance_id) or dt.datetime.fromtimestamp(first, dt.UTC),
        )
        for instance_id, first in sorted(firsts.items())
    ]
    result = Replay(start=start, end=end, interval=interval)
    result.instances = {i.id: ReplayedInstance() for i in fleet}
    marks: dict[str, Mark] = {}
    now = start + interval
    while now <= end:
        running = [i for i in fleet if result.instances[i.id].stopped_at is None]
        plan = sweep(running, signals, marks, enforcing, now)
        result.sweeps += 1
        if plan.alarm is not None:
            result.held_back_sweeps.append(now)
        for outcome in plan.outcomes:
            instance_id = outcome.instance.id
            result.verdicts[outcome.outcome] = result.verdicts.get(outcome.outcome, 0) + 1
            record = result.instances[instance_id]
            mark = outcome.mark
            if outcome.outcome == "warned":
                record.actions.append((now, "warn"))
            elif outcome.outcome == "checkpoint" and mark is not None:
                mark = replace(mark, checkpoint_status="Success")
            elif outcome.outcome == "acted":
                kind = next(a.type for a in outcome.decision.actions if a.type in ("stop", "terminate"))
                record.actions.append((now, kind))
                record.stopped_at = now
                hours = (end - now).total_seconds() / 3600
                record.gpu_hours_reclaimed = round(hours * (gpus or {}).get(instance_id, 1), 4)
            if mark is None:
                marks.pop(instance_id, None)
            else:
                marks[instance_id] = mark
        now += interval
    return result
