"""The CloudTrail calls the keys policy takes (KMS, IAM, Secrets Manager) and what each names: the credential to
re-read, the rotation period asked for, whether the root user made it. Parsing only: no rule is judged here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.events.envelopes import CloudTrailRecord, InvalidEventError
from governor.keys.resources import Kind

KMS_EVENTS = ("CreateKey", "EnableKeyRotation", "DisableKeyRotation", "ScheduleKeyDeletion")
IAM_EVENTS = ("CreateAccessKey", "UpdateAccessKey")
# CreateSecret: a new secret starts without rotation; CancelRotateSecret switches rotation off.
SECRETS_EVENTS = ("CreateSecret", "RotateSecret", "UpdateSecret", "CancelRotateSecret")
EVENT_SOURCES: dict[str, tuple[str, ...]] = {
    "aws.kms": KMS_EVENTS,
    "aws.iam": IAM_EVENTS,
    "aws.secretsmanager": SECRETS_EVENTS,
}
#: Tagging calls: who exempts or claims a credential, and when (issue 33: a user exempted their own access key from
#: rotation and nothing recorded who). IAM's reach EventBridge only in us-east-1, like every IAM call.
TAG_CALLS: dict[str, tuple[str, ...]] = {
    "aws.kms": ("TagResource",),
    "aws.iam": ("TagUser", "TagRole", "CreateUser", "CreateRole"),
    "aws.secretsmanager": ("TagResource",),
}
#: Calls that create a credential with its tags (IAM's above; KMS CreateKey and Secrets Manager CreateSecret are also
#: checks): an exemption set at creation has its author too, instead of a sweep first seeing it set by nobody.
CREATED_WITH_TAGS = frozenset({"CreateUser", "CreateRole", "CreateKey", "CreateSecret"})
#: Everything the keys rule routes to the function: the checks' calls and the tagging calls.
RULE_EVENTS: dict[str, tuple[str, ...]] = {
    source: EVENT_SOURCES[source] + TAG_CALLS[source] for source in EVENT_SOURCES
}
TAG_RULE = "keys.governor-tag"
KIND_OF_SOURCE: dict[str, Kind] = {"aws.kms": "kms", "aws.iam": "access_keys", "aws.secretsmanager": "secrets"}
KMS_DEFAULT_ROTATION_DAYS = 365  # EnableKeyRotation without RotationPeriodInDays
ROOT_USER = "<root_account>"


def requested_rotation_days(requested: Any, record: CloudTrailRecord) -> int:
    """KMS accepts 90..2560 days, so a successful call that records anything else is a malformed event, not a fact."""
    if requested is None:
        return KMS_DEFAULT_ROTATION_DAYS
    text = str(requested).strip() if isinstance(requested, int | str) and not isinstance(requested, bool) else ""
    if not text.isdigit() or not 90 <= int(text) <= 2560:
        raise InvalidEventError(
            f"requestParameters.rotationPeriodInDays {str(requested)[:40]!r} is not a whole number of days in "
            "90..2560, as KMS requires",
            record.event_id,
        )
    return int(text)


@dataclass(frozen=True)
class Target:
    """The resource a CloudTrail call concerns: ``kind`` and the id to re-read (key id/ARN, user name, secret id)."""

    kind: Kind
    resource_id: str


def request_params(record: CloudTrailRecord) -> dict[str, Any]:
    return record.request_parameters or {}


def response_elements(record: CloudTrailRecord) -> dict[str, Any]:
    return record.response_elements or {}


def is_root(record: CloudTrailRecord) -> bool:
    """The call was made with the account's root credentials (``userIdentity.type`` Root)."""
    return (record.user_identity.type or "") == "Root"


def _kms_key(record: CloudTrailRecord) -> Any:
    """The key's ARN when the call returned it, else its id (a request may name the key by id, alias or ARN)."""
    params, response = request_params(record), response_elements(record)
    metadata = response.get("keyMetadata") or {}
    response_key = str(response.get("keyId") or "")
    return (
        metadata.get("arn")
        or metadata.get("keyId")
        or (response_key if response_key.startswith("arn:") else None)
        or params.get("keyId")
        or response_key
    )


def _access_key_user(record: CloudTrailRecord) -> Any:
    """The user whose keys to re-read: the one the call names, else the caller."""
    params, response = request_params(record), response_elements(record)
    if not params.get("userName") and is_root(record):
        # Without UserName, IAM acts on the caller: a root caller creates or changes a root access key.
        return ROOT_USER
    access_key = response.get("accessKey") or {}
    return params.get("userName") or access_key.get("userName") or record.user_identity.user_name


def _secret_id(record: CloudTrailRecord) -> Any:
    params, response = request_params(record), response_elements(record)
    return (
        params.get("secretId")
        or response.get("aRN")
        or response.get("arn")
        or response.get("name")
        or params.get("name")
    )


#: Each kind's calls and how a call names the resource to re-read.
_TARGETS: tuple[tuple[tuple[str, ...], Kind, Callable[[CloudTrailRecord], Any]], ...] = (
    (KMS_EVENTS, "kms", _kms_key),
    (IAM_EVENTS, "access_keys", _access_key_user),
    (SECRETS_EVENTS, "secrets", _secret_id),
)


def event_target(record: CloudTrailRecord) -> Target | None:
    """The resource to check for one of the trigger events; None when the record names none."""
    for names, kind, named in _TARGETS:
        if record.event_name in names:
            resource = named(record)
            return Target(kind, str(resource)) if resource else None
    return None
