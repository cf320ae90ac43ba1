"""Shared helpers for the benchmarks: medians, percentiles, the figure rows ``bench.run`` writes to bench/README.md."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
C7N_PYTHON = ROOT / "bench" / ".venv-c7n" / "bin" / "python"
T = TypeVar("T")


@dataclass(frozen=True)
class Figure:
    """One row of the table: what was measured, the value as printed, and the command that printed it."""

    section: str
    name: str
    value: str
    command: str
    note: str = ""


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0-100): the smallest sample with at least pct% of samples at or below it."""
    if not values:
        raise ValueError("percentile of no samples")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[min(len(ordered), int(rank)) - 1]


def median(values: Sequence[float]) -> float:
    """The median; benchmarks report it so one slow run (a GC pause, a noisy neighbour) does not move the figure."""
    return float(statistics.median(values))


def timed_runs(work: Callable[[], T], runs: int) -> tuple[list[float], T]:
    """Run ``work`` ``runs`` times; returns each run's seconds and the last result."""
    seconds: list[float] = []
    result: T | None = None
    for _ in range(max(1, runs)):
        began = time.perf_counter()
        result = work()
        seconds.append(time.perf_counter() - began)
    assert result is not None
    return seconds, result


def cores() -> int:
    """CPUs this process may run on (the affinity mask, which containers restrict), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def ratio(numerator: float, denominator: float) -> str:
    """``12.3x`` style, or ``n/a`` when the denominator is zero."""
    if denominator == 0:
        return "n/a"
    value = numerator / denominator
    return f"{value:,.1f}x" if value < 100 else f"{value:,.0f}x"


def human_bytes(size: float) -> str:
    """KiB/MiB with one decimal."""
    if size < 1024**2:
        return f"{size / 1024:,.1f} KiB"
    return f"{size / 1024**2:,.1f} MiB"
