"""Idle GPU reclamation's vocabulary: the signals, a metric series, the mark kept between sweeps, an assessment and
an outcome, and the policy's derived figures (which signals, how often, how far back).

Pure code shared by the sweep Lambda, ``governor backtest`` and the benchmarks. Metric series arrive as sorted
epoch-second timestamps with values (one point per minute, the ``Maximum`` of the busiest GPU); missing or partial
data is never idle, and neither is stale data. The rooms that use this vocabulary, one direction of calls each:
``checks`` (the idle rule on a window's statistics), ``assessment`` (signals per device -> Assessment), ``purchase``
(purchase models and the reclaim path), ``table`` and ``decide`` (the decision table, applied once per instance),
``onset`` and ``breaker`` (the circuit breaker), ``sweep`` (the fleet's plan: decide once, rate limit, breaker) and
``capacity`` (reservations nobody uses).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from governor.domain.fleet import Instance, TagProblem
from governor.domain.times import parse_time
from governor.idle.policy import IdlePolicy

POLICY = "idle"
IDLE_SINCE_TAG = "governor:idle-since"
IDLE_ACTION_TAG = "governor:idle-action"
IDLE_BREAKER_TAG = "governor:idle-breaker"
MARK_KIND = "idle-mark"
# GPU memory is judged in MiB; the CloudWatch agent's nvidia_smi plugin publishes MB, which are nvidia-smi's MiB.
MEMORY_UNITS: dict[str, float] = {"MB": 1.0, "MiB": 1.0, "bytes": 1.0 / (1024 * 1024)}
DEFAULT_INTERVAL = dt.timedelta(minutes=15)
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")

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
# The team's activity signals (idle.activity_signals) travel with an instance's series as "activity:<name>"; they are
# judged apart (governor.idle.activity), never as a GPU device.
ACTIVITY_PREFIX = "activity:"
# How many of a node's GPUs (and MIG slices) a pod held each minute, from the DCGM exporter's pod labels (the kubelet's
# allocations of nvidia.com/gpu): judged apart (governor.idle.gpu_pods), never as a GPU device.
GPU_PODS = "gpu_pods"
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
IDLE_OUTCOMES = frozenset({"idle", "warned", "checkpoint", "acted", "reported"})


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


#: The rule of a warning withdrawn because the instance is no longer judged idle (registry ``episode_withdrawals``).
RESUMED = "idle.resumed"


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


def warning_window_minutes(policy: IdlePolicy) -> int:
    """The owner is warned once every signal has been idle for ``window - warning`` minutes (at least 15).

    The action still needs the whole window idle and the warning ``warning_minutes`` old, so an instance idle since
    ``t`` is warned at ``t + window - warning`` and acted on at ``t + window``: warned first, yet reclaimed as early as
    a rule that acts after the window without any warning.
    """
    return max(15, policy.window_minutes - policy.warning_minutes)


def devices(signals: Signals) -> dict[str, dict[str, Series]]:
    """The signals of each GPU device ("" for the instance's one aggregated reading), host signals with each.

    Per-device readings (``signal@device``) win over an aggregated one: an instance is judged per GPU or MIG slice
    when its source publishes them, and is idle only when every device is.
    """
    host = {key: series for key, series in signals.items() if key in HOST_SIGNALS}
    found: dict[str, dict[str, Series]] = {}
    for key, series in signals.items():
        base, _, device = key.partition(DEVICE_SEP)
        if base not in HOST_SIGNALS and base != GPU_PODS and not base.startswith(ACTIVITY_PREFIX):
            found.setdefault(device, {})[base] = series
    if len(found) > 1:
        found.pop("", None)
    return {device: {**host, **mine} for device, mine in (found or {"": {}}).items()}


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
