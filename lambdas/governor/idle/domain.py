"""Idle GPU reclamation: is an instance idle by every signal, and what happens next (mark, then act).

Pure code shared by the sweep Lambda, ``governor backtest`` and the benchmarks. Metric series arrive as sorted
epoch-second timestamps with values (one point per minute, the ``Maximum`` of the busiest GPU); missing or partial
data is never idle, and neither is stale data. The first idle verdict marks and warns; only a later sweep, still idle
after the warning period, acts. The blast radius limits the rate (longest idle first, the rest deferred), and a
separate circuit breaker holds instances that turned idle together (a metrics or driver outage looks like that).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from governor.domain.actions import AnyAction, Checkpoint, Notify, Tag, Untag, Warn, reclaim
from governor.domain.breaker import Breaker
from governor.domain.decision import Decision, Severity, Verdict
from governor.domain.fleet import Instance, TagProblem, checkpoint_choice, exemption, ownership, snoozed_until
from governor.domain.times import parse_time
from governor.policy import IdlePolicy, Policy

POLICY = "idle"
IDLE_SINCE_TAG = "governor:idle-since"
IDLE_ACTION_TAG = "governor:idle-action"
IDLE_BREAKER_TAG = "governor:idle-breaker"
MARK_KIND = "idle-mark"
# GPU memory is judged in MiB; the CloudWatch agent's nvidia_smi plugin publishes MB, which are nvidia-smi's MiB.
MEMORY_UNITS: dict[str, float] = {"MB": 1.0, "MiB": 1.0, "bytes": 1.0 / (1024 * 1024)}
DEFAULT_INTERVAL = dt.timedelta(minutes=15)
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
# EKS and Karpenter mark their nodes with these tags; the cluster owns such capacity.
EKS_TAGS = ("eks:cluster-name", "eks:nodegroup-name", "karpenter.sh/nodepool", "karpenter.sh/provisioner-name")
EKS_TAG_PREFIX = "kubernetes.io/cluster/"
ASG_TAG = "aws:autoscaling:groupName"

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
    "grace",
    "exempt",
    "snoozed",
    "unmonitored",
    "busy",
    "idle",
    "warned",
    "checkpoint",
    "acted",
    "held",
    "deferred",
    "reported",
]
_IDLE_OUTCOMES = frozenset({"idle", "warned", "checkpoint", "acted", "reported"})


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

    def newest(self, before: float) -> float | None:
        """The time of the newest point before ``before``, or None."""
        index = bisect_left(self.times, before)
        return self.times[index - 1] if index else None


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
class Settled:
    """Instances the caller already judged not idle, carrying no mark and exempt by no policy (the backtest's bulk).

    Their outcome cannot change this sweep's decisions about them, yet they count: in the fleet size the rate limit
    takes its share of, in the monitored fleet the breaker compares with, and with their quiet-stretch onsets.
    """

    count: int = 0
    monitored: int = 0
    onsets: Mapping[str, float] = field(default_factory=dict)


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

    def acting(self) -> list[InstanceOutcome]:
        return [o for o in self.outcomes if o.outcome in ("checkpoint", "acted")]


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def required_signals(policy: IdlePolicy) -> tuple[str, ...]:
    """The signals this policy decides on: GPU utilisation always; memory, CPU and network when configured."""
    wanted = [GPU_UTILIZATION]
    if policy.memory_change_tolerance_mib is not None:
        wanted.append(GPU_MEMORY_USED)
    if policy.cpu_utilization_threshold is not None:
        wanted.append(CPU_UTILIZATION)
    if policy.network_bytes_threshold is not None:
        wanted.append(NETWORK_BYTES)
    return tuple(wanted)


def sweep_interval(policy: IdlePolicy) -> dt.timedelta:
    """The time between sweeps, from a ``rate(...)`` schedule; 15 minutes for a cron expression."""
    match = _RATE.match(policy.schedule.strip())
    if not match:
        return DEFAULT_INTERVAL
    unit = match.group(2).rstrip("s")
    return dt.timedelta(**{f"{unit}s": int(match.group(1))})


def lookback_start(policy: IdlePolicy, now: dt.datetime, interval: dt.timedelta) -> dt.datetime:
    """How far back a sweep reads metrics: the window, plus one interval so the breaker sees when idleness began."""
    return now - dt.timedelta(minutes=policy.window_minutes) - interval


def expected_samples(signal: str, minutes: float) -> int:
    """How many samples of ``signal`` a window of ``minutes`` should hold (at least one)."""
    return max(1, math.floor(minutes * 60 / SAMPLE_SECONDS[signal]))


def idle_checks(
    stats: Mapping[str, tuple[Any, Any, Any]], newest_age: Any, policy: IdlePolicy, minutes: float
) -> dict[str, Any]:
    """Every check of the idle rule on one window's statistics: which signals show activity, which lack data.

    ``stats`` maps each required signal to (sample count, maximum, minimum) over the window, NaN maximum and minimum
    without samples; ``newest_age`` is the newest GPU sample's age in minutes (NaN without one). It works on plain
    numbers (the sweep) and on NumPy arrays with one element per instance (the backtest), so both apply one rule.
    """
    checks: dict[str, Any] = {}
    for signal in required_signals(policy):
        checks[f"gap:{signal}"] = stats[signal][0] < policy.min_samples_fraction * expected_samples(signal, minutes)
    checks["stale"] = newest_age > policy.max_sample_age_minutes
    checks[f"busy:{GPU_UTILIZATION}"] = stats[GPU_UTILIZATION][1] >= policy.gpu_utilization_threshold
    if policy.memory_change_tolerance_mib is not None:
        _, high, low = stats[GPU_MEMORY_USED]
        checks[f"busy:{GPU_MEMORY_USED}"] = high - low > policy.memory_change_tolerance_mib
    if policy.cpu_utilization_threshold is not None:
        checks[f"busy:{CPU_UTILIZATION}"] = stats[CPU_UTILIZATION][1] >= policy.cpu_utilization_threshold
    if policy.network_bytes_threshold is not None:
        checks[f"busy:{NETWORK_BYTES}"] = stats[NETWORK_BYTES][1] >= policy.network_bytes_threshold
    return checks


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


def _window_stats(values: Sequence[float]) -> tuple[int, float, float]:
    return (len(values), max(values), min(values)) if values else (0, math.nan, math.nan)


def assess_signals(instance_id: str, signals: Signals, policy: IdlePolicy, now: dt.datetime) -> Assessment:
    """Idle only when every required signal says idle over the whole window, and the newest sample is fresh.

    Any data gap or stale data means unmonitored. GPU memory is in MiB (see ``MEMORY_UNITS``). This is the heart
    shared by the sweep, the re-check before acting and the backtest (whose columnar replay applies the same
    :func:`idle_checks`); grace, exemptions and snoozes are applied by ``assess``.
    """
    end = now.timestamp()
    start = end - policy.window_minutes * 60
    evidence: dict[str, Any] = {
        "window_start": dt.datetime.fromtimestamp(start, dt.UTC).isoformat(),
        "window_end": now.isoformat(),
    }
    stats: dict[str, tuple[int, float, float]] = {}
    required = required_signals(policy)
    for signal in SIGNALS:
        series = signals.get(signal) if signal in required else None
        stats[signal] = _window_stats(series.window(start, end) if series is not None else ())
    gpu = signals.get(GPU_UTILIZATION)
    newest = gpu.newest(end + 1) if gpu is not None else None
    age = (end - newest) / 60 if newest is not None else math.nan
    checks = idle_checks(stats, age, policy, policy.window_minutes)
    gaps: list[str] = []
    for signal in required:
        count = stats[signal][0]
        expected = expected_samples(signal, policy.window_minutes)
        evidence.setdefault("samples", {})[signal] = count
        evidence.setdefault("expected_samples", {})[signal] = expected
        if checks[f"gap:{signal}"]:
            gaps.append(f"{signal}: {count} of {expected} expected samples in the window (missing data is never idle)")
    if newest is not None:
        evidence["newest_sample_age_minutes"] = round(max(age, 0.0), 1)
        if checks["stale"]:
            gaps.append(
                f"{GPU_UTILIZATION}: newest sample is {age:.1f} min old (max_sample_age_minutes "
                f"{policy.max_sample_age_minutes}); stale data is never idle"
            )
    busy: list[str] = []
    count, peak, _ = stats[GPU_UTILIZATION]
    if count:
        evidence["max_gpu_utilization"] = round(peak, 2)
        if checks[f"busy:{GPU_UTILIZATION}"]:
            busy.append(f"GPU utilisation reached {peak:.1f}% (threshold {policy.gpu_utilization_threshold:g}%)")
    tolerance = policy.memory_change_tolerance_mib
    count, high, low = stats[GPU_MEMORY_USED]
    if tolerance is not None and count:
        change = high - low
        evidence["max_gpu_memory_used_mib"] = round(high, 1)
        evidence["gpu_memory_change_mib"] = round(change, 1)
        if checks[f"busy:{GPU_MEMORY_USED}"]:
            busy.append(f"GPU memory in use changed by {change:.0f} MiB (tolerance {tolerance:g} MiB)")
    count, peak, _ = stats[CPU_UTILIZATION]
    if policy.cpu_utilization_threshold is not None and count:
        evidence["max_cpu_utilization"] = round(peak, 2)
        if checks[f"busy:{CPU_UTILIZATION}"]:
            busy.append(f"CPU utilisation reached {peak:.1f}% (threshold {policy.cpu_utilization_threshold:g}%)")
    count, peak, _ = stats[NETWORK_BYTES]
    if policy.network_bytes_threshold is not None and count:
        evidence["max_network_bytes"] = round(peak, 1)
        if checks[f"busy:{NETWORK_BYTES}"]:
            busy.append(f"network traffic reached {peak:.0f} bytes (threshold {policy.network_bytes_threshold:g})")
    if busy:
        return Assessment(instance_id, "busy", busy, evidence)
    if gaps:
        return Assessment(instance_id, "unmonitored", gaps, evidence)
    memory = f", memory moved {evidence['gpu_memory_change_mib']:.0f} MiB" if tolerance is not None else ""
    reasons = [
        f"idle by every signal for {policy.window_minutes} min: GPU max {evidence['max_gpu_utilization']:.1f}%{memory}"
    ]
    return Assessment(instance_id, "idle", reasons, evidence)


def onset_limits(policy: IdlePolicy) -> list[tuple[str, float]]:
    """The signals and thresholds whose busy samples end a quiet stretch (see :func:`idle_onset`)."""
    limits = [(GPU_UTILIZATION, policy.gpu_utilization_threshold)]
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
    gpu = signals.get(GPU_UTILIZATION)
    if gpu is None or not gpu.times:
        return None
    latest: float | None = None
    first, last = since.timestamp(), now.timestamp()
    for signal, limit in limits:
        series = signals.get(signal)
        if series is None:
            continue
        low = bisect_left(series.times, first)
        high = bisect_left(series.times, last, lo=low)
        for index in range(high - 1, low - 1, -1):
            if series.values[index] >= limit:
                busy_end = series.times[index] + SAMPLE_SECONDS[signal]
                latest = busy_end if latest is None else max(latest, busy_end)
                break
    return latest


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
    """Stop keeps the disks (on-demand, EBS-backed); Spot and instance-store roots cannot be kept, so terminate.

    A member of an Auto Scaling group is always terminated through the group: a stopped member is replaced.
    """
    if instance.root_device_type == "instance-store" or auto_scaling_group(instance):
        return "terminate"
    return policy.spot_action if instance.lifecycle == "spot" else policy.on_demand_action


def auto_scaling_group(instance: Instance) -> str | None:
    """The Auto Scaling group the instance belongs to (EC2 Auto Scaling tags its members), or None."""
    return instance.tags.get(ASG_TAG, "").strip() or None


def kubernetes_owner(instance: Instance) -> str | None:
    """Why a Kubernetes cluster (EKS, Karpenter) owns this node, from the tags they put on it, or None."""
    for key in EKS_TAGS:
        if instance.tags.get(key, "").strip():
            return f"tag {key}={instance.tags[key]}"
    for key in instance.tags:
        if key.startswith(EKS_TAG_PREFIX):
            return f"tag {key}"
    return None


def report_only_reason(instance: Instance, policy: IdlePolicy) -> str | None:
    """Why this instance may only be reported, never reclaimed: its capacity belongs to a cluster or a group."""
    node = kubernetes_owner(instance)
    if node:
        return (
            f"a Kubernetes node ({node}): its cluster autoscaler owns the capacity and would replace it, "
            "so it is reported only; drain or scale the node group instead"
        )
    group = auto_scaling_group(instance)
    if group and policy.asg_action == "report":
        return f"a member of Auto Scaling group {group}; asg_action is report, so it is reported only"
    return None


def checkpoint_command(instance: Instance, policy: Policy) -> str | None:
    """The command to run before acting: the allow-list entry the tag names, else ``idle.checkpoint_command``.

    Never the tag's own text, and nothing for an instance without ``fleet.fleet_tags`` (the SendCommand grant's
    condition would refuse it anyway).
    """
    if not policy.fleet.carries_fleet_tags(instance.tags):
        return None
    return checkpoint_choice(instance.tags, policy.fleet, policy.idle.checkpoint_command).command


def checkpoint_notes(instance: Instance, policy: Policy) -> list[str]:
    """Why the checkpoint is not what the instance's tags ask for: an unknown command name, or no command tags."""
    choice = checkpoint_choice(instance.tags, policy.fleet, policy.idle.checkpoint_command)
    notes = [choice.problem] if choice.problem else []
    if choice.command and not policy.fleet.carries_fleet_tags(instance.tags):
        wanted = ", ".join(f"{k}={v}" for k, v in policy.fleet.fleet_tags.items())
        notes.append(f"no checkpoint sent: the instance lacks fleet.fleet_tags ({wanted})")
    return notes


