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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol

from governor.domain.actions import AnyAction, Checkpoint, Notify, Tag, Untag, Warn
from governor.domain.breaker import Breaker
from governor.domain.capacity import UNUSED_STATUS, Reservation, idle_hold, purchase_model, reservation_evidence
from governor.domain.decision import Decision, Severity, Verdict
from governor.domain.fleet import UNKNOWN, Instance, TagProblem, checkpoint_choice, exemption, ownership, snoozed_until
from governor.domain.tagging import KUBERNETES_TAG_PREFIX, KUBERNETES_TAGS
from governor.domain.times import parse_time
from governor.idle.actions import reclaim
from governor.idle.ownership import cluster_name, kubernetes_node
from governor.idle.policy import IdlePolicy
from governor.policy import Policy

POLICY = "idle"
IDLE_SINCE_TAG = "governor:idle-since"
IDLE_ACTION_TAG = "governor:idle-action"
IDLE_BREAKER_TAG = "governor:idle-breaker"
MARK_KIND = "idle-mark"
# GPU memory is judged in MiB; the CloudWatch agent's nvidia_smi plugin publishes MB, which are nvidia-smi's MiB.
MEMORY_UNITS: dict[str, float] = {"MB": 1.0, "MiB": 1.0, "bytes": 1.0 / (1024 * 1024)}
DEFAULT_INTERVAL = dt.timedelta(minutes=15)
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
# EKS and Karpenter mark their nodes with these tags (a claim; governor.idle.ownership says when it is proven).
EKS_TAGS = KUBERNETES_TAGS
EKS_TAG_PREFIX = KUBERNETES_TAG_PREFIX
ASG_TAG = "aws:autoscaling:groupName"

GPU_UTILIZATION = "gpu_utilization"
GPU_MEMORY_USED = "gpu_memory_used"
CPU_UTILIZATION = "cpu_utilization"
NETWORK_BYTES = "network_bytes"
# Power draw in W, and the graphics engine's activity in percent (DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100): optional
# signals, judged when the source publishes them. Where a GPU reports engine activity it is the activity judged
# (NVIDIA calls GPU_UTIL outdated; it reads 0 or N/A on MIG slices); elsewhere utilisation.
GPU_POWER = "gpu_power_draw"
GPU_ENGINE_ACTIVE = "gpu_engine_active"
SIGNALS = (GPU_UTILIZATION, GPU_MEMORY_USED, CPU_UTILIZATION, NETWORK_BYTES, GPU_POWER, GPU_ENGINE_ACTIVE)
HOST_SIGNALS = frozenset({CPU_UTILIZATION, NETWORK_BYTES})
# A GPU signal of one device (GPU index, or MIG slice) is keyed "signal@device"; without "@" it is the instance's
# one aggregated reading (the CloudWatch agent's InstanceId aggregation: the busiest GPU each minute).
DEVICE_SEP = "@"
# EC2's own metrics (CPU, network) arrive every 5 minutes under basic monitoring; GPU agent metrics every minute.
SAMPLE_SECONDS = {
    GPU_UTILIZATION: 60,
    GPU_MEMORY_USED: 60,
    CPU_UTILIZATION: 300,
    NETWORK_BYTES: 300,
    GPU_POWER: 60,
    GPU_ENGINE_ACTIVE: 60,
}
# SSM command states after which the checkpoint is over, one way or the other.
_PAST = {"stop": "stopped", "terminate": "terminated"}
CHECKPOINT_DONE = frozenset({"Success", "Failed", "TimedOut", "Cancelled", "Undeliverable", "Terminated", "NotSent"})

