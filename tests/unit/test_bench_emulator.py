"""The idle comparison's emulator shortcut (``bench.idle_vs_custodian.indexed_cloudwatch``) answers GetMetricData
exactly as moto does: it only stops moto scanning every datapoint once per period, so both tools' figures time the
tools and the same answers, not moto's loop."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
from moto import mock_aws
from moto.cloudwatch.models import cloudwatch_backends
from moto.core import DEFAULT_ACCOUNT_ID

from bench.idle_vs_custodian import indexed_cloudwatch

NOW = dt.datetime(2026, 12, 6, 5, 0, tzinfo=dt.UTC)


def _query(query_id: str, name: str, instance: str, stat: str, period: int, **extra: Any) -> dict[str, Any]:
    metric = {"Namespace": "CWAgent", "MetricName": name, "Dimensions": [{"Name": "InstanceId", "Value": instance}]}
    return {"Id": query_id, "MetricStat": {"Metric": metric, "Period": str(period), "Stat": stat}, **extra}


@mock_aws
def test_the_indexed_lookup_gives_motos_answers() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    data = []
    for instance in ("i-1", "i-2"):
        for minute in range(0, 90, 1 if instance == "i-1" else 7):
            for gpu in range(2):  # two samples a minute (two GPUs), some minutes without any
                data.append(
                    {
                        "MetricName": "nvidia_smi_utilization_gpu",
                        "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                        "Timestamp": NOW - dt.timedelta(minutes=minute, seconds=gpu * 13),
                        "Value": float((minute * 7 + gpu * 31) % 100),
                        "Unit": "Percent" if minute % 3 else "None",
                    }
                )
    for first in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[first : first + 1000])
    backend = cloudwatch_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    queries = [
        _query("a", "nvidia_smi_utilization_gpu", "i-1", "Maximum", 60),
        _query("b", "nvidia_smi_utilization_gpu", "i-2", "Sum", 300),
        _query("c", "nvidia_smi_utilization_gpu", "i-1", "SampleCount", 3600),
        _query("d", "nvidia_smi_memory_used", "i-1", "Maximum", 60),  # no such metric
        _query("e", "nvidia_smi_utilization_gpu", "i-3", "Minimum", 60),  # no such instance
        _query("f", "nvidia_smi_utilization_gpu", "i-1", "Average", 120, ReturnData=False),
    ]
    queries[0]["MetricStat"]["Unit"] = "Percent"
    naive = NOW.replace(tzinfo=None)  # moto keeps its datapoints in naive UTC
    start, end = naive - dt.timedelta(minutes=75, seconds=30), naive - dt.timedelta(minutes=2)
    for scan_by in ("TimestampAscending", "TimestampDescending"):
        moto = backend.get_metric_data(queries, start, end, scan_by)
        with indexed_cloudwatch():
            indexed = backend.get_metric_data(queries, start, end, scan_by)
        assert indexed == moto
        assert [len(r["values"]) for r in moto][:3] == [49, 10, 2]  # the comparison compares something


def _stored() -> list[tuple[Any, ...]]:
    backend = cloudwatch_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    return sorted(
        (d.namespace, d.name, d.value, d.timestamp, d.unit, [(x.name, x.value) for x in d.dimensions])
        for d in backend.metric_data
    )


def test_seeding_in_the_emulators_process_stores_what_put_metric_data_stores() -> None:
    """The bench seeds 10,000 instances' datapoints inside the emulator's process (not measured): the same datapoints
    moto stores when the same samples arrive through PutMetricData."""
    from bench.idle_vs_custodian import put_workload, workload_datapoints

    ids = ["i-0aaa", "i-0bbb", "i-0ccc"]
    start = NOW - dt.timedelta(hours=2)
    with mock_aws():
        points = put_workload(start, ids)
        direct = _stored()
    with mock_aws():
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        for data in workload_datapoints(start, ids):
            for first in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[first : first + 1000])
        through_http = _stored()
    assert points == len(direct) > 3 * 100
    assert direct == through_http