def mark_tag_problems(instance: Instance, stored: Mark | None, now: dt.datetime) -> list[TagProblem]:
    """The governor's own marks on the instance that its ledger does not back, or that lie in the future.

    Anyone who can tag could otherwise skip the warning (an old ``idle-since``) or postpone reclamation forever (one
    in the future); the ledger is the only source of marks, the tags are a mirror for people.
    """
    problems: list[TagProblem] = []
    value = instance.tags.get(IDLE_SINCE_TAG)
    if value is not None:
        since = parse_time(value)
        if since is None:
            problems.append(TagProblem(IDLE_SINCE_TAG, value, "not an ISO date-time"))
        elif since > now:
            problems.append(TagProblem(IDLE_SINCE_TAG, value, "in the future"))
        elif stored is None or abs((stored.idle_since - since).total_seconds()) >= 1:
            problems.append(TagProblem(IDLE_SINCE_TAG, value, "the governor's ledger holds no such mark"))
    action = instance.tags.get(IDLE_ACTION_TAG)
    if action is not None:
        _, _, when = action.partition("@")
        at = parse_time(when)
        if at is None or at > now:
            problems.append(TagProblem(IDLE_ACTION_TAG, action, "not an action@time the governor wrote in the past"))
    return problems


def current_mark(instance: Instance, stored: Mark | None) -> Mark | None:
    """The ledger's mark; a mark from before the instance's last start is stale and ignored.

    The ``governor:idle-since`` tag is never read back as a mark (see :func:`mark_tag_problems`).
    """
    if stored is None or stored.idle_since < instance.launch_time:
        return None
    return stored


