"""The report's AWS side: archive objects in S3 (moto) and the CloudWatch chart call (stubbed: moto has no widget API)."""

from __future__ import annotations

import datetime as dt
import json

import boto3
from botocore.stub import Stubber
from moto import mock_aws

from governor.report.archive import S3Archive
from governor.report.chart_image import CloudWatchChart
from governor.report.charts import utilisation_widget


@mock_aws
def test_archive_writes_objects_with_their_content_type() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="governor-reports")
    archive = S3Archive("governor-reports", "us-east-1")
    uri = archive.put("reports/daily/2026-11-20/report.html", b"<html></html>", "text/html; charset=utf-8")
    assert uri == "s3://governor-reports/reports/daily/2026-11-20/report.html"
    head = s3.head_object(Bucket="governor-reports", Key="reports/daily/2026-11-20/report.html")
    assert head["ContentType"] == "text/html; charset=utf-8"


def test_chart_sends_the_widget_as_json_and_returns_the_png() -> None:
    start = dt.datetime(2026, 11, 13, tzinfo=dt.UTC)
    widget = utilisation_widget("eu-west-1", start, start + dt.timedelta(days=7), 30.0)
    chart = CloudWatchChart("us-east-1")
    with Stubber(chart._cloudwatch) as stub:
        stub.add_response(
            "get_metric_widget_image",
            {"MetricWidgetImage": b"\x89PNG..."},
            {"MetricWidget": json.dumps(widget), "OutputFormat": "png"},
        )
        assert chart.render(widget) == b"\x89PNG..."
    assert widget["period"] == 3600 and widget["region"] == "eu-west-1"
    assert "nvidia_smi_utilization_gpu" in widget["metrics"][0][0]["expression"]


@mock_aws
def test_archive_reads_back_summaries_and_signs_a_link_that_works() -> None:
    import urllib.parse

    from governor.report.archive import MAX_PRESIGN_SECONDS, link_expiry

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="governor-reports")
    archive = S3Archive("governor-reports", "us-east-1")
    assert archive.get("reports/daily/2026-11-19/summary.json") is None  # an earlier report that never ran
    archive.put("reports/daily/2026-11-20/summary.json", b'{"kind": "daily"}', "application/json")
    assert archive.get("reports/daily/2026-11-20/summary.json") == b'{"kind": "daily"}'
    before = dt.datetime.now(dt.UTC)
    url, expires = archive.presign("reports/daily/2026-11-20/summary.json", 10 * 24 * 3600)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert "/reports/daily/2026-11-20/summary.json" in url
    # SigV4 (S3 refuses SigV2 for KMS-encrypted objects), capped at SigV4's seven days.
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Expires"] == [str(MAX_PRESIGN_SECONDS)]
    import requests  # moto answers requests' HTTP calls inside mock_aws

    assert requests.get(url, timeout=5).content == b'{"kind": "daily"}'  # the link really fetches the object
    assert before + dt.timedelta(days=6, hours=23) < expires <= dt.datetime.now(dt.UTC) + dt.timedelta(days=7)
    # Temporary credentials that expire first shorten the link, and the stated expiry says so.
    soon = before + dt.timedelta(hours=1)
    assert link_expiry(24 * 3600, soon, now=before) == soon
    assert link_expiry(600, soon, now=before) == before + dt.timedelta(seconds=600)
