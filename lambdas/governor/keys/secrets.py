"""Secrets Manager: one paginated ListSecrets for the sweep (it carries rotation settings and tags), DescribeSecret
to re-read one secret, and RotateSecret to set a schedule.

RotateSecret is called with ``RotateImmediately=False``: the governor changes the schedule, it does not start an
unplanned rotation (Secrets Manager runs the function's ``testSecret`` step to validate the configuration).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client, refused_reads
from governor.domain.actions import Outcome
from governor.domain.times import as_utc
from governor.keys.resources import Secret

# RotateSecret also needs lambda:InvokeFunction on the rotation function (AWS checks the caller may invoke it).
# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset({"secretsmanager:ListSecrets", "secretsmanager:DescribeSecret"})
_REFUSED = (
    "InvalidRequestException",
    "ResourceNotFoundException",
    "InvalidParameterException",
    "LimitExceededException",
)


def to_secret(raw: dict[str, Any]) -> Secret:
    return Secret(
        arn=raw["ARN"],
        name=raw.get("Name", raw["ARN"]),
        rotation_enabled=bool(raw.get("RotationEnabled")),
        lambda_arn=raw.get("RotationLambdaARN") or None,
        rules=dict(raw.get("RotationRules") or {}),
        last_rotated=as_utc(raw.get("LastRotatedDate")),
        created=as_utc(raw.get("CreatedDate")),
        owning_service=raw.get("OwningService"),
        deleted=raw.get("DeletedDate") is not None,
        tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])},
    )


class SecretsRotation:
    """Implements ``domain.keys.SecretsPort``; counts its API calls for the benchmarks."""

    def __init__(self, region: str | None = None, secretsmanager: Any = None) -> None:
        self._sm = secretsmanager or client("secretsmanager", region)
        self.calls = 0

    def secrets(self) -> list[Secret]:
        found: list[Secret] = []
        with refused_reads("secretsmanager:ListSecrets"):
            for page in self._sm.get_paginator("list_secrets").paginate(PaginationConfig={"PageSize": 100}):
                self.calls += 1
                found.extend(to_secret(raw) for raw in page.get("SecretList", []))
        return found

    def secret(self, secret_id: str) -> Secret | None:
        self.calls += 1
        try:
            with refused_reads(secret_id):
                return to_secret(self._sm.describe_secret(SecretId=secret_id))
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFoundException":
                return None
            raise

    def set_rotation(self, secret: Secret, rules: dict[str, Any], token: str | None = None) -> Outcome:
        """Set the schedule, naming the secret's own rotation function so its configuration is kept as it is.

        ``token`` (derived from the event id by the handler) is RotateSecret's ClientRequestToken: a resent call is
        recognised by Secrets Manager instead of being a second request.
        """
        self.calls += 1
        kwargs: dict[str, Any] = {"SecretId": secret.arn, "RotationRules": rules, "RotateImmediately": False}
        if token:
            kwargs["ClientRequestToken"] = token
        if secret.lambda_arn:
            kwargs["RotationLambdaARN"] = secret.lambda_arn
        try:
            self._sm.rotate_secret(**kwargs)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in _REFUSED:
                return Outcome(ok=False, error_code=code, message=error.response["Error"].get("Message", ""))
            raise
        return Outcome(ok=True)
