"""The sweep reads CloudWatch in two phases (issue 50, item 3): window statistics for every instance, minute points
only for those the statistics do not prove plainly busy. Through the real handler on moto."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.idle.handler import handle
from governor.idle.metrics import CloudWatchMetrics
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _runtime


class _Recorder:
    """The CloudWatch client, each GetMetricData request kept."""

    def __init__(self) -> None:
        self.client = boto3.client("cloudwatch", region_name="us-east-1")
        self.asked: list[dict[str, Any]] = []

    def get_metric_data(self, **kwargs: Any) -> Any:
        self.asked.append(kwargs)
        return self.client.get_metric_data(**kwargs)


@pytest.fixture
def three() -> Any:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        idle, busy, dark = _launch(ec2, "g5.xlarge", 3)
        _metrics(idle, 0.3)
        _metrics(busy, 75.0)
        yield {"idle": idle, "busy": busy, "dark": dark}


def _instances(request: dict[str, Any]) -> set[str]:
    return {q["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for q in request["MetricDataQueries"]}


def test_a_plainly_busy_instance_is_judged_from_window_statistics_and_not_asked_for_minute_points(three: Any) -> None:
    ids = three
    runtime = _runtime()
    recorder = _Recorder()
    result = handle(_event(T0, "sweep-1"), runtime, _aws(metrics=CloudWatchMetrics("us-east-1", recorder)))
    assert result["outcomes"] == {"warned": 1, "busy": 1, "unmonitored": 1}  # as with minute points alone
    assert len(recorder.asked) == 2  # window statistics, then minute points
    first, second = recorder.asked
    # Phase one: one bucket over the breaker's quiet span (the default policy: half the 90-minute warning window),
    # whole minutes ending at the sweep's minute. CloudWatch rounds a recent StartTime down to the whole minute and
    # buckets from there, so Period = EndTime - StartTime gives exactly one bucket of those minutes.
    assert (first["StartTime"], first["EndTime"]) == (T0 - dt.timedelta(minutes=45), T0)
    assert {q["MetricStat"]["Period"] for q in first["MetricDataQueries"]} == {45 * 60}
    assert {q["MetricStat"]["Stat"] for q in first["MetricDataQueries"]} == {"Maximum"}
    assert _instances(first) == set(ids.values())
    # Phase two: minute points of the others only; the busy instance is never asked for them.
    assert {q["MetricStat"]["Period"] for q in second["MetricDataQueries"]} == {60}
    assert _instances(second) == {ids["idle"], ids["dark"]}
    decisions = {d.resource: d for _, d in runtime.ledger.decisions}  # type: ignore[attr-defined]
    busy = decisions[ids["busy"]]
    assert busy.evidence["status"] == "busy" and busy.verdict == "ok" and busy.rule == "idle.busy"
    assert busy.evidence["judged_from"] == "window statistics"
    assert busy.evidence["max_gpu_utilization"] == 75.0
    assert "samples" not in busy.evidence  # it has no sample counts
    assert busy.reasons[0] == "GPU utilisation reached 75.0% (threshold 5%)"  # the minute read's words
    assert decisions[ids["idle"]].evidence.get("judged_from") is None
