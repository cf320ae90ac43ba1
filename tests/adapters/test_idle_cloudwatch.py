"""CloudWatch reads on moto: one query per instance and signal, 500 to a call, the busiest GPU per minute."""

from __future__ import annotations

import datetime as dt
import math

import boto3
from moto import mock_aws

from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION
from governor.idle.metrics import CloudWatchMetrics, queries_per_call

NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)


def _put(cloudwatch: object, instance_id: str, name: str, values: list[float], minutes_ago: int) -> None:
    data = [
        {
            "MetricName": name,
            "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
            "Timestamp": NOW - dt.timedelta(minutes=minutes_ago - i),
            "Value": value,
        }
        for i, value in enumerate(values)
    ]
    for start in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])  # type: ignore[attr-defined]


@mock_aws
def test_reads_each_instance_series_in_batched_calls() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    ids = [f"i-{n:017x}" for n in range(260)]
    for n, instance_id in enumerate(ids[:3]):
        _put(cloudwatch, instance_id, "nvidia_smi_utilization_gpu", [float(n)] * 30, 30)
        _put(cloudwatch, instance_id, "nvidia_smi_memory_used", [1e9] * 30, 30)
    reader = CloudWatchMetrics("us-east-1")
    found = reader.fetch(ids, [GPU_UTILIZATION, GPU_MEMORY_USED], NOW - dt.timedelta(hours=2), NOW)
    assert reader.calls == math.ceil(260 * 2 / 500)  # 520 queries: two calls
    assert len(found[ids[2]][GPU_UTILIZATION].values) == 30
    assert set(found[ids[2]][GPU_UTILIZATION].values) == {2.0}
    assert list(found[ids[0]][GPU_MEMORY_USED].times) == sorted(found[ids[0]][GPU_MEMORY_USED].times)
    assert found[ids[200]][GPU_UTILIZATION].values == []  # no data is an empty series, never zeros


@mock_aws
def test_maximum_statistic_keeps_the_busiest_gpu() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    _put(cloudwatch, "i-0a", "nvidia_smi_utilization_gpu", [1.0] * 10, 10)
    _put(cloudwatch, "i-0a", "nvidia_smi_utilization_gpu", [80.0] + [0.0] * 9, 10)  # a second GPU, busy once
    found = CloudWatchMetrics("us-east-1").fetch(["i-0a"], [GPU_UTILIZATION], NOW - dt.timedelta(hours=1), NOW)
    assert max(found["i-0a"][GPU_UTILIZATION].values) == 80.0


class _PagingCloudWatch:
    """Answers in pages with NextToken, as CloudWatch does when a call's datapoints exceed one response."""

    def __init__(self) -> None:
        self.requests: list[dict[str, object]] = []

    def get_metric_data(self, **kwargs: object) -> dict[str, object]:
        self.requests.append(kwargs)
        queries = kwargs["MetricDataQueries"]
        assert isinstance(queries, list) and len(queries) <= 500
        stamp = NOW - dt.timedelta(minutes=5)
        if "NextToken" not in kwargs:
            return {
                "MetricDataResults": [{"Id": queries[0]["Id"], "Timestamps": [stamp], "Values": [1.0]}],
                "NextToken": "t",
            }
        later = stamp + dt.timedelta(minutes=1)
        return {"MetricDataResults": [{"Id": queries[0]["Id"], "Timestamps": [later], "Values": [2.0]}]}


def test_follows_next_token_and_merges_pages() -> None:
    fake = _PagingCloudWatch()
    reader = CloudWatchMetrics(cloudwatch=fake)
    found = reader.fetch(["i-0a"], [GPU_UTILIZATION], NOW - dt.timedelta(hours=2), NOW)
    assert reader.calls == 2 and list(found["i-0a"][GPU_UTILIZATION].values) == [1.0, 2.0]


def test_long_windows_use_fewer_queries_per_call_to_stay_under_100800_datapoints() -> None:
    assert queries_per_call(NOW - dt.timedelta(hours=2), NOW) == 500
    day = queries_per_call(NOW - dt.timedelta(hours=24), NOW)
    assert day == 70 and day * 1440 <= 100_800
