"""The idle comparison's emulator shortcut (``bench.idle_vs_custodian.indexed_cloudwatch``) answers GetMetricData
exactly as moto does: it only stops moto scanning every datapoint once per period, so both tools' figures time the
tools and the same answers, not moto's loop."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
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


def test_the_org_rounds_quick_lists_give_motos_own_bytes() -> None:
    """``bench.org_round.quick_json_lists`` turns a GetMetricData answer's timestamp and value lists without moto's
    per-element dispatch: the body CloudWatch's client receives is the one moto writes, byte for byte (timestamps
    with and without milliseconds, naive and aware, shared between series; integer values; an empty series)."""
    from moto.core.serialize import JSONSerializer, QuerySerializer, XFormedAttributePicker
    from moto.core.utils import get_service_model

    from bench.org_round import quick_json_lists

    operation = get_service_model("cloudwatch").operation_model("GetMetricData")  # as moto's responses serialise:
    stamps = [NOW + dt.timedelta(minutes=k) for k in range(5)] + [NOW.replace(tzinfo=None, microsecond=250_000)]
    results = [
        {"id": "a", "label": "u", "values": [0.0, 70.5, 3, 1e-7, 100.0, 2.5], "timestamps": stamps, "status_code": "Complete"},
        {"id": "b", "label": "m", "values": [1.0] * 6, "timestamps": list(reversed(stamps)), "status_code": "Complete"},
        {"id": "c", "label": "p", "values": [], "timestamps": [], "status_code": "PartialData"},
    ]  # fmt: skip
    answer = {"MetricDataResults": results}
    plain = {
        cls: cls(operation, value_picker=XFormedAttributePicker()).serialize(answer)["body"]
        for cls in (JSONSerializer, QuerySerializer)
    }
    undo = quick_json_lists()
    try:
        quick = {
            cls: cls(operation, value_picker=XFormedAttributePicker()).serialize(answer)["body"]
            for cls in (QuerySerializer, JSONSerializer)
        }
        with pytest.MonkeyPatch.context() as patch:  # the JSON lists are the shortcut's: no element goes through moto's
            patch.setattr(JSONSerializer, "_serialize_type_timestamp", lambda *a: pytest.fail("per element"))
            assert (
                JSONSerializer(operation, value_picker=XFormedAttributePicker()).serialize(answer)["body"]
                == plain[JSONSerializer]
            )
    finally:
        undo()
    assert quick == plain
    (first, *_) = json.loads(plain[JSONSerializer])["MetricDataResults"]
    assert len(first["Timestamps"]) == 6 and first["Values"][2] == 3.0  # the answer compared is a real one


def test_the_org_rounds_sqs_clock_gives_motos_own_answers() -> None:
    """``bench.org_round.quick_sqs_clock`` reads moto's SQS clock from ``time.time``: the same time as moto's own
    (to the millisecond), the same conversions of a given moment, and the queue behaves as before: what is sent is
    counted and received once, a message in flight is not visible, a delayed one not yet."""
    import moto.sqs.models as sqs_models

    from bench.org_round import quick_sqs_clock

    own = sqs_models.unix_time_millis
    undo = quick_sqs_clock()
    try:
        before, quick, after = own(), sqs_models.unix_time_millis(), own()
        assert before - 1 <= quick <= after + 1
        assert sqs_models.unix_time_millis(NOW.replace(tzinfo=None)) == own(NOW.replace(tzinfo=None))
        with mock_aws():
            sqs = boto3.client("sqs", region_name="us-east-1")
            url = sqs.create_queue(QueueName="targets")["QueueUrl"]
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": f"t{n}"} for n in range(5)])
            sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
            counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesDelayed"]) == ("5", "1")
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=900)["Messages"]
            assert sorted(m["Body"] for m in got) == [f"t{n}" for n in range(5)]
            assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)  # in flight, delayed
            counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            assert counts["ApproximateNumberOfMessagesNotVisible"] == "5"
    finally:
        undo()
    assert sqs_models.unix_time_millis is own
