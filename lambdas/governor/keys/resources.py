"""What the keys policy reads about each credential (KMS keys, IAM access keys, secrets) and the ports it reads them
through: adapters build these from AWS, tests by hand, ``governor explain`` from the event alone.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from governor.domain.actions import Outcome
from governor.domain.fleet import TagProblem
from governor.domain.times import parse_time

Kind = Literal["kms", "access_keys", "secrets"]


@dataclass(frozen=True)
class KmsKey:
    """One KMS key: DescribeKey, GetKeyRotationStatus and, for keys that cannot rotate automatically, ListKeyRotations.

    ``rotation_period_days`` is None when AWS did not report it (AWS always does for enabled rotation; the local
    emulator never does).
    """

    key_id: str
    arn: str
    manager: str = "CUSTOMER"
    state: str = "Enabled"
    spec: str = "SYMMETRIC_DEFAULT"
    usage: str = "ENCRYPT_DECRYPT"
    origin: str = "AWS_KMS"
    created: dt.datetime | None = None
    custom_key_store: str | None = None
    multi_region_type: str | None = None
    rotation_enabled: bool | None = None
    rotation_period_days: int | None = None
    next_rotation: dt.datetime | None = None
    last_rotation: dt.datetime | None = None
    on_demand_rotations: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    #: The tags read but not honoured as exemptions, each with why (``governor.domain.tag_exemptions``).
    refused_tags: tuple[TagProblem, ...] = ()

    @property
    def rotates_automatically(self) -> bool:
        """Only symmetric keys with AWS-generated material outside custom key stores support automatic rotation."""
        return self.spec == "SYMMETRIC_DEFAULT" and self.origin == "AWS_KMS" and not self.custom_key_store

    @property
    def rotates_on_demand(self) -> bool:
        """Imported symmetric material can be rotated on demand (after new material is imported); nothing else can."""
        return (
            self.spec == "SYMMETRIC_DEFAULT"
            and self.origin == "EXTERNAL"
            and not self.custom_key_store
            and self.multi_region_type is None
        )


@dataclass(frozen=True)
class AccessKey:
    """One IAM access key, from a credential report row (``slot`` 1 or 2, no key id) or from ListAccessKeys."""

    user: str
    user_arn: str
    active: bool
    created: dt.datetime | None
    last_used: dt.datetime | None = None
    key_id: str | None = None
    slot: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    refused_tags: tuple[TagProblem, ...] = ()

    @property
    def resource(self) -> str:
        if self.key_id:
            return self.key_id
        return f"{self.user_arn}#access_key_{self.slot}"


@dataclass(frozen=True)
class Secret:
    """One Secrets Manager secret as ListSecrets / DescribeSecret describe it."""

    arn: str
    name: str
    rotation_enabled: bool = False
    lambda_arn: str | None = None
    rules: dict[str, Any] = field(default_factory=dict)
    last_rotated: dt.datetime | None = None
    created: dt.datetime | None = None
    owning_service: str | None = None
    deleted: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    refused_tags: tuple[TagProblem, ...] = ()


def with_tags(key: KmsKey, tags: dict[str, str]) -> KmsKey:
    """The same key with its tags (read only for keys whose decision is ``act``: exemptions and owners)."""
    return replace(key, tags=dict(tags))


def parse_credential_report(text: str) -> list[AccessKey]:
    """Every access key in the account from the one IAM credential report (CSV); rows without a key are skipped.

    The report carries no key ids: keys are named ``<user arn>#access_key_<slot>`` until a re-read resolves them.
    """
    rows = csv.DictReader(io.StringIO(text))
    keys: list[AccessKey] = []
    for row in rows:
        for slot in (1, 2):
            created = parse_time(row.get(f"access_key_{slot}_last_rotated", ""))
            if created is None:
                continue
            keys.append(
                AccessKey(
                    user=row.get("user", ""),
                    user_arn=row.get("arn", ""),
                    active=row.get(f"access_key_{slot}_active", "false").lower() == "true",
                    created=created,
                    last_used=parse_time(row.get(f"access_key_{slot}_last_used_date", "")),
                    slot=slot,
                )
            )
    return keys


# ---------------------------------------------------------------------------------------------------------------
# The ports the handler needs; adapters implement them on AWS, tests in memory.


class KmsPort(Protocol):
    """KMS as the keys policy needs it: list, re-read one key, read its tags, and the two rotation changes."""

    def key_ids(self) -> list[str]: ...

    def key(self, key_id: str) -> KmsKey | None: ...

    def tags(self, key_id: str) -> dict[str, str]: ...

    def enable_rotation(self, key_id: str, period_days: int) -> Outcome: ...

    def rotate_on_demand(self, key_id: str) -> Outcome: ...


class AccessKeysPort(Protocol):
    """IAM: the account's credential report, one user's keys re-read, and deactivation."""

    def credential_report(self) -> str: ...

    def user_keys(self, user: str) -> list[AccessKey]: ...

    def deactivate(self, user: str, key_id: str) -> Outcome: ...


class SecretsPort(Protocol):
    """Secrets Manager: list all, re-read one, and set a rotation schedule."""

    def secrets(self) -> list[Secret]: ...

    def secret(self, secret_id: str) -> Secret | None: ...

    def set_rotation(self, secret: Secret, rules: dict[str, Any], token: str | None = None) -> Outcome: ...
