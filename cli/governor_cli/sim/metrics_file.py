"""The metrics file ``governor backtest --metrics`` reads: its format and the careful row-by-row reader.

One row a sample, ``timestamp,instance_id,metric,value``. Both the command and the columnar readers
(:mod:`governor_cli.sim.columnar`) take the format from here, so neither imports the other's private helpers.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Iterable

from governor.domain.times import EARLIEST, LATEST, RANGE_TEXT, TimeRangeError, bounded
from governor.idle.domain import (
    CPU_UTILIZATION,
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    MEMORY_UNITS,
    Series,
)

HEADER = ["timestamp", "instance_id", "metric", "value"]
KNOWN_METRICS = frozenset({GPU_UTILIZATION, GPU_MEMORY_USED, CPU_UTILIZATION, GPU_POWER, GPU_ENGINE_ACTIVE})
_EPOCH = re.compile(r"^\s*\d+(\.\d+)?\s*$")


class MetricsFileError(ValueError):
    """A metrics file that cannot be replayed; the message names the line and what is wrong."""


class Unsure(Exception):
    """A fast reader cannot vouch for the file; the row-by-row reader decides (and names the line)."""


def parse_timestamp(text: str, cache: dict[str, float]) -> float:
    """Epoch seconds or ISO 8601 within the supported time range; raises ValueError saying what is wrong."""
    found = cache.get(text)
    if found is not None:
        return found
    if _EPOCH.match(text):
        value = float(text)
        if not EARLIEST.timestamp() <= value < LATEST.timestamp():
            hint = (
                " (epoch milliseconds? use seconds)"
                if EARLIEST.timestamp() <= value / 1000 < LATEST.timestamp()
                else ""
            )
            raise TimeRangeError(f"epoch {text.strip()} is outside the supported range {RANGE_TEXT}{hint}")
    else:
        try:
            parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{text!r} is neither ISO 8601 nor epoch seconds") from None
        value = bounded(parsed, "timestamp").timestamp()
    cache[text] = value
    return value


def parse_metrics(
    lines: Iterable[str], source: str = "metrics", memory_unit: str = "MB"
) -> dict[str, dict[str, Series]]:
    """Read ``timestamp,instance_id,metric,value`` rows into sorted series; one sample per minute per metric.

    ``gpu_memory_used`` values are in ``memory_unit`` (MB, the agent's unit, by default) and converted to the MiB the
    domain judges in. Unknown metric names are skipped; any malformed row raises :class:`MetricsFileError`.
    """
    memory_scale = MEMORY_UNITS[memory_unit]
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise MetricsFileError(f"{source}: empty file (expected the header {','.join(HEADER)})") from None
    except csv.Error as error:
        raise MetricsFileError(f"{source}: line 1: {error}") from None
    if [h.strip().lower() for h in header] != HEADER:
        raise MetricsFileError(f"{source}: line 1: header must be {','.join(HEADER)}, found {','.join(header)}")
    points: dict[tuple[str, str], dict[float, float]] = {}
    stamps: dict[str, float] = {}
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) != 4:
                raise MetricsFileError(f"{source}: line {line}: expected 4 fields, found {len(row)}")
            stamp, instance_id, metric, raw = row
            metric = metric.strip()
            if metric not in KNOWN_METRICS:
                continue
            instance_id = instance_id.strip()
            if not instance_id:
                raise MetricsFileError(f"{source}: line {line}: empty instance_id")
            if not instance_id.isprintable() or len(instance_id) > 256:
                raise MetricsFileError(f"{source}: line {line}: instance_id {instance_id[:40]!r} is not a printable id")
            try:
                when = parse_timestamp(stamp, stamps)
            except ValueError as error:
                raise MetricsFileError(f"{source}: line {line}: timestamp {error}") from None
            try:
                value = float(raw)
            except ValueError:
                raise MetricsFileError(f"{source}: line {line}: value {raw!r} is not a number") from None
            if not math.isfinite(value) or value < 0:
                raise MetricsFileError(f"{source}: line {line}: value {raw!r} must be a finite, non-negative number")
            if metric == GPU_MEMORY_USED:
                value *= memory_scale
            minute = when - when % 60
            series = points.setdefault((instance_id, metric), {})
            previous = series.get(minute)
            series[minute] = value if previous is None else max(previous, value)
    except csv.Error as error:
        raise MetricsFileError(f"{source}: line {reader.line_num}: {error}") from None
    if not points:
        raise MetricsFileError(f"{source}: no gpu_utilization, gpu_memory_used or cpu_utilization samples")
    result: dict[str, dict[str, Series]] = {}
    for (instance_id, metric), by_time in points.items():
        times = sorted(by_time)
        result.setdefault(instance_id, {})[metric] = Series(times, [by_time[t] for t in times])
    return result
