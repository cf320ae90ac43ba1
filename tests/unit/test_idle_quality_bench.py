"""The bench's comparison rule (``bench.idle_quality.naive_stop``) misfires where the idle policy does not."""

from __future__ import annotations

import datetime as dt

from bench.idle_quality import naive_stop
from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, Series
from governor.policy import parse_policy

NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)


def test_naive_rule_stops_a_sparse_inference_server_that_the_policy_keeps() -> None:
    util = [0.0] * 240
    for minute in range(5, 240, 40):
        util[minute] = 35.0
    times = [NOW.timestamp() - (240 - m) * 60 for m in range(240)]
    series = Series(times, util)
    assert naive_stop(series, NOW.timestamp() - 240 * 60, NOW.timestamp()) is not None
    instance = Instance(id="i-0abc", type="g5.xlarge", state="running", launch_time=NOW - dt.timedelta(days=1))
    signals = {GPU_UTILIZATION: series, GPU_MEMORY_USED: Series(times, [8_000.0] * 240)}
    assert assess(instance, signals, parse_policy({}), NOW).status == "busy"
