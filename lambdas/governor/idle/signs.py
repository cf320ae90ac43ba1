"""A measurement failure's signs in one instance's data, which the circuit breaker trips and holds on: power reading
exactly 0 or frozen, GPU memory emptied where a model was loaded, power still at the working level while utilisation
fell to 0, samples missing around the minute activity stopped. An evening lull shows none of these.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from governor.idle.domain import (
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    Series,
    Signals,
    devices,
)

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


def _memory_sign(memory: Series, onset: float | None, since: float, end: float) -> str | None:
    """A driver that lost its GPU reports 0 MiB where a model was loaded."""
    values = memory.window(since, end + 1)
    run, length = _trailing_run(values)
    loaded = any(v > 0 for v in values[: len(values) - length]) or onset is None
    if values and run == 0 and length >= _RUN and loaded:
        return f"GPU memory in use reads exactly 0 MiB for {length} samples (it held a model)"
    return None


def _power_sign(power: Series, onset: float | None, since: float, end: float, kept: float | None) -> str | None:
    """A working GPU never draws 0 W, a live sensor never repeats one reading for ten minutes, and a GPU whose
    utilisation fell to 0 while its power stayed at the working level (``kept``: its lowest draw before) still works."""
    values = power.window(since, end + 1)
    before = power.window(since, onset) if onset is not None else ()
    run, length = _trailing_run(values)
    recent = power.window(end - 1800, end + 1)
    if values and run == 0 and length >= _RUN:
        return f"power reads exactly 0 W for {length} samples"
    if length >= _RUN:
        return f"power frozen at {run:g} W for {length} samples"
    if not recent or kept is None or kept <= 0:
        return None
    middle = sorted(recent)[len(recent) // 2]
    level = sorted(before)[len(before) // 2] if before else middle
    if middle >= 2 * kept and middle >= 0.7 * level:
        return (
            f"utilisation fell to idle while power stayed at {middle:.0f} W (it idles at {kept:.0f} W): "
            "the GPU is still working"
        )
    return None


def _floor(power: Series | None, onset: float | None, since: float, kept: float | None) -> float | None:
    """The lowest power the GPU drew before its quiet stretch began, kept across sweeps while it is held."""
    before = power.window(since, onset) if power is not None and onset is not None else ()
    if not before:
        return kept
    return min(before) if kept is None else min(kept, min(before))


def _gap_sign(activity: Series, onset: float, since: float, end: float) -> str | None:
    """Samples missing around the minute activity stopped mean the agent or driver restarted."""
    low, high = max(onset - _AROUND_ONSET, since), min(onset + _AROUND_ONSET, end)
    near = activity.window(low, high)
    expected = (high - low) / 60
    if expected >= 4 and len(near) <= expected - 2:
        return f"{int(expected - len(near))} samples missing around the onset (agent restart)"
    return None


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
        memory, power = found.get(GPU_MEMORY_USED), found.get(GPU_POWER)
        activity = found.get(GPU_ENGINE_ACTIVE) or found.get(GPU_UTILIZATION)
        kept = _floor(power, onset, since, kept)
        said = [
            _memory_sign(memory, onset, since, end) if memory is not None else None,
            _power_sign(power, onset, since, end, kept) if power is not None else None,
            _gap_sign(activity, onset, since, end) if activity is not None and onset is not None else None,
        ]
        label = f"GPU {device}: " if device else ""
        signs += [label + sign for sign in said if sign]
    return signs, kept


@dataclass
class FailureSigns:
    """Each instance's :func:`failure_signs`, worked out once a sweep and only for the few the breaker looks at; the
    power floors found go back into the breaker's state for the instances it holds."""

    signals: Mapping[str, Signals]
    onsets: Mapping[str, float]
    now: dt.datetime
    since: float
    floors: dict[str, float]
    #: The series of instances decided outside the sweep (the backtest's bulk), read only when asked.
    more: Callable[[Sequence[str]], Mapping[str, Signals]] | None = None
    found: dict[str, list[str]] = field(default_factory=dict)

    def __call__(self, instance_id: str) -> list[str]:
        if instance_id not in self.found:
            data = self.signals.get(instance_id)
            if data is None and self.more is not None:
                data = self.more([instance_id]).get(instance_id)
            onset = self.onsets.get(instance_id)
            signs, floor = failure_signs(data or {}, onset, self.now, self.since, self.floors.get(instance_id))
            self.found[instance_id] = signs
            if floor is not None:
                self.floors[instance_id] = floor
        return self.found[instance_id]