def _decision(
    instance: Instance,
    verdict: Verdict,
    outcome: Outcome,
    reasons: list[str],
    evidence: dict[str, Any],
    actions: Iterable[AnyAction] = (),
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
        actions: list[AnyAction] = []
        reasons = list(assessment.reasons)
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
            if IDLE_SINCE_TAG in instance.tags:
                actions.append(Untag(enforced=enforce, keys=[IDLE_SINCE_TAG]))
        verdict: Verdict = "ignored" if assessment.status in ("grace", "exempt", "snoozed") else "ok"
        severity: Severity = "warning" if assessment.status == "unmonitored" else "info"
        decision = _decision(instance, verdict, assessment.status, reasons, evidence, actions, severity)
        return InstanceOutcome(instance, assessment.status, decision, None, prior=mark)

    report_only = report_only_reason(instance, idle)
    # A report-only policy's "would be stopped" is not a warning that it will be: once enforcement is switched on,
    # an instance reported earlier is warned again (its idle_since kept) before anything is done to it.
    rewarn = enforce and mark is not None and mark.reported_at is not None and not report_only
    # A mark whose warning was never published (``warned_at`` unset) has not started the clock: warn again.
    unpublished = mark is not None and mark.warned_at is None
    if mark is None or rewarn or unpublished:
        due = now + dt.timedelta(minutes=idle.warning_minutes)
        action = reclaim_action(instance, idle)
        planned = "report" if report_only else action
        what = "reported" if report_only else _PAST[action]
        reasons = [*assessment.reasons, f"{planned} due at {due.isoformat()} unless the instance is used or snoozed"]
        if report_only:
            reasons.append(report_only)
        since = mark.idle_since if mark is not None else now
        if rewarn:
            reasons.append("idle.enforce is now on: warned again, the report-only notice did not say it would be done")
        actions = [
            Tag(enforced=enforce, tags={IDLE_SINCE_TAG: since.isoformat()}),
            Warn(
                enforced=enforce,
                owner=owner.owner,
                due=due.isoformat(),
                planned=planned,
                snooze_tag=policy.fleet.keep_until_tag,
                exempt_tag=policy.fleet.exempt_tag,
            ),
        ]
        decision = _decision(instance, "act", "warned", reasons, evidence, actions, "warning")
        verb = "will be" if enforce else "would be"
        title = f"Idle GPU instance {instance.id} ({instance.type}) {verb} {what} at {due:%Y-%m-%d %H:%M} UTC"
        if not enforce:
            title += " (report-only)"
        return InstanceOutcome(instance, "warned", decision, Mark(idle_since=since, warned_at=now), title, prior=mark)

    evidence["idle_since"] = mark.idle_since.isoformat()
    warned = mark.warned_at or mark.idle_since  # set: an unpublished warning was handled above
    due = warned + dt.timedelta(minutes=idle.warning_minutes)
    if now < due or not may_act:
        reasons = [*assessment.reasons, f"warned at {warned.isoformat()}; action due at {due.isoformat()}"]
        if not may_act:
            reasons.append(f"no action before every signal has been idle for the whole {idle.window_minutes} min")
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark, prior=mark)
    if mark.reported_at is not None:
        why = "reported only" if report_only else "report-only policy"
        reasons = [*assessment.reasons, f"reported for action at {mark.reported_at.isoformat()} ({why})"]
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark, prior=mark)
    if report_only:
        reasons = [*assessment.reasons, f"idle since {mark.idle_since.isoformat()}; {report_only}"]
        actions = [Notify(enforced=enforce, owner=owner.owner, reason=report_only)]
        decision = _decision(instance, "act", "reported", reasons, evidence, actions, "warning")
        title = f"Idle GPU instance {instance.id} ({instance.type}) reported, not reclaimed: {report_only}"
        return InstanceOutcome(instance, "reported", decision, replace(mark, reported_at=now), title, prior=mark)

    command = checkpoint_command(instance, policy)
    notes = checkpoint_notes(instance, policy)
    if notes:
        evidence["checkpoint_notes"] = notes
    if command and mark.checkpoint_sent_at is None:
        reasons = [*assessment.reasons, "still idle after the warning; checkpoint first, then act on the next sweep"]
        reasons += notes
        actions = [Checkpoint(enforced=enforce, command=command, timeout=idle.checkpoint_timeout_seconds)]
        new_mark = replace(mark, checkpoint_sent_at=now, checkpoint_status=None if enforce else "NotSent")
        decision = _decision(instance, "act", "checkpoint", reasons, evidence, actions)
        return InstanceOutcome(instance, "checkpoint", decision, new_mark, prior=mark)
    if command and mark.checkpoint_sent_at is not None:
        status = mark.checkpoint_status or "Pending"
        evidence["checkpoint_status"] = status
        deadline = mark.checkpoint_sent_at + dt.timedelta(seconds=idle.checkpoint_timeout_seconds)
        if status not in CHECKPOINT_DONE and now < deadline:
            reasons = [*assessment.reasons, f"checkpoint {status}; waiting until {deadline.isoformat()}"]
            decision = _decision(instance, "ok", "idle", reasons, evidence)
            return InstanceOutcome(instance, "idle", decision, mark, prior=mark)

    action = reclaim_action(instance, idle)
    reasons = [
        *assessment.reasons,
        f"idle since {mark.idle_since.isoformat()}, warned at {warned.isoformat()}; still idle after "
        f"{idle.warning_minutes} min",
    ]
    if "checkpoint_status" in evidence:
        reasons.append(f"checkpoint command ended {evidence['checkpoint_status']}")
    group = auto_scaling_group(instance)
    through: dict[str, Any] = {"via": "autoscaling", "group": group, "decrement_desired": True} if group else {}
    if group:
        reasons.append(f"through Auto Scaling group {group}, desired capacity decremented (never below its minimum)")
    reasons += notes
    actions = [
        reclaim(
            action,
            enforced=enforce,
            lifecycle=instance.lifecycle,
            root_device=instance.root_device_type,
            **through,
        ),
        Tag(enforced=enforce, tags={IDLE_ACTION_TAG: f"{action}@{now.isoformat()}"}, remove=[IDLE_SINCE_TAG]),
    ]
    decision = _decision(instance, "act", "acted", reasons, evidence, actions, "warning")
    if enforce:
        title = f"Idle GPU instance {instance.id} ({instance.type}) {_PAST[action]}"
    else:
        title = (
            f"Idle GPU instance {instance.id} ({instance.type}) would be {_PAST[action]} now (report-only: not done)"
        )
    next_mark = None if enforce else replace(mark, reported_at=now)
    return InstanceOutcome(instance, "acted", decision, next_mark, title, prior=mark)


