"""The reports bucket: every rendered report is archived as HTML, JSON, CSVs and the chart, under one prefix.

The bucket's default encryption is the project key (SSE-KMS), so objects are encrypted without per-call settings.
"""

from __future__ import annotations

from governor.adapters.aws import client

IAM_ACTIONS = frozenset({"s3:PutObject"})


class S3Archive:
    """Writes report files to ``s3://<bucket>/<key>``; returns the ``s3://`` URI of each object written."""

    def __init__(self, bucket: str, region: str | None = None) -> None:
        self.bucket = bucket
        self._s3 = client("s3", region)

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        return f"s3://{self.bucket}/{key}"
