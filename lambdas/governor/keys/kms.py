"""KMS reads and the two rotation changes the governor makes: EnableKeyRotation with a period, RotateKeyOnDemand.

KMS has no batch describe, so a sweep costs one DescribeKey and one GetKeyRotationStatus per customer key; tags and
rotation history are read only where a decision needs them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client, refused_reads
from governor.domain.actions import Outcome
from governor.domain.times import as_utc
from governor.keys.resources import KmsKey

# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset(
    {
        "kms:ListKeys",
        "kms:DescribeKey",
        "kms:GetKeyRotationStatus",
        "kms:ListKeyRotations",
        "kms:ListResourceTags",
    }
)
_GONE = ("NotFoundException", "InvalidArnException")
_REFUSED = (
    "LimitExceededException",
    "UnsupportedOperationException",
    "KMSInvalidStateException",
    "DisabledException",
    "ConflictException",
    "InvalidArnException",
    "NotFoundException",
)


class KmsKeys:
    """Implements ``domain.keys.KmsPort``; counts its API calls for the benchmarks."""

    def __init__(
        self, region: str | None = None, kms: Any = None, *, account: str | None = None, event_id: str | None = None
    ) -> None:
        self._kms = kms or client("kms", region, account=account, event_id=event_id)
        # RotateKeyOnDemand has no client token and each call is one more rotation (AWS allows a few per key): its
        # client makes one attempt, so a lost answer is never resent by botocore; the key is re-read on a retry.
        self._once = kms or client("kms", region, single_attempt=True, account=account, event_id=event_id)
        self.calls = 0

    def key_ids(self) -> list[str]:
        ids: list[str] = []
        with refused_reads("kms:ListKeys"):
            for page in self._kms.get_paginator("list_keys").paginate(PaginationConfig={"PageSize": 1000}):
                self.calls += 1
                ids.extend(k["KeyId"] for k in page.get("Keys", []))
        return ids

    def key(self, key_id: str) -> KmsKey | None:
        """Re-read one key; None when it no longer exists; ``ReadRefused`` when its key policy shuts the role out."""
        with refused_reads(key_id):
            return self._key(key_id)

    def _key(self, key_id: str) -> KmsKey | None:
        self.calls += 1
        try:
            meta = self._kms.describe_key(KeyId=key_id)["KeyMetadata"]
        except ClientError as error:
            if error.response["Error"]["Code"] in _GONE:
                return None
            raise
        key = KmsKey(
            key_id=meta["KeyId"],
            arn=meta.get("Arn", meta["KeyId"]),
            manager=meta.get("KeyManager", "CUSTOMER"),
            state=meta.get("KeyState", "Enabled"),
            spec=meta.get("KeySpec") or meta.get("CustomerMasterKeySpec") or "SYMMETRIC_DEFAULT",
            usage=meta.get("KeyUsage", "ENCRYPT_DECRYPT"),
            origin=meta.get("Origin", "AWS_KMS"),
            created=as_utc(meta.get("CreationDate")),
            custom_key_store=meta.get("CustomKeyStoreId"),
            multi_region_type=(meta.get("MultiRegionConfiguration") or {}).get("MultiRegionKeyType"),
        )
        if key.manager != "CUSTOMER" or key.state != "Enabled":
            return key
        if key.rotates_automatically:
            self.calls += 1
            status = self._kms.get_key_rotation_status(KeyId=key.key_id)
            period = status.get("RotationPeriodInDays")
            return replace(
                key,
                rotation_enabled=bool(status.get("KeyRotationEnabled")),
                rotation_period_days=int(period) if period is not None else None,
                next_rotation=as_utc(status.get("NextRotationDate")),
            )
        last, on_demand = self._rotations(key.key_id)
        return replace(key, rotation_enabled=False, last_rotation=last, on_demand_rotations=on_demand)

    def _rotations(self, key_id: str) -> tuple[dt.datetime | None, int]:
        """The last completed rotation and the number of on-demand ones (ListKeyRotations); none for asymmetric keys."""
        last: dt.datetime | None = None
        on_demand = 0
        try:
            for page in self._kms.get_paginator("list_key_rotations").paginate(KeyId=key_id):
                self.calls += 1
                for rotation in page.get("Rotations", []):
                    when = as_utc(rotation.get("RotationDate"))
                    if when and (last is None or when > last):
                        last = when
                    if rotation.get("RotationType") == "ON_DEMAND":
                        on_demand += 1
        except ClientError as error:
            if error.response["Error"]["Code"] != "UnsupportedOperationException":
                raise
        return last, on_demand

    def tags(self, key_id: str) -> dict[str, str]:
        tags: dict[str, str] = {}
        with refused_reads(key_id):
            for page in self._kms.get_paginator("list_resource_tags").paginate(KeyId=key_id):
                self.calls += 1
                tags.update({t["TagKey"]: t.get("TagValue", "") for t in page.get("Tags", [])})
        return tags

    def _change(self, call: Any, **kwargs: Any) -> Outcome:
        self.calls += 1
        try:
            call(**kwargs)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in _REFUSED:
                return Outcome(ok=False, error_code=code, message=error.response["Error"].get("Message", ""))
            raise
        return Outcome(ok=True)

    def enable_rotation(self, key_id: str, period_days: int) -> Outcome:
        return self._change(self._kms.enable_key_rotation, KeyId=key_id, RotationPeriodInDays=period_days)

    def rotate_on_demand(self, key_id: str) -> Outcome:
        """AWS allows a limited number per key: ``LimitExceededException`` comes back as an outcome to report."""
        return self._change(self._once.rotate_key_on_demand, KeyId=key_id)