def _withhold(outcome: InstanceOutcome, status: Literal["held", "deferred"], why: str) -> InstanceOutcome:
    """The same decision with nothing enforced, and the mark as it was before this sweep (its place in line)."""
    decision = outcome.decision
    kept = decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, why],
            "evidence": {**decision.evidence, "status": status},
            "rule": f"idle.{status}",
        }
    )
    return InstanceOutcome(outcome.instance, status, kept, outcome.prior, prior=outcome.prior)


def action_limit(fleet_size: int, policy: IdlePolicy) -> int:
    """Actions one sweep may take: both bounds, the percentage never rounded below one action (small fleets)."""
    if policy.max_fleet_percent <= 0:
        return 0
    share = max(1, math.floor(policy.max_fleet_percent * fleet_size / 100))
    return min(policy.max_actions_per_sweep, share)


def breaker_quiet_minutes(policy: IdlePolicy, interval: dt.timedelta) -> float:
    """How long an instance must have been quiet to count as having turned idle, for the breaker.

    Half the warning window (45 min by default), at least one interval: long enough that a sparse inference server
    between requests or a job's checkpoint pause is not counted, short enough that the breaker trips before anything
    that turned idle with the anomaly is warned (``window - warning``) or acted on (``window``).
    """
    return max(interval.total_seconds() / 60, warning_window_minutes(policy) / 2)


