"""The demo emulator: its indexed GetMetricData answers exactly as moto's own implementation does, and a call moto does
not implement is an error for the caller, never a server traceback on the user's terminal (the README's ``make demo``
printed five of them for GetSavingsPlansCoverage)."""

from __future__ import annotations

import datetime as dt
import logging

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from moto import mock_aws
from moto.cloudwatch.models import CloudWatchBackend, cloudwatch_backends

from governor_cli.demo.emulator import _indexed_get_metric_data, running_emulator


@mock_aws
def test_indexed_metric_queries_match_moto() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    start = dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)
    for instance in ("i-1", "i-2"):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                "Timestamp": start + dt.timedelta(seconds=30 * step),
                "Value": float((step * 7 + len(name)) % 97),
            }
            for step in range(240)
            for name in ("nvidia_smi_utilization_gpu", "nvidia_smi_memory_used")
        ]
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[:1000])
    queries = [
        {
            "Id": f"q{n}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "CWAgent",
                    "MetricName": name,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                },
                "Period": period,
                "Stat": stat,
            },
        }
        for n, (instance, name, period, stat) in enumerate(
            [
                ("i-1", "nvidia_smi_utilization_gpu", 60, "Maximum"),
                ("i-2", "nvidia_smi_memory_used", 300, "Average"),
                ("i-3", "nvidia_smi_utilization_gpu", 60, "Maximum"),
            ]
        )
    ]
    backend = cloudwatch_backends["123456789012"]["us-east-1"]
    window = (start.replace(tzinfo=None) + dt.timedelta(minutes=10), start.replace(tzinfo=None) + dt.timedelta(hours=1))
    if backend.metric_data and backend.metric_data[0].timestamp.tzinfo:
        window = (window[0].replace(tzinfo=dt.UTC), window[1].replace(tzinfo=dt.UTC))
    original = CloudWatchBackend.get_metric_data
    expected = original(backend, queries, *window)
    indexed = _indexed_get_metric_data(original)(backend, queries, *window)
    assert indexed == expected
    assert expected[0]["values"] and expected[2]["values"] == []


def test_a_call_the_emulator_lacks_fails_for_the_caller_and_prints_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """werkzeug (moto's server) logs "Error on request" with the traceback at ERROR; the demo's terminal shows what
    reaches a handler, and nothing does."""
    with running_emulator() as emulator:
        ce = boto3.client(
            "ce", endpoint_url=emulator.endpoint, region_name="us-east-1", config=Config(retries={"max_attempts": 1})
        )
        with pytest.raises((ClientError, BotoCoreError)):  # moto drops the connection: no answer, as a timeout
            ce.get_savings_plans_coverage(TimePeriod={"Start": "2026-11-01", "End": "2026-12-01"})
    server_errors = [r for r in caplog.records if r.name == "werkzeug" and r.levelno >= logging.ERROR]
    assert server_errors == []


def test_an_event_reaches_a_rule_target_with_its_detail_untouched() -> None:
    """moto's default target input re-substitutes ``<id>``, ``<region>``... inside the detail's own text; EventBridge
    delivers the event as it is. The demo's Security Hub export refused a paying-twice finding whose fix names
    ``--instance-id <id>`` as "differs from what the governor recorded" until the emulator delivered it whole."""
    import json

    text = "stop it, then aws ec2 modify-instance-attribute --instance-id <id> in <region> at <time>"
    with running_emulator():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="caught")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventPattern=json.dumps({"source": ["gpu-fleet-governor"]}))
        events.put_targets(Rule="all", Targets=[{"Id": "q", "Arn": arn}])
        detail = {"detail": text}
        events.put_events(
            Entries=[{"Source": "gpu-fleet-governor", "DetailType": "Governor Finding", "Detail": json.dumps(detail)}]
        )
        (message,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1)["Messages"]
    delivered = json.loads(message["Body"])
    assert delivered["detail"] == detail and delivered["source"] == "gpu-fleet-governor"
