"""GPU memory in the unit the metric source publishes: MB from the CloudWatch agent by default, bytes when told."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from moto import mock_aws

from governor.idle.domain import GPU_MEMORY_USED
from governor.idle.metrics import CloudWatchMetrics

NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)


def _memory(value: float) -> None:
    boto3.client("cloudwatch", region_name="us-east-1").put_metric_data(
        Namespace="CWAgent",
        MetricData=[
            {
                "MetricName": "nvidia_smi_memory_used",
                "Dimensions": [{"Name": "InstanceId", "Value": "i-0a"}],
                "Timestamp": NOW - dt.timedelta(minutes=2),
                "Value": value,
                "Unit": "Megabytes" if value < 1e6 else "Bytes",
            }
        ],
    )


@mock_aws
def test_the_agent_unit_mb_is_read_as_is() -> None:
    _memory(40_960.0)  # 40 GiB in use, as the agent's nvidia_smi plugin reports it
    found = CloudWatchMetrics("us-east-1").fetch(["i-0a"], [GPU_MEMORY_USED], NOW - dt.timedelta(hours=1), NOW)
    assert list(found["i-0a"][GPU_MEMORY_USED].values) == [40_960.0]


@mock_aws
def test_an_exporter_publishing_bytes_is_converted_to_mib() -> None:
    _memory(40 * 1024**3)
    reader = CloudWatchMetrics("us-east-1", memory_unit="bytes")
    found = reader.fetch(["i-0a"], [GPU_MEMORY_USED], NOW - dt.timedelta(hours=1), NOW)
    assert list(found["i-0a"][GPU_MEMORY_USED].values) == [40_960.0]


def test_an_unknown_unit_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="memory_unit 'GB'"):
        CloudWatchMetrics("us-east-1", cloudwatch=object(), memory_unit="GB")