def _trip_count(monitored: int, policy: IdlePolicy) -> int:
    """How many instances turning idle together trip the breaker: more than the share, and at least the minimum."""
    over_share = math.floor(policy.breaker_fleet_percent * monitored / 100) + 1
    return max(policy.breaker_min_instances, over_share)


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


def _breaker(
    state: Breaker,
    idle_now: set[str],
    onsets: Mapping[str, float],
    monitored: int,
    policy: IdlePolicy,
    now: dt.datetime,
    interval: dt.timedelta,
) -> tuple[Breaker, bool, bool]:
    """The breaker after this sweep, whether it tripped now, and whether it re-armed by itself now.

    ``idle_now`` are the instances judged idle this sweep; ``onsets`` when quiet stretches began (only those quiet
    for ``breaker_quiet_minutes``). It trips when more than ``breaker_fleet_percent`` of the monitored fleet (and at
    least ``breaker_min_instances``) turned idle within one interval; it then holds those and every instance whose
    quiet stretch began up to one window before them (their whole window overlaps the anomaly). Held instances that
    are busy again leave the set. Once fewer than the trip count are still quiet the anomaly has cleared; after one
    more window of fresh data the breaker re-arms and the rest are judged like any other instance.
    """
    quiet = idle_now | set(onsets)
    released = frozenset(i for i in state.released if i in quiet)
    window = dt.timedelta(minutes=policy.window_minutes)
    threshold = _trip_count(monitored, policy)
    if state.open:
        held = frozenset(i for i in state.held if i in quiet) - released
        start = state.anomaly_start or now
        joined = {i for i, t in onsets.items() if t >= (start - window).timestamp()} - released
        held |= joined
        cleared = state.cleared_at
        if cleared is None and len(held) < threshold:
            cleared = now
        if not held or (cleared is not None and now >= cleared + window):
            return Breaker(released=released), False, True
        return replace(state, held=held, cleared_at=cleared, released=released), False, False
    fresh = {i: t for i, t in onsets.items() if i not in released}
    group = _densest(fresh, interval.total_seconds())
    if len(group) < threshold:
        return Breaker(released=released), False, False
    start_epoch = min(fresh[i] for i in group)
    held = frozenset(i for i, t in fresh.items() if t >= start_epoch - window.total_seconds())
    anomaly_start = dt.datetime.fromtimestamp(start_epoch, dt.UTC)
    return Breaker(tripped_at=now, anomaly_start=anomaly_start, held=held, released=released), True, False


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
) -> SweepPlan:
    """Decide every running GPU instance; the breaker holds correlated ones, the rate limit defers the surplus.

    The rate limit lets at most ``action_limit`` checkpoints and reclaims through per sweep, longest idle first; the
    rest are ``deferred`` with their marks kept, so a backlog drains over the next sweeps. The breaker (see
    ``_breaker``) holds instances that turned idle together and raises one critical alarm per trip. ``settled``
    summarises instances decided outside this call (see :class:`Settled`); the sweep Lambda passes none.
    """
    idle = policy.idle
    state = breaker or Breaker()
    bulk = settled or Settled()
    since = lookback_start(idle, now, interval)
    quiet_seconds = breaker_quiet_minutes(idle, interval) * 60
    outcomes: list[InstanceOutcome] = []
    onsets: dict[str, float] = dict(bulk.onsets)
    monitored = bulk.monitored
    fleet_size = len(instances) + bulk.count
    for instance in instances:
        instance_signals = signals.get(instance.id, {})
        assessment, may_act = assess_for_sweep(instance, instance_signals, policy, now)
        mark = current_mark(instance, marks.get(instance.id))
        outcome = decide(instance, assessment, mark, policy, now, may_act=may_act)
        outcomes.append(outcome)
        if assessment.status not in ("busy", "idle"):
            continue
        monitored += 1
        onset = idle_onset(instance_signals, idle, now, since)
        if onset is not None and now.timestamp() - onset >= quiet_seconds:
            onsets[instance.id] = onset
    # An operator (or the owner) releases one held instance with the tag; it is then judged like any other.
    by_tag = {o.instance.id for o in outcomes if o.instance.tags.get(IDLE_BREAKER_TAG, "").strip() == "release"}
    idle_now = {o.instance.id for o in outcomes if o.outcome in _IDLE_OUTCOMES}
    state = replace(state, released=state.released | (by_tag & idle_now))
    state, tripped, rearmed_now = _breaker(state, idle_now, onsets, monitored, idle, now, interval)
    held_ids = state.held
    note = (
        f"circuit breaker: {len(held_ids)} instances turned idle together since "
        f"{state.anomaly_start.isoformat() if state.anomaly_start else now.isoformat()} (a metrics or driver outage "
        "looks like this); held, nothing done, until the anomaly clears or an operator re-arms"
    )
    outcomes = [
        _withhold(o, "held", note) if o.instance.id in held_ids and o.outcome in _IDLE_OUTCOMES else o for o in outcomes
    ]
    prices = policy.lifecycle.prices

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
    if deferred_ids:
        why = (
            f"deferred: {len(acting)} actions due, at most {limit} per sweep (max_actions_per_sweep "
            f"{idle.max_actions_per_sweep}, max_fleet_percent {idle.max_fleet_percent:g}% of {fleet}); "
            "longest idle first (then the dearest), next sweep"
        )
        outcomes = [_withhold(o, "deferred", why) if o.instance.id in deferred_ids else o for o in outcomes]
    alarm = _alarm(state, monitored, policy, now) if tripped else None
    rearmed = None
    if rearmed_now:
        rearmed = Decision(
            policy=POLICY,
            verdict="ok",
            resource="gpu-fleet",
            reasons=["circuit breaker re-armed: the correlated idle anomaly has cleared"],
            evidence={"status": "rearmed"},
            rule="idle.breaker-rearmed",
        )
    held_now = sum(1 for o in outcomes if o.outcome == "held")
    return SweepPlan(outcomes, fleet_size, alarm, held_now, state, len(deferred_ids), rearmed)


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
        if o.outcome in _IDLE_OUTCOMES
        and o.prior is not None
        and o.prior.reported_at is not None
        and report_only_reason(o.instance, policy) is None
    }