Status = Literal["grace", "exempt", "snoozed", "unmonitored", "busy", "stalled", "idle"]
Outcome = Literal[
    "stalled",
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
    """The port the idle decision reads GPU signals through (``governor.idle.sources`` names the implementations).

    Returns, per instance, a series per signal (``SIGNALS``: utilisation or graphics-engine activity in percent,
    memory in MiB, power in W, CPU, network), or per device as ``signal@device`` (a GPU index or MIG slice); a
    signal the source does not publish is absent or empty, and missing data is never idle. The CloudWatch agent is
    the first implementation (``governor.idle.metrics``); ``backtest`` reads files into the same shape.
    """

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


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def required_signals(policy: IdlePolicy) -> tuple[str, ...]:
    """The signals this policy needs enough samples of: GPU activity always; memory, CPU and network when configured."""
    wanted = [GPU_UTILIZATION]
    if policy.memory_change_tolerance_mib is not None:
        wanted.append(GPU_MEMORY_USED)
    if policy.cpu_utilization_threshold is not None:
        wanted.append(CPU_UTILIZATION)
    if policy.network_bytes_threshold is not None:
        wanted.append(NETWORK_BYTES)
    return tuple(wanted)


def fetched_signals(policy: IdlePolicy) -> tuple[str, ...]:
    """What a sweep asks the metric source for: the required signals, plus those judged when published (engine
    activity; power unless ``idle_power_margin_percent`` is null). A source without a signal returns no series."""
    optional = [GPU_ENGINE_ACTIVE]
    if policy.idle_power_margin_percent is not None:
        optional.append(GPU_POWER)
    return (*required_signals(policy), *optional)


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


def _window_stats(values: Sequence[float]) -> tuple[int, float, float]:
    return (len(values), max(values), min(values)) if values else (0, math.nan, math.nan)


def devices(signals: Signals) -> dict[str, dict[str, Series]]:
    """The signals of each GPU device ("" for the instance's one aggregated reading), host signals with each.

    Per-device readings (``signal@device``) win over an aggregated one: an instance is judged per GPU or MIG slice
    when its source publishes them, and is idle only when every device is.
    """
    host = {key: series for key, series in signals.items() if key in HOST_SIGNALS}
    found: dict[str, dict[str, Series]] = {}
    for key, series in signals.items():
        base, _, device = key.partition(DEVICE_SEP)
        if base not in HOST_SIGNALS:
            found.setdefault(device, {})[base] = series
    if len(found) > 1:
        found.pop("", None)
    return {device: {**host, **mine} for device, mine in (found or {"": {}}).items()}


@dataclass(frozen=True)
class PowerLimit:
    """The power an idle GPU of this instance may draw (None: unknown, power not judged), and why."""

    ceiling: float | None
    note: str
    model: str | None = None


def power_limit(instance_type: str, policy: IdlePolicy) -> PowerLimit:
    """From the instance type's GPU model and its measured (or the policy's) idle draw and limit."""
    from governor.idle.power import GpuPower, power_of

    if policy.idle_power_margin_percent is None:
        return PowerLimit(None, "power is not judged (idle_power_margin_percent is null)")
    overrides = {
        model: GpuPower(entry.idle_watts, entry.limit_watts, "policy idle.gpu_power")
        for model, entry in policy.gpu_power.items()
    }
    model, found = power_of(instance_type, overrides)
    if found is None:
        what = model or f"the GPU of {instance_type}"
        return PowerLimit(None, f"power not judged: no measured idle draw for {what} (set idle.gpu_power)", model)
    ceiling = round(found.ceiling(policy.idle_power_margin_percent), 2)
    return PowerLimit(
        ceiling, f"{model}: idle {found.idle_watts:g} W, limit {found.limit_watts:g} W ({found.source})", model
    )


def _device_assessment(
    signals: Signals, policy: IdlePolicy, start: float, end: float, ceiling: float | None
) -> tuple[dict[str, Any], dict[str, tuple[int, float, float]], float, Any]:
    """One device's checks, window statistics, newest activity sample's age and whether it looks stalled."""
    stats: dict[str, tuple[int, float, float]] = {}
    required = required_signals(policy)
    for signal in SIGNALS:
        wanted = signal in required or signal in (GPU_POWER, GPU_ENGINE_ACTIVE)
        series = signals.get(signal) if wanted else None
        stats[signal] = _window_stats(series.window(start, end) if series is not None else ())
    activity = signals.get(GPU_ENGINE_ACTIVE) if stats[GPU_ENGINE_ACTIVE][0] else signals.get(GPU_UTILIZATION)
    newest = activity.newest(end + 1) if activity is not None else None
    age = (end - newest) / 60 if newest is not None else math.nan
    limit = math.nan if ceiling is None else ceiling
    checks = idle_checks(stats, age, policy, policy.window_minutes, limit)
    return checks, stats, age, stall_check(stats, policy, policy.window_minutes, limit)


def assess_signals(
    instance_id: str, signals: Signals, policy: IdlePolicy, now: dt.datetime, power: PowerLimit | None = None
) -> Assessment:
    """Idle only when every device's every signal says idle over the whole window, and the newest sample is fresh.

    Any data gap or stale data means unmonitored (a GPU whose utilisation reads N/A has no series: never idle).
    GPU memory is in MiB (see ``MEMORY_UNITS``); power is judged against ``power`` (the instance's GPU model). A
    GPU busy by utilisation at near-idle power with memory still is "stalled". This is the heart shared by the sweep,
    the re-check before acting and the backtest (whose columnar replay applies the same :func:`idle_checks`);
    grace, exemptions and snoozes are applied by ``assess``.
    """
    end = now.timestamp()
    start = end - policy.window_minutes * 60
    evidence: dict[str, Any] = {
        "window_start": dt.datetime.fromtimestamp(start, dt.UTC).isoformat(),
        "window_end": now.isoformat(),
    }
    ceiling = power.ceiling if power is not None else None
    if power is not None and policy.idle_power_margin_percent is not None:
        evidence["power_limit"] = power.note
        if ceiling is not None:
            evidence["idle_power_ceiling_w"] = ceiling
    busy: list[str] = []
    gaps: list[str] = []
    stalled: list[str] = []
    per_device: dict[str, dict[str, Any]] = {}
    for device, device_signals in sorted(devices(signals).items()):
        checks, stats, age, stall = _device_assessment(device_signals, policy, start, end, ceiling)
        mine = evidence if not device else per_device.setdefault(device, {})
        label = f"GPU {device}: " if device else ""
        found_busy, found_gaps = _describe(checks, stats, age, policy, mine, label, ceiling)
        if stall:
            stalled.append(
                f"{label}utilisation stayed at or above {policy.stall_utilization_threshold:g}% for "
                f"{policy.window_minutes} min at {stats[GPU_POWER][1]:.0f} W, near the idle draw "
                f"({ceiling:g} W at most), with GPU memory still: a hung job (e.g. a deadlocked NCCL collective)"
            )
        else:
            busy += found_busy
        gaps += found_gaps
    if per_device:
        evidence["devices"] = per_device
        _summarise_devices(evidence, per_device)
    if busy:
        return Assessment(instance_id, "busy", busy, evidence)
    if gaps:
        return Assessment(instance_id, "unmonitored", gaps, evidence)
    if stalled:
        evidence["stalled_since"] = _stalled_since(signals, policy, now, ceiling if ceiling is not None else math.inf)
        return Assessment(instance_id, "stalled", stalled, evidence)
    memory = (
        f", memory moved {evidence['gpu_memory_change_mib']:.0f} MiB" if "gpu_memory_change_mib" in evidence else ""
    )
    watts = f", power at most {evidence['max_gpu_power_w']:.0f} W" if "max_gpu_power_w" in evidence else ""
    reasons = [
        f"idle by every signal for {policy.window_minutes} min: GPU max {evidence['max_gpu_utilization']:.1f}%"
        f"{memory}{watts}"
    ]
    return Assessment(instance_id, "idle", reasons, evidence)


def _describe(
    checks: Mapping[str, Any],
    stats: Mapping[str, tuple[int, float, float]],
    age: float,
    policy: IdlePolicy,
    evidence: dict[str, Any],
    label: str,
    ceiling: float | None,
) -> tuple[list[str], list[str]]:
    """The evidence of one device's checks, and its busy and missing-data reasons in words."""
    gaps: list[str] = []
    activity_signal = GPU_ENGINE_ACTIVE if stats[GPU_ENGINE_ACTIVE][0] else GPU_UTILIZATION
    activity = stats[activity_signal]
    for signal in required_signals(policy):
        name = activity_signal if signal == GPU_UTILIZATION else signal
        count = stats[name][0]
        expected = expected_samples(signal, policy.window_minutes)
        evidence.setdefault("samples", {})[name] = count
        evidence.setdefault("expected_samples", {})[name] = expected
        if checks[f"gap:{signal}"]:
            gaps.append(
                f"{label}{name}: {count} of {expected} expected samples in the window (missing data is never idle)"
            )
    if checks.get(f"gap:{GPU_POWER}"):
        count, expected = stats[GPU_POWER][0], expected_samples(GPU_POWER, policy.window_minutes)
        gaps.append(f"{label}{GPU_POWER}: {count} of {expected} expected samples (power stopped reporting)")
    if not math.isnan(age):
        evidence["newest_sample_age_minutes"] = round(max(age, 0.0), 1)
        if checks["stale"]:
            gaps.append(
                f"{label}{activity_signal}: newest sample is {age:.1f} min old (max_sample_age_minutes "
                f"{policy.max_sample_age_minutes}); stale data is never idle"
            )
    busy: list[str] = []
    count, peak, _ = activity
    if count:
        evidence["max_gpu_utilization"] = round(peak, 2)
        if activity_signal == GPU_ENGINE_ACTIVE:
            evidence["activity_signal"] = GPU_ENGINE_ACTIVE
        if checks[f"busy:{GPU_UTILIZATION}"]:
            what = "graphics engine activity" if activity_signal == GPU_ENGINE_ACTIVE else "GPU utilisation"
            busy.append(f"{label}{what} reached {peak:.1f}% (threshold {policy.gpu_utilization_threshold:g}%)")
    tolerance = policy.memory_change_tolerance_mib
    count, high, low = stats[GPU_MEMORY_USED]
    if tolerance is not None and count:
        change = high - low
        evidence["max_gpu_memory_used_mib"] = round(high, 1)
        evidence["gpu_memory_change_mib"] = round(change, 1)
        if checks[f"busy:{GPU_MEMORY_USED}"]:
            busy.append(f"{label}GPU memory in use changed by {change:.0f} MiB (tolerance {tolerance:g} MiB)")
    count, peak, _ = stats[GPU_POWER]
    if policy.idle_power_margin_percent is not None and count:
        evidence["max_gpu_power_w"] = round(peak, 2)
        if checks[f"busy:{GPU_POWER}"] and ceiling is not None:
            busy.append(f"{label}GPU power reached {peak:.0f} W, above the idle draw's ceiling of {ceiling:g} W")
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
    return busy, gaps


def _summarise_devices(evidence: dict[str, Any], per_device: Mapping[str, Mapping[str, Any]]) -> None:
    """The instance-level figures over its devices: the busiest device's maxima, the stalest newest sample."""
    for key, pick in (
        ("max_gpu_utilization", max),
        ("max_gpu_memory_used_mib", max),
        ("gpu_memory_change_mib", max),
        ("max_gpu_power_w", max),
        ("newest_sample_age_minutes", max),
    ):
        values = [d[key] for d in per_device.values() if key in d]
        if values:
            evidence[key] = pick(values)


def _stalled_since(signals: Signals, policy: IdlePolicy, now: dt.datetime, ceiling: float) -> str:
    """When the stall began: after the last sample below the stall threshold or above the idle power ceiling (the
    earliest sample read if none), so its finding is sent once, on the first sweep that sees a whole window of it."""
    threshold = policy.stall_utilization_threshold or 0.0
    end = now.timestamp() + 1
    since = now.timestamp()
    for device_signals in devices(signals).values():
        breaks: list[float] = []
        first = since
        for name, limit, above in (
            (GPU_ENGINE_ACTIVE if device_signals.get(GPU_ENGINE_ACTIVE) else GPU_UTILIZATION, threshold, False),
            (GPU_POWER, ceiling, True),
        ):
            found = device_signals.get(name)
            if found is None or not found.times:
                continue
            first = min(first, found.times[0])
            for t, v in zip(reversed(found.times), reversed(found.values), strict=True):
                if t < end and ((v > limit) if above else (v < limit)):
                    breaks.append(t + SAMPLE_SECONDS[name])
                    break
        since = min(since, max(breaks) if breaks else first)
    return dt.datetime.fromtimestamp(since, dt.UTC).isoformat()


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


def assess(instance: Instance, signals: Signals, policy: Policy, now: dt.datetime) -> Assessment:
    """Launch grace, exemptions and the owner's snooze first; then the signals."""
    idle = policy.idle
    grace_end = instance.launch_time + dt.timedelta(minutes=idle.launch_grace_minutes)
    if now < grace_end:
        reason = f"launched {instance.launch_time.isoformat()}; in launch grace until {grace_end.isoformat()}"
        return Assessment(instance.id, "grace", [reason], {})
    exempt = exemption(instance.id, instance.tags, policy.fleet, idle.exemptions, now, refused=instance.refused_keys)
    if exempt:
        return Assessment(instance.id, "exempt", [exempt], {})
    snooze = snoozed_until(instance.tags, policy.fleet, now)
    if snooze:
        return Assessment(
            instance.id, "snoozed", [f"owner snoozed reclamation ({policy.fleet.keep_until_tag}) until {snooze}"], {}
        )
    return assess_signals(instance.id, signals, idle, now, power_limit(instance.type, idle))


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
        early = assess_signals(instance.id, signals, early_policy, now, power_limit(instance.type, policy.idle))
        if early.status == "idle":
            return early, False
    return full, True


def reclaim_action(instance: Instance, policy: IdlePolicy) -> Literal["stop", "terminate"]:
    """Stop keeps the disks (on-demand, EBS-backed); Spot and instance-store roots cannot be kept, so terminate.

    A member of an Auto Scaling group is always terminated through the group: a stopped member is replaced. A
    Kubernetes node its cluster drains is removed (terminated) by its owner.
    """
    if (
        instance.root_device_type == "instance-store"
        or auto_scaling_group(instance)
        or draining_cluster(instance, policy)
    ):
        return "terminate"
    return policy.spot_action if instance.lifecycle == "spot" else policy.on_demand_action


def auto_scaling_group(instance: Instance) -> str | None:
    """The Auto Scaling group the instance belongs to (EC2 Auto Scaling tags its members), or None."""
    return instance.tags.get(ASG_TAG, "").strip() or None


def kubernetes_owner(instance: Instance) -> str | None:
    """Why a Kubernetes cluster (EKS, Karpenter) owns this node, or None: its tags claim it and AWS's own tags prove
    a node group launched it (``governor.idle.ownership``); a claim alone is reported, not honoured."""
    node = kubernetes_node(instance.tags)
    return node.describe() if node else None


def draining_cluster(instance: Instance, policy: IdlePolicy) -> str | None:
    """The ``idle.clusters`` entry with ``reclaim: drain`` this proven node belongs to (by name), or None."""
    if kubernetes_node(instance.tags) is None:
        return None
    name = cluster_name(instance.tags)
    return next((c.name for c in policy.clusters if c.name == name and c.reclaim == "drain"), None)


def report_only_reason(instance: Instance, policy: IdlePolicy) -> str | None:
    """Why this instance may only be reported, never reclaimed: its capacity is paid for or lent (a Capacity Block,
    a capacity reservation: ``governor.domain.capacity``), or belongs to a cluster or a group (unless the policy
    drains that cluster's idle nodes through its own API)."""
    held = idle_hold(purchase_model(instance), policy.reserved_capacity)
    if held:
        return held
    risk = restart_risk(instance, policy)
    if risk and policy.scarce_action == "warn":
        return f"{risk['why']}; idle.scarce_action is warn, so it is warned about and reported, never stopped"
    node = kubernetes_owner(instance)
    if node and draining_cluster(instance, policy):
        return None
    if node:
        return (
            f"{node}: its cluster autoscaler owns the capacity and would replace it, so it is reported only and its "
            "idle GPU-hours counted; drain or scale the node group instead"
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


#: The outcomes whose reasons say a scarce type's restart risk (the owner is warned, or it is reported or reclaimed).
_SAYS_RISK = frozenset({"warned", "acted", "checkpoint", "reported"})


def _decided(
    instance: Instance,
    verdict: Verdict,
    outcome: Outcome,
    reasons: list[str],
    evidence: dict[str, Any],
    actions: Iterable[AnyAction] = (),
    severity: Severity = "info",
    *,
    risk: dict[str, Any] | None = None,
) -> Decision:
    recorded = {"status": outcome, **evidence}
    if risk is not None:
        recorded["restart_risk"] = risk
        if outcome in _SAYS_RISK and not any(risk["why"] in r for r in reasons):
            reasons = [*reasons, f"restart risk: {risk['why']}"]
    return Decision(
        policy=POLICY,
        verdict=verdict,
        resource=instance.id,
        actions=list(actions),
        reasons=reasons,
        evidence=recorded,
        severity=severity,
        rule=f"idle.{outcome}",
    )


#: The rule of a warning withdrawn because the instance is no longer judged idle (registry ``episode_withdrawals``).
RESUMED = "idle.resumed"
_NO_LONGER = {
    "busy": "is busy again",
    "exempt": "is kept (exempt)",
    "unmonitored": "has no usable GPU data (missing data is never idle)",
    "grace": "was started again",
}


def withdrawn(instance: Instance, status: Status, decision: Decision, mark: Mark) -> tuple[Decision, str]:
    """A warned instance judged anything but idle (stalled is reported on its own, snoozed is kept): its warning no
    longer holds, since the mark is cleared and nothing is done at the due time. The decision keeps its evidence
    (``status`` says what it was judged) under the rule :data:`RESUMED`, its first reason the signal that showed
    work; the title is the finding the owner's episode message is updated with."""
    warned = mark.warned_at.isoformat() if mark.warned_at else mark.idle_since.isoformat()
    why = f"idle warning of {warned} withdrawn: nothing will be done; the idle clock starts again if it idles"
    reasons = [*decision.reasons, why]
    evidence = {**decision.evidence, "warned_at": warned, "idle_since": mark.idle_since.isoformat()}
    what = _NO_LONGER.get(status, f"is judged {status}")
    title = f"GPU instance {instance.id} ({instance.type}) {what}: idle warning withdrawn"
    return decision.model_copy(update={"rule": RESUMED, "reasons": reasons, "evidence": evidence}), title


def restart_risk(instance: Instance, policy: IdlePolicy) -> dict[str, Any] | None:
    """The risk of stopping an instance of a type the policy marks scarce (``idle.scarce_types``): a stopped
    On-Demand instance gives its capacity back, and starting it again can fail with InsufficientInstanceCapacity for
    hours or days. None for other types, and for capacity the team keeps whatever happens (a reservation, a block)."""
    import fnmatch

    if purchase_model(instance).kind != "on-demand":
        return None
    pattern = next((p for p in policy.scarce_types if fnmatch.fnmatchcase(instance.type, p)), None)
    if pattern is None:
        return None
    return {
        "scarce": True,
        "pattern": pattern,
        "action": policy.scarce_action,
        "why": (
            f"{instance.type} is scarce (idle.scarce_types {pattern}): once stopped, its On-Demand capacity is "
            "given back and a restart may fail with InsufficientInstanceCapacity; a Capacity Reservation or "
            "Capacity Block keeps it"
        ),
    }


def decide(
    instance: Instance,
    assessment: Assessment,
    mark: Mark | None,
    policy: Policy,
    now: dt.datetime,
    *,
    may_act: bool = True,
    interval: dt.timedelta | None = None,
) -> InstanceOutcome:
    """Mark, then act: warn on the first idle verdict, act only when still idle after the warning period.

    Any verdict other than idle clears the mark, so activity (or a data gap) in between starts the clock again.
    ``may_act`` is false when only the warning window (not yet the whole window) is idle: the owner is warned, the
    action waits until every signal has been idle for the whole window. A stalled job is reported to its owner on
    the first sweep that sees a whole window of it (``interval``: the time between sweeps), never stopped.

    The restart risk of a scarce type (:func:`restart_risk`) is part of every decision: recorded as
    ``evidence.restart_risk`` and said in the reasons of each that warns about, reports or reclaims the instance.
    """
    idle = policy.idle
    _decision = partial(_decided, risk=restart_risk(instance, idle))
    enforce = idle.enforce
    owner = ownership(instance.tags, policy.fleet)
    # Who and what, as the sweep saw them: ``governor status --target`` shows an organisation target's fleet from the
    # ledger alone (the operator's credentials cannot describe another account's instances).
    evidence = {"owner": owner.owner, "team": owner.team, "instance_type": instance.type, **assessment.evidence}
    evidence["purchase"] = purchase_model(instance).evidence()
    if assessment.status == "stalled":
        step = interval or sweep_interval(idle)
        since = parse_time(evidence.get("stalled_since"))
        first = since is None or since > now - dt.timedelta(minutes=idle.window_minutes) - step
        reasons = [*assessment.reasons, "reported to the owner, not stopped: check the job (a stall is not idleness)"]
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
        actions: list[AnyAction] = [Notify(enforced=enforce, owner=owner.owner, reason="stalled")] if first else []
        if mark is not None and IDLE_SINCE_TAG in instance.tags:
            actions.append(Untag(enforced=enforce, keys=[IDLE_SINCE_TAG]))
        decision = _decision(instance, "act" if first else "ok", "stalled", reasons, evidence, actions, "warning")
        title = f"GPU instance {instance.id} ({instance.type}) looks stalled: busy GPU at idle power" if first else None
        return InstanceOutcome(instance, "stalled", decision, None, title, prior=mark)
    if assessment.status != "idle":
        actions = []
        reasons = list(assessment.reasons)
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
            if IDLE_SINCE_TAG in instance.tags:
                actions.append(Untag(enforced=enforce, keys=[IDLE_SINCE_TAG]))
        verdict: Verdict = "ignored" if assessment.status in ("grace", "exempt", "snoozed") else "ok"
        severity: Severity = "warning" if assessment.status == "unmonitored" else "info"
        decision = _decision(instance, verdict, assessment.status, reasons, evidence, actions, severity)
        if mark is not None and mark.warned_at is not None and assessment.status != "snoozed":
            # The owner saw a warning of this episode: say it is withdrawn (once, since the mark is cleared now). A
            # snooze is the episode's "kept" end: the Keep click already answered in place (its response_url), and
            # an update now would overwrite who kept it and until when.
            decision, title = withdrawn(instance, assessment.status, decision, mark)
            return InstanceOutcome(instance, assessment.status, decision, None, title, prior=mark)
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
    cluster = draining_cluster(instance, idle)
    through: dict[str, Any] = {"via": "autoscaling", "group": group, "decrement_desired": True} if group else {}
    if cluster:
        through = {"via": "kubernetes", "group": cluster, "decrement_desired": True}
        reasons.append(
            f"through EKS cluster {cluster}: cordoned, drained through the Eviction API (PodDisruptionBudgets "
            "respected), then removed by its owner (Karpenter NodeClaim deleted, or terminated in its node group)"
        )
    elif group:
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


def _withhold(
    outcome: InstanceOutcome,
    status: Literal["held", "deferred"],
    why: str,
    evidence: Mapping[str, Any] | None = None,
) -> InstanceOutcome:
    """The same decision with nothing enforced, and the mark as it was before this sweep (its place in line)."""
    decision = outcome.decision
    kept = decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, why],
            "evidence": {**decision.evidence, **(evidence or {}), "status": status},
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


def _breaker(
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
        outcome = decide(instance, assessment, mark, policy, now, may_act=may_act, interval=interval)
        outcomes.append(outcome)
        if assessment.status not in ("busy", "idle", "stalled"):
            continue
        monitored += 1
        onset = idle_onset(instance_signals, idle, now, since)
        if onset is not None and now.timestamp() - onset >= quiet_seconds:
            onsets[instance.id] = onset
    # An operator (or the owner) releases one held instance with the tag; it is then judged like any other.
    by_tag = {o.instance.id for o in outcomes if o.instance.tags.get(IDLE_BREAKER_TAG, "").strip() == "release"}
    idle_now = {o.instance.id for o in outcomes if o.outcome in _IDLE_OUTCOMES}
    state = replace(state, released=state.released | (by_tag & idle_now))
    teams = {i.id: ownership(i.tags, policy.fleet).team for i in instances}
    found_signs: dict[str, list[str]] = {}

    floors: dict[str, float] = dict(state.power_floor)

    def signs_of(instance_id: str) -> list[str]:
        if instance_id not in found_signs:
            data = signals.get(instance_id)
            if data is None and bulk.signals is not None:
                data = bulk.signals([instance_id]).get(instance_id)
            onset = onsets.get(instance_id)
            found, floor = failure_signs(data or {}, onset, now, since.timestamp(), floors.get(instance_id))
            found_signs[instance_id] = found
            if floor is not None:
                floors[instance_id] = floor
        return found_signs[instance_id]

    step = _breaker(state, idle_now, onsets, signs_of, lambda i: teams.get(i, UNKNOWN), monitored, idle, now)
    state = replace(step.state, power_floor={i: floors[i] for i in sorted(step.state.held) if i in floors})
    held_ids = state.held
    note = (
        f"circuit breaker: held with {len(held_ids)} instances that turned idle together from "
        f"{state.anomaly_start.isoformat() if state.anomaly_start else now.isoformat()} ({state.signature}); "
        f"nothing done until {state.hold_until.isoformat() if state.hold_until else 'the hold ends'}, longer only "
        "while it still shows a measurement failure's sign"
    )
    outcomes = [
        _withhold(o, "held", note, _held_evidence(state, o.instance.id, found_signs))
        if o.instance.id in held_ids and o.outcome in _IDLE_OUTCOMES
        else o
        for o in outcomes
    ]
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
    if deferred_ids:
        why = (
            f"deferred: {len(acting)} actions due, at most {limit} per sweep (max_actions_per_sweep "
            f"{idle.max_actions_per_sweep}, max_fleet_percent {idle.max_fleet_percent:g}% of {fleet}); "
            "longest idle first (then the dearest), next sweep"
        )
        outcomes = [_withhold(o, "deferred", why) if o.instance.id in deferred_ids else o for o in outcomes]
    alarm = _alarm(state, monitored, policy, now) if step.tripped else None
    rearmed = None
    if step.rearmed is not None:
        rearmed = Decision(
            policy=POLICY,
            verdict="ok",
            resource="gpu-fleet",
            reasons=[f"circuit breaker re-armed: {step.rearmed}"],
            evidence={"status": "rearmed"},
            rule="idle.breaker-rearmed",
        )
    renewed = None
    if step.renewed:
        renewed = Decision(
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
    held_now = sum(1 for o in outcomes if o.outcome == "held")
    return SweepPlan(outcomes, fleet_size, alarm, held_now, state, len(deferred_ids), rearmed, renewed)


def _held_evidence(state: Breaker, instance_id: str, signs: Mapping[str, list[str]]) -> dict[str, Any]:
    """What the ledger keeps about one held instance: why the breaker tripped, and this instance's own signs."""
    return {
        "breaker": {
            "signature": state.signature,
            "tripped_at": state.tripped_at.isoformat() if state.tripped_at else None,
            "hold_until": state.hold_until.isoformat() if state.hold_until else None,
            "signs": signs.get(instance_id, []),
        }
    }


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
    inventory: Mapping[str, Instance] | None = None,
) -> Replay:
    """Run the sweep every ``interval`` over recorded metrics, as if enforcing, with the warning period, the rate
    limit and the circuit breaker applied (nobody re-arms it by hand in a replay).

    An instance counts as gone after its first stop or terminate; its GPU-hours from then to ``end`` are
    reclaimed (times its GPU count, default 1). A checkpoint command is assumed to succeed by the next sweep.
    Launch time defaults to the instance's first sample, so the launch grace applies from there. ``inventory``
    gives what EC2 would say of an instance (type, tags: its GPU model's idle draw, its team); without it an
    instance has no known type, so its power is not judged.
    """
    enforcing = policy.model_copy(update={"idle": policy.idle.model_copy(update={"enforce": True})})
    firsts = {
        instance_id: min((s.times[0] for s in series.values() if s.times), default=start.timestamp())
        for instance_id, series in signals.items()
    }
    known = inventory or {}
    fleet = [
        replace(
            known.get(instance_id) or Instance(id=instance_id, type="unknown", state="running", launch_time=start),
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


def unused_reservation_decision(
    reservation: Reservation, policy: Policy, per_hour: float | None, price_source: str
) -> tuple[Decision, str]:
    """A reservation with capacity no instance runs in: report-only, a finding for its owner (the reservation's own
    owner/team tags), never cancelled (a Capacity Block cannot be; an On-Demand Capacity Reservation someone chose)."""
    evidence = reservation_evidence(reservation, per_hour, price_source)
    who = ownership(reservation.tags, policy.fleet)
    evidence |= {"owner": who.owner, "team": who.team}
    kind = "Capacity Block" if reservation.capacity_block else "On-Demand Capacity Reservation"
    per_day = evidence["usd_per_day"]
    cost = (
        f"${per_day:,.2f} a day at {price_source}"
        if per_day is not None
        else (
            "prepaid (the block's fee is not in DescribeCapacityReservations)"
            if reservation.capacity_block
            else "unpriced"
        )
    )
    ends = f", ends {reservation.end_date:%Y-%m-%d %H:%M} UTC" if reservation.end_date else ""
    reasons = [
        f"{kind} {reservation.id} ({reservation.instance_type}, {reservation.match}{ends}): "
        f"{reservation.available} of {reservation.total} instances unused, paid for whether used or not ({cost})",
        "reported only: launch work into it, offer it to another team, or cancel it (the governor never cancels a "
        "reservation)",
    ]
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation.id,
        actions=[Notify(enforced=False, owner=who.owner, team=who.team, reason=UNUSED_STATUS)],
        reasons=reasons,
        evidence=evidence,
        severity="warning",
        rule=f"idle.{UNUSED_STATUS}",
    )
    title = f"{kind} {reservation.id}: {reservation.available} x {reservation.instance_type} paid for, unused" + (
        f" (${per_day:,.2f}/day)" if per_day is not None else ""
    )
    return decision, title


#: Rule and ``evidence.status`` of an offer of idle reserved capacity to another team (``reserved_capacity: offer``).
OFFERED_STATUS = "capacity-offered"


def capacity_offer(
    *,
    reservation_id: str,
    kind: str,
    instance_type: str,
    free: str,
    ends_at: dt.datetime | None,
    zone: str | None,
    team: str,
    why: str,
    now: dt.datetime,
) -> tuple[Decision, str]:
    """Paid-for capacity nobody uses, offered to ``team`` (``idle.offer_capacity_to``) until it ends: a finding for
    that team's channel and a decision saying why; report-only (nothing is stopped, released or cancelled)."""
    until = f"until {ends_at:%Y-%m-%d %H:%M} UTC" if ends_at else "until the reservation ends (end not read)"
    left = f" ({(ends_at - now).total_seconds() / 3600:,.1f} h left)" if ends_at and ends_at > now else ""
    where = f" in {zone}" if zone else ""
    reasons = [
        f"{kind} {reservation_id}: {free} {instance_type}{where} free {until}{left}: {why}",
        f"offered to team {team} (idle.reserved_capacity: offer); launch into it with "
        f"--capacity-reservation-specification CapacityReservationTarget={{CapacityReservationId={reservation_id}}}"
        " (the owner's account, or one it is shared with); report-only: nothing is stopped or cancelled",
    ]
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=reservation_id,
        actions=[Notify(enforced=False, team=team, reason=OFFERED_STATUS)],
        reasons=reasons,
        evidence={
            "status": OFFERED_STATUS,
            "offered_to": team,
            "instance_type": instance_type,
            "free": free,
            "zone": zone,
            "free_until": ends_at.isoformat() if ends_at else None,
            "judged_at": now.isoformat(),
        },
        severity="warning",
        rule=f"idle.{OFFERED_STATUS}",
    )
    title = f"Free GPU capacity for team {team}: {free} {instance_type} {until} ({kind} {reservation_id})"
    return decision, title
