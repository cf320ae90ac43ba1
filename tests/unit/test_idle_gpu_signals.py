"""The right GPU signal per device: engine activity over utilisation, MIG slices judged each, N/A never idle, power
near the idle draw, and a hung job (busy at idle power, memory still) reported as stalled, never stopped."""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.domain import DEVICE_SEP, GPU_ENGINE_ACTIVE, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, Series
from governor.idle.sweep import sweep
from governor.policy import Policy, parse_policy

NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)
MINUTES = 150


def policy(**idle: Any) -> Policy:
    return parse_policy({"idle": {"launch_grace_minutes": 0, **idle}})


def series(value: float | list[float]) -> Series:
    values = value if isinstance(value, list) else [value] * MINUTES
    return Series([NOW.timestamp() - (MINUTES - m) * 60 for m in range(MINUTES)], values)


def instance(instance_type: str = "g5.12xlarge", **tags: str) -> Instance:
    return Instance(id="i-0a", type=instance_type, state="running", launch_time=NOW - dt.timedelta(days=1), tags=tags)


def gpu(device: str, **signals: float | list[float]) -> dict[str, Series]:
    return {f"{name}{DEVICE_SEP}{device}": series(value) for name, value in signals.items()}


def test_a_hung_nccl_job_is_stalled_a_finding_to_its_owner_never_a_stop() -> None:
    """NVIDIA's and the field's hang signature: every GPU at ~100% utilisation, power near idle, memory still."""
    data: dict[str, Series] = {}
    for n in range(4):  # training at 280 W until 125 minutes ago, then hung on a collective
        watts = [280.0] * 25 + [58.0 + n] * (MINUTES - 25)
        data |= gpu(str(n), gpu_utilization=100.0, gpu_memory_used=61_000.0, gpu_power_draw=watts)
    result = assess(instance(), data, policy(), NOW)
    assert result.status == "stalled" and "hung job" in result.reasons[0]
    assert result.evidence["devices"]["0"]["max_gpu_power_w"] == 58.0
    plan = sweep([instance(owner="ana@example.com")], {"i-0a": data}, {}, policy(enforce=True), NOW)
    outcome = plan.outcomes[0]
    assert outcome.outcome == "stalled" and outcome.finding and "stalled" in outcome.finding
    assert [a.type for a in outcome.decision.actions] == ["notify"] and outcome.decision.rule == "idle.stalled"
    assert not plan.acting()
    # the next sweep sees the same stall, 15 minutes on: recorded again, not reported again
    on = {
        key: Series([*s.times, *(s.times[-1] + 60 * k for k in range(1, 16))], [*s.values, *[s.values[-1]] * 15])
        for key, s in data.items()
    }
    later = sweep([instance()], {"i-0a": on}, {}, policy(), NOW + dt.timedelta(minutes=15))
    assert later.outcomes[0].outcome == "stalled" and later.outcomes[0].finding is None


def test_a_working_job_at_working_power_is_busy_not_stalled() -> None:
    data = gpu("0", gpu_utilization=100.0, gpu_memory_used=61_000.0, gpu_power_draw=280.0)
    assert assess(instance(), data, policy(), NOW).status == "busy"


def test_utilisation_at_zero_with_working_power_is_busy() -> None:
    result = assess(
        instance(),
        {GPU_UTILIZATION: series(0.0), GPU_MEMORY_USED: series(9000.0), GPU_POWER: series(190.0)},
        policy(),
        NOW,
    )
    assert result.status == "busy" and "GPU power reached 190 W" in result.reasons[0]


def test_power_that_stops_reporting_mid_window_is_missing_data() -> None:
    watts = [26.0] * 60 + [float("nan")] * 90
    power = series(26.0)
    power = Series(power.times[:60], watts[:60])
    result = assess(
        instance(), {GPU_UTILIZATION: series(0.0), GPU_MEMORY_USED: series(9000.0), GPU_POWER: power}, policy(), NOW
    )
    assert result.status == "unmonitored" and "power stopped reporting" in " ".join(result.reasons)


def test_engine_activity_is_judged_where_a_gpu_reports_it() -> None:
    """Utilisation can read 0 while the GPU works (and the reverse); DCGM's GR_ENGINE_ACTIVE is the better signal."""
    busy = {GPU_UTILIZATION: series(0.0), GPU_ENGINE_ACTIVE: series(40.0), GPU_MEMORY_USED: series(9000.0)}
    assert assess(instance(), busy, policy(), NOW).status == "busy"
    quiet = {GPU_UTILIZATION: series(30.0), GPU_ENGINE_ACTIVE: series(0.5), GPU_MEMORY_USED: series(9000.0)}
    result = assess(instance(), quiet, policy(), NOW)
    assert result.status == "idle" and result.evidence["activity_signal"] == GPU_ENGINE_ACTIVE


def test_mig_slices_are_judged_each_and_the_instance_is_idle_only_when_every_slice_is() -> None:
    """An A100 in MIG mode: utilisation is N/A; each slice's engine activity and memory are read."""
    slices = {
        **gpu("0/3", gpu_engine_active=0.2, gpu_memory_used=12.0),
        **gpu("0/4", gpu_engine_active=0.1, gpu_memory_used=12.0),
    }
    assert assess(instance("p4de.24xlarge"), slices, policy(), NOW).status == "idle"
    one_busy = {**slices, **gpu("0/4", gpu_engine_active=55.0, gpu_memory_used=12.0)}
    result = assess(instance("p4de.24xlarge"), one_busy, policy(), NOW)
    assert result.status == "busy" and result.reasons[0].startswith("GPU 0/4: graphics engine activity")
    not_available = {**slices, **gpu("0/5", gpu_memory_used=12.0)}  # a slice whose activity reads N/A
    result = assess(instance("p4de.24xlarge"), not_available, policy(), NOW)
    assert result.status == "unmonitored" and "GPU 0/5" in result.reasons[0]


def test_per_device_readings_win_over_the_aggregate() -> None:
    data = {
        GPU_UTILIZATION: series(0.0),
        GPU_MEMORY_USED: series(100.0),
        **gpu("1", gpu_utilization=70.0, gpu_memory_used=100.0),
    }
    assert assess(instance(), data, policy(), NOW).status == "busy"
