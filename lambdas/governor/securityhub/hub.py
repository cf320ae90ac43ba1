"""Security Hub's BatchImportFindings and the OCSF export bucket: the two writes of the ``securityhub`` function.

BatchImportFindings answers 200 even when some findings fail (``FailedFindings``); each failure raises here with its
code, so Lambda retries the event and finally parks it in the DLQ. The role may call BatchImportFindings only on this
account's default product (``infra/constructs/securityhub.py``) and put objects only under the export prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.securityhub.domain import batches, fits

IAM_ACTIONS = frozenset({"securityhub:BatchImportFindings"})
#: The OCSF objects, written under ``securityhub.ocsf_prefix`` of ``securityhub.ocsf_bucket``.
ARCHIVE_ACTIONS = frozenset({"s3:PutObject"})
#: What S3 answers a conditional put whose object exists (412), or a concurrent one in flight (409).
_ALREADY_WRITTEN = ("PreconditionFailed", "ConditionalRequestConflict")


class ImportFailed(RuntimeError):
    """Security Hub refused at least one finding (its ``FailedFindings``); the event is retried, then DLQ'd."""


class SecurityHub:
    def __init__(self, region: str | None = None) -> None:
        self._hub = client("securityhub", region)

    def import_findings(self, records: Sequence[Mapping[str, Any]]) -> int:
        """Import ``records`` in calls of at most 100 findings and 6 MB; the number imported. A finding over 240 KB
        is never sent (Security Hub would refuse it): it raises before any call."""
        too_large = [str(r.get("Id")) for r in records if not fits(r)]
        if too_large:
            raise ImportFailed(f"findings over Security Hub's 240 KB limit: {too_large}")
        imported = 0
        for batch in batches(records):
            answer = self._hub.batch_import_findings(Findings=list(batch))
            failed = answer.get("FailedFindings") or []
            if failed:
                reasons = "; ".join(f"{f.get('Id')}: {f.get('ErrorCode')} {f.get('ErrorMessage')}" for f in failed)
                raise ImportFailed(f"Security Hub refused {len(failed)} finding(s): {reasons}")
            imported += int(answer.get("SuccessCount", len(batch)))
        return imported


class OcsfArchive:
    """Writes each OCSF event as one JSON object, once:
    ``<prefix>/class_uid=2004/region=…/account=…/day=YYYYMMDD/<id>-<activity>.json``.

    An event log is never rewritten: the put is conditional (``If-None-Match: *``), so a replayed finding finds its
    object already there and leaves it as it was (S3 answers 412 PreconditionFailed, taken here as written)."""

    def __init__(self, bucket: str, region: str | None = None) -> None:
        self.bucket = bucket
        self._s3 = client("s3", region)

    def put(self, key: str, body: bytes) -> str:
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", IfNoneMatch="*")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in _ALREADY_WRITTEN:
                raise
        return f"s3://{self.bucket}/{key}"
