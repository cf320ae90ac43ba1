"""Assessment: is an instance idle right now, judged per GPU device (utilisation or engine activity, memory, power,
MIG slices) over the window, with the evidence the ledger keeps; launch grace, exemptions and snoozes first.

This is the heart shared by the sweep, the re-check before acting, Stop now and the backtest (whose columnar replay
applies the same :mod:`governor.idle.checks`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.domain.fleet import Instance, exemption, snoozed_until
from governor.idle.activity import with_activity
from governor.idle.checks import idle_checks, stall_check, window_stats
from governor.idle.domain import (
    CPU_UTILIZATION,
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    NETWORK_BYTES,
    SAMPLE_SECONDS,
    SIGNALS,
    Assessment,
    Signals,
    devices,
    expected_samples,
    required_signals,
    warning_window_minutes,
)
from governor.idle.gpu_pods import gpu_only, host_work, unused_gpus, without_gpu_pods
from governor.idle.policy import IdlePolicy
from governor.policy import Policy


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
        model: GpuPower(entry.idle_watts, entry.limit_watts, "policy idle.gpu_power", "policy idle.gpu_power")
        for model, entry in policy.gpu_power.items()
    }
    model, found = power_of(instance_type, overrides)
    if found is None:
        what = model or f"the GPU of {instance_type}"
        return PowerLimit(None, f"power not judged: no measured idle draw for {what} (set idle.gpu_power)", model)
    ceiling = round(found.ceiling(policy.idle_power_margin_percent), 2)
    cited = found.cite or found.source  # the short key: every routine decision carries this note
    return PowerLimit(ceiling, f"{model}: idle {found.idle_watts:g} W, limit {found.limit_watts:g} W ({cited})", model)


def _device_assessment(
    signals: Signals, policy: IdlePolicy, start: float, end: float, ceiling: float | None
) -> tuple[dict[str, Any], dict[str, tuple[int, float, float]], float, Any]:
    """One device's checks, window statistics, newest activity sample's age and whether it looks stalled."""
    stats: dict[str, tuple[int, float, float]] = {}
    required = required_signals(policy)
    for signal in SIGNALS:
        wanted = signal in required or signal in (GPU_POWER, GPU_ENGINE_ACTIVE)
        series = signals.get(signal) if wanted else None
        stats[signal] = window_stats(series.window(start, end) if series is not None else ())
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
    held = without_gpu_pods(signals, policy, now)
    if held is not None:  # a GPU node no GPU pod held: its CPU pods' work does not keep it
        held["host_work"] = host_work(signals, policy, now)
        policy = gpu_only(policy)
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
    reasons += unused_gpus(evidence, held, signals, policy, now)  # held by CPU pods, or with nothing on them
    # The team's activity signals can keep it (busy) or leave it unknown (unmonitored), never make it idle.
    return with_activity(Assessment(instance_id, "idle", reasons, evidence), signals, policy, now)


@dataclass
class _Device:
    """One device's checks and window statistics, as :func:`_describe` words them into its evidence."""

    checks: Mapping[str, Any]
    stats: Mapping[str, tuple[int, float, float]]
    policy: IdlePolicy
    evidence: dict[str, Any]
    label: str

    @property
    def activity_signal(self) -> str:
        return GPU_ENGINE_ACTIVE if self.stats[GPU_ENGINE_ACTIVE][0] else GPU_UTILIZATION

    def gaps(self, age: float) -> list[str]:
        """Missing and stale data, in words; each required signal's sample count goes into the evidence."""
        policy, label, gaps = self.policy, self.label, []
        for signal in required_signals(policy):
            name = self.activity_signal if signal == GPU_UTILIZATION else signal
            count = self.stats[name][0]
            expected = expected_samples(signal, policy.window_minutes)
            self.evidence.setdefault("samples", {})[name] = count
            self.evidence.setdefault("expected_samples", {})[name] = expected
            if self.checks[f"gap:{signal}"]:
                gaps.append(
                    f"{label}{name}: {count} of {expected} expected samples in the window (missing data is never idle)"
                )
        if self.checks.get(f"gap:{GPU_POWER}"):
            count, expected = self.stats[GPU_POWER][0], expected_samples(GPU_POWER, policy.window_minutes)
            gaps.append(f"{label}{GPU_POWER}: {count} of {expected} expected samples (power stopped reporting)")
        if not math.isnan(age):
            self.evidence["newest_sample_age_minutes"] = round(max(age, 0.0), 1)
            if self.checks["stale"]:
                gaps.append(
                    f"{label}{self.activity_signal}: newest sample is {age:.1f} min old (max_sample_age_minutes "
                    f"{policy.max_sample_age_minutes}); stale data is never idle"
                )
        return gaps

    def busy_gpu(self) -> list[str]:
        """The GPU's activity (engine activity where published, else utilisation) and memory, in words."""
        policy, label, evidence, busy = self.policy, self.label, self.evidence, []
        signal = self.activity_signal
        count, peak, _ = self.stats[signal]
        if count:
            evidence["max_gpu_utilization"] = round(peak, 2)
            if signal == GPU_ENGINE_ACTIVE:
                evidence["activity_signal"] = GPU_ENGINE_ACTIVE
            if self.checks[f"busy:{GPU_UTILIZATION}"]:
                what = "graphics engine activity" if signal == GPU_ENGINE_ACTIVE else "GPU utilisation"
                busy.append(f"{label}{what} reached {peak:.1f}% (threshold {policy.gpu_utilization_threshold:g}%)")
        tolerance = policy.memory_change_tolerance_mib
        count, high, low = self.stats[GPU_MEMORY_USED]
        if tolerance is not None and count:
            change = high - low
            evidence["max_gpu_memory_used_mib"] = round(high, 1)
            evidence["gpu_memory_change_mib"] = round(change, 1)
            if self.checks[f"busy:{GPU_MEMORY_USED}"]:
                busy.append(f"{label}GPU memory in use changed by {change:.0f} MiB (tolerance {tolerance:g} MiB)")
        return busy

    def busy_power_and_host(self, ceiling: float | None) -> list[str]:
        """Power above the idle draw's ceiling, and the host's CPU and network, in words."""
        policy, evidence, busy = self.policy, self.evidence, []
        count, peak, _ = self.stats[GPU_POWER]
        if policy.idle_power_margin_percent is not None and count:
            evidence["max_gpu_power_w"] = round(peak, 2)
            if self.checks[f"busy:{GPU_POWER}"] and ceiling is not None:
                busy.append(
                    f"{self.label}GPU power reached {peak:.0f} W, above the idle draw's ceiling of {ceiling:g} W"
                )
        count, peak, _ = self.stats[CPU_UTILIZATION]
        if policy.cpu_utilization_threshold is not None and count:
            evidence["max_cpu_utilization"] = round(peak, 2)
            if self.checks[f"busy:{CPU_UTILIZATION}"]:
                busy.append(f"CPU utilisation reached {peak:.1f}% (threshold {policy.cpu_utilization_threshold:g}%)")
        count, peak, _ = self.stats[NETWORK_BYTES]
        if policy.network_bytes_threshold is not None and count:
            evidence["max_network_bytes"] = round(peak, 1)
            if self.checks[f"busy:{NETWORK_BYTES}"]:
                busy.append(f"network traffic reached {peak:.0f} bytes (threshold {policy.network_bytes_threshold:g})")
        return busy


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
    device = _Device(checks, stats, policy, evidence, label)
    gaps = device.gaps(age)
    return device.busy_gpu() + device.busy_power_and_host(ceiling), gaps


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


def assess(instance: Instance, signals: Signals, policy: Policy, now: dt.datetime) -> Assessment:
    """Launch grace, exemptions and the owner's snooze first; then the signals."""
    held = not_judged(instance, policy, now)
    if held is not None:
        return held
    return assess_signals(instance.id, signals, policy.idle, now, power_limit(instance.type, policy.idle))


def not_judged(instance: Instance, policy: Policy, now: dt.datetime) -> Assessment | None:
    """Launch grace, an exemption or the owner's snooze, whatever the signals say (None: judged on its signals); the
    sweep's judgement from window statistics applies them first too."""
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
    return None


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
