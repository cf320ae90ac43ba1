"""The reports bucket: every rendered report is archived as HTML, JSON, CSVs and the chart, under one prefix.

The bucket's default encryption is the project key (SSE-KMS), so objects are encrypted without per-call settings.
Reading back serves two things: earlier reports' ``summary.json`` for the trend, and a pre-signed link to the
archived HTML for Slack. A pre-signed URL is signed with the Lambda role's temporary credentials, so it stops
working when they expire (at most a few hours after the invocation) even if ``ExpiresIn`` is longer: the link's
stated expiry is the shorter of the two (``link_expiry``). Links are signed with SigV4: S3 refuses SigV2 for
objects encrypted with KMS (and for buckets created since 2020), and botocore still presigns us-east-1 with SigV2
unless told otherwise.
"""

from __future__ import annotations

import datetime as dt

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from governor.adapters.aws import client, retries

IAM_ACTIONS = frozenset({"s3:PutObject", "s3:GetObject"})
# SigV4 pre-signed URLs are valid for at most seven days.
MAX_PRESIGN_SECONDS = 7 * 24 * 3600


class S3Archive:
    """Writes report files to ``s3://<bucket>/<key>``; returns the ``s3://`` URI of each object written."""

    def __init__(self, bucket: str, region: str | None = None) -> None:
        self.bucket = bucket
        self._s3 = client("s3", region)
        self._signer = boto3.session.Session().client(
            "s3", region_name=region, config=retries().merge(Config(signature_version="s3v4"))
        )

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        return f"s3://{self.bucket}/{key}"

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object (an earlier report that never ran)."""
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        return bytes(response["Body"].read())

    def presign(self, key: str, expires_in: int) -> tuple[str, dt.datetime]:
        """A GET link to ``key`` and when it stops working (see the module docstring on temporary credentials)."""
        seconds = max(1, min(int(expires_in), MAX_PRESIGN_SECONDS))
        url = self._signer.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
        )
        return str(url), link_expiry(seconds, self._credential_expiry())

    def _credential_expiry(self) -> dt.datetime | None:
        # botocore has no public accessor for the signing credentials' expiry; refreshable (assumed-role)
        # credentials carry it, static ones (Lambda's environment variables) do not.
        signer = getattr(self._signer, "_request_signer", None)
        expiry = getattr(getattr(signer, "_credentials", None), "_expiry_time", None)
        return expiry if isinstance(expiry, dt.datetime) else None


def link_expiry(seconds: int, credentials_expire: dt.datetime | None, now: dt.datetime | None = None) -> dt.datetime:
    """The earlier of ``now + seconds`` and the signing credentials' expiry."""
    moment = now or dt.datetime.now(dt.UTC)
    asked = moment + dt.timedelta(seconds=seconds)
    if credentials_expire is None:
        return asked
    return min(asked, credentials_expire.astimezone(dt.UTC))
