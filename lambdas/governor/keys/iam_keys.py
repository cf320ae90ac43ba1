"""IAM access keys: one credential report for the whole account, per-user reads only for keys about to be acted on.

GenerateCredentialReport returns at once when a report under four hours old exists; otherwise the adapter polls
(bounded) until it is ready. The report has no key ids, so a key is re-read with ListAccessKeys before it is touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client, refused_reads
from governor.domain.actions import Outcome
from governor.domain.times import as_utc
from governor.keys.resources import AccessKey

# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset(
    {
        "iam:GenerateCredentialReport",
        "iam:GetCredentialReport",
        "iam:ListAccessKeys",
        "iam:GetAccessKeyLastUsed",
        "iam:ListUserTags",
    }
)
_NOT_READY = ("ReportInProgress", "ReportNotPresent", "ReportExpired", "CredentialReportNotReadyException")


class CredentialReportTimeout(RuntimeError):
    """The report was not ready in time; raised so the invocation fails and Lambda retries it."""


class IamAccessKeys:
    """Implements ``domain.keys.AccessKeysPort``; ``sleep`` is injectable so tests never wait."""

    def __init__(
        self,
        region: str | None = None,
        iam: Any = None,
        *,
        attempts: int = 20,
        delay_seconds: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._iam = iam or client("iam", region)
        self._attempts = attempts
        self._delay = delay_seconds
        self._sleep = sleep
        self.calls = 0

    def credential_report(self) -> str:
        """The account's credential report as CSV text (every user and both key slots in one read)."""
        with refused_reads("iam:credential-report"):
            return self._credential_report()

    def _credential_report(self) -> str:
        for attempt in range(self._attempts):
            self.calls += 2
            self._iam.generate_credential_report()
            try:
                content = self._iam.get_credential_report()["Content"]
            except ClientError as error:
                if error.response["Error"]["Code"] not in _NOT_READY:
                    raise
                if attempt + 1 < self._attempts:
                    self._sleep(self._delay)
                continue
            return content.decode("utf-8") if isinstance(content, bytes) else str(content)
        raise CredentialReportTimeout(f"credential report not ready after {self._attempts} attempts")

    def user_keys(self, user: str) -> list[AccessKey]:
        """Re-read one user's keys with their last use and the user's tags (for the owner and exemptions)."""
        with refused_reads(user):
            return self._user_keys(user)

    def _user_keys(self, user: str) -> list[AccessKey]:
        self.calls += 1
        try:
            listed = self._iam.list_access_keys(UserName=user).get("AccessKeyMetadata", [])
        except ClientError as error:
            if error.response["Error"]["Code"] == "NoSuchEntity":
                return []
            raise
        tags = self._user_tags(user)
        keys: list[AccessKey] = []
        for meta in listed:
            self.calls += 1
            used = self._iam.get_access_key_last_used(AccessKeyId=meta["AccessKeyId"]).get("AccessKeyLastUsed", {})
            keys.append(
                AccessKey(
                    user=user,
                    user_arn=user,
                    active=meta.get("Status") == "Active",
                    created=as_utc(meta.get("CreateDate")),
                    last_used=as_utc(used.get("LastUsedDate")),
                    key_id=meta["AccessKeyId"],
                    tags=tags,
                )
            )
        return keys

    def _user_tags(self, user: str) -> dict[str, str]:
        tags: dict[str, str] = {}
        for page in self._iam.get_paginator("list_user_tags").paginate(UserName=user):
            self.calls += 1
            tags.update({t["Key"]: t.get("Value", "") for t in page.get("Tags", [])})
        return tags

    def deactivate(self, user: str, key_id: str) -> Outcome:
        self.calls += 1
        try:
            self._iam.update_access_key(UserName=user, AccessKeyId=key_id, Status="Inactive")
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in ("NoSuchEntity", "LimitExceeded"):
                return Outcome(ok=False, error_code=code, message=error.response["Error"].get("Message", ""))
            raise
        return Outcome(ok=True)
