"""The CloudWatch and EC2 clients parse their answers' timestamps cheaply (issue 50, item 3): the same instants as
botocore's own parser, as aware UTC datetimes, without a ``dateutil`` time zone per timestamp; every other service's
client keeps botocore's parsing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from botocore.utils import parse_timestamp
from moto import mock_aws

from governor.adapters.aws import client

NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)


@pytest.fixture
def fresh() -> Iterator[None]:
    with mock_aws():
        client.cache_clear()
        yield
    client.cache_clear()


def test_the_sweeps_cloudwatch_client_gives_utc_timestamps_and_leaves_other_services_alone(fresh: None) -> None:
    cloudwatch = client("cloudwatch", "us-east-1")
    cloudwatch.put_metric_data(
        Namespace="CWAgent",
        MetricData=[
            {
                "MetricName": "nvidia_smi_utilization_gpu",
                "Dimensions": [{"Name": "InstanceId", "Value": "i-0123456789abcdef0"}],
                "Timestamp": NOW - dt.timedelta(minutes=minutes),
                "Value": float(minutes),
            }
            for minutes in (1, 2, 3)
        ],
    )
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "q0",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "CWAgent",
                        "MetricName": "nvidia_smi_utilization_gpu",
                        "Dimensions": [{"Name": "InstanceId", "Value": "i-0123456789abcdef0"}],
                    },
                    "Period": 60,
                    "Stat": "Maximum",
                },
            }
        ],
        StartTime=NOW - dt.timedelta(minutes=10),
        EndTime=NOW,
        ScanBy="TimestampAscending",
    )
    stamps = answer["MetricDataResults"][0]["Timestamps"]
    assert stamps == [NOW - dt.timedelta(minutes=m) for m in (3, 2, 1)]
    assert [stamp.tzinfo for stamp in stamps] == [dt.UTC] * 3  # botocore's default: dateutil's tzlocal() per timestamp
    # The parser is the CloudWatch and EC2 clients' alone: a client of another service built after them parses as
    # botocore does.
    client("ec2", "us-east-1")
    s3 = client("s3", "us-east-1")
    s3.create_bucket(Bucket="governor-parsing-test")
    created = s3.list_buckets()["Buckets"][0]["CreationDate"]
    assert created.tzinfo is not dt.UTC and created.utcoffset() == dt.timedelta(0)


def _datetimes(found: object) -> list[dt.datetime]:
    if isinstance(found, dt.datetime):
        return [found]
    if isinstance(found, dict):
        return [stamp for value in found.values() for stamp in _datetimes(value)]
    if isinstance(found, list):
        return [stamp for value in found for stamp in _datetimes(value)]
    return []


def test_the_ec2_client_gives_botocores_answer_with_utc_timestamps(fresh: None) -> None:
    """DescribeInstances (the ``ec2`` protocol, XML) through the sweep's EC2 client: the same answer as a plain boto3
    client's, field by field, with every timestamp (LaunchTime, the interface's AttachTime, the volume's) the same
    instant as an aware UTC datetime instead of a ``dateutil`` time zone."""
    import boto3

    ec2 = client("ec2", "us-east-1")
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=3, MaxCount=3, InstanceType="p4d.24xlarge")
    ours = ec2.describe_instances()
    theirs = boto3.session.Session().client("ec2", region_name="us-east-1").describe_instances()
    ours.pop("ResponseMetadata")
    theirs.pop("ResponseMetadata")
    assert ours == theirs  # datetimes compare by instant: same answer, same instants
    stamps, botocores = _datetimes(ours), _datetimes(theirs)
    assert len(stamps) == len(botocores) >= 6
    assert [stamp.tzinfo for stamp in stamps] == [dt.UTC] * len(stamps)
    assert all(stamp.tzinfo is not dt.UTC for stamp in botocores)  # botocore's default: a dateutil time zone


@pytest.mark.parametrize(
    "value",
    [
        1_765_000_000,
        1_765_000_000.5,
        0,
        "2026-12-06T05:27:00Z",
        "2026-12-06T05:27:00.123Z",
        "2026-12-06T05:27:00+01:00",
        "2026-12-06T05:27:00",  # naive: botocore's own answer (naive), not a guess
        "Sun, 06 Dec 2026 05:27:00 GMT",  # RFC 822: botocore's own answer
        "1765000000",
    ],
)
def test_the_parser_gives_botocores_instants(value: object) -> None:
    from governor.adapters.cloudwatch_parsing import utc_timestamp

    ours, theirs = utc_timestamp(value), parse_timestamp(value)
    assert ours == theirs
    assert (ours.tzinfo is None) == (theirs.tzinfo is None)
    if ours.tzinfo is not None:
        assert ours.utcoffset() == dt.timedelta(0)


def test_lists_parsed_at_once_equal_botocores_member_by_member() -> None:
    """A GetMetricData answer (JSON protocol) parses to the same values through the CloudWatch client's parser."""
    import json

    import botocore.session
    from botocore.parsers import JSONParser

    from governor.adapters.cloudwatch_parsing import CloudWatchParsers

    model = botocore.session.get_session().get_service_model("cloudwatch")
    shape = model.operation_model("GetMetricData").output_shape
    body = {
        "MetricDataResults": [
            {
                "Id": "q0",
                "Label": "nvidia_smi_utilization_gpu Maximum",
                "Timestamps": [1765000000, 1765000060.0, None],
                "Values": [0, 12.5, None],
                "StatusCode": "Complete",
                "Messages": [{"Code": "PartialData", "Value": "more"}],
            }
        ],
        "NextToken": "t",
        "Messages": [],
    }
    response = {"status_code": 200, "headers": {}, "body": json.dumps(body).encode()}
    ours = CloudWatchParsers().create_parser("json").parse(response, shape)
    theirs = JSONParser().parse(response, shape)
    assert ours == theirs
    assert ours["MetricDataResults"][0]["Values"] == [0, 12.5, None]