def _alarm(state: Breaker, monitored: int, policy: Policy, now: dt.datetime) -> Decision:
    idle = policy.idle
    share = 100 * len(state.held) / max(monitored, 1)
    since = state.anomaly_start.isoformat() if state.anomaly_start else now.isoformat()
    return Decision(
        policy=POLICY,
        verdict="act",
        resource="gpu-fleet",
        actions=[Notify(enforced=idle.enforce, held_back=sorted(state.held))],
        reasons=[
            f"circuit breaker: {len(state.held)} of {monitored} monitored instances ({share:.0f}%) turned idle "
            f"within one sweep interval from {since}, more than breaker_fleet_percent {idle.breaker_fleet_percent:g}%",
            "none of them is warned or acted on; it re-arms by itself once they are busy again, or run "
            "`governor idle rearm` (or tag an instance governor:idle-breaker=release) after checking the agents",
        ],
        evidence={
            "status": "held",
            "held_back": len(state.held),
            "monitored": monitored,
            "anomaly_start": since,
            "breaker_fleet_percent": idle.breaker_fleet_percent,
            "breaker_min_instances": idle.breaker_min_instances,
        },
        severity="critical",
        rule="idle.circuit-breaker",
    )


@dataclass
class ReplayedInstance:
    """What the replayed policy did to one instance: warnings and the action with their times."""

    actions: list[tuple[dt.datetime, str]] = field(default_factory=list)
    stopped_at: dt.datetime | None = None
    gpu_hours_reclaimed: float = 0.0


@dataclass
class Replay:
    """The backtest: per-instance actions, verdict counts over every sweep, the sweeps the breaker held (and when it
    tripped), and how many sweeps deferred actions to the next one."""

    start: dt.datetime
    end: dt.datetime
    interval: dt.timedelta
    sweeps: int = 0
    instances: dict[str, ReplayedInstance] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    held_back_sweeps: list[dt.datetime] = field(default_factory=list)
    breaker_trips: list[dt.datetime] = field(default_factory=list)
    deferred_sweeps: int = 0

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
    """Run the sweep every ``interval`` over recorded metrics, as if enforcing, with the warning period, the rate
    limit and the circuit breaker applied (nobody re-arms it by hand in a replay).

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
    breaker = Breaker()
    now = start + interval
    while now <= end:
        running = [i for i in fleet if result.instances[i.id].stopped_at is None]
        plan = sweep(running, signals, marks, enforcing, now, interval=interval, breaker=breaker)
        breaker = plan.breaker
        result.sweeps += 1
        if plan.held_back:
            result.held_back_sweeps.append(now)
        if plan.alarm is not None:
            result.breaker_trips.append(now)
        if plan.deferred:
            result.deferred_sweeps += 1
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
