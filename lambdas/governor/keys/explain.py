"""``governor explain`` for the keys policy: the key, access key or secret a KMS, IAM or Secrets Manager call
concerns, as the event implies it (each assumption stated), handed to the handler's own decisions
(``decide_kms_key``, ``decide_access_key``, ``decide_secret``, ``decide_root_key_event``, ``decide_failed_call``).
States no rule of its own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from governor.domain.decision import Decision
from governor.domain.explain import Assumed, cloudtrail_call, explainer
from governor.domain.times import utc
from governor.events.envelopes import CloudTrailRecord, InboundEvent, InvalidEventError
from governor.keys import domain
from governor.keys import tags as credential_tags
from governor.keys.domain import POLICY
from governor.keys.events import (
    EVENT_SOURCES,
    ROOT_USER,
    TAG_CALLS,
    event_target,
    request_params,
    requested_rotation_days,
    response_elements,
)
from governor.keys.resources import AccessKey, KmsKey, Secret
from governor.policy import Policy

_NOT_READ = "explain reads nothing from AWS; the handler re-reads it right before acting"
Resource = KmsKey | AccessKey | Secret


def _at(record: CloudTrailRecord) -> dt.datetime:
    return utc(record.event_time)


def _request_tags(params: Mapping[str, Any], key: str, value: str) -> dict[str, str]:
    """Tags a create call sets (KMS ``tagKey``/``tagValue``, Secrets Manager ``Key``/``Value``): exemptions, owners."""
    tags = params.get("tags")
    if not isinstance(tags, list):
        return {}
    return {str(t[key]): str(t.get(value, "")) for t in tags if isinstance(t, Mapping) and t.get(key)}


def _assumed_kms(record: CloudTrailRecord, resource: str, policy: Policy) -> Assumed[Resource]:
    params, response = request_params(record), response_elements(record)
    name, at = record.event_name, _at(record)
    key = KmsKey(key_id=resource, arn=resource, created=at)
    if name == "CreateKey":
        metadata = response.get("keyMetadata") or {}
        multi_region = metadata.get("multiRegionConfiguration") or {}
        key = replace(
            key,
            key_id=str(metadata.get("keyId") or resource),
            arn=str(metadata.get("arn") or resource),
            manager=str(metadata.get("keyManager") or "CUSTOMER"),
            state=str(metadata.get("keyState") or "Enabled"),
            spec=str(metadata.get("keySpec") or metadata.get("customerMasterKeySpec") or "SYMMETRIC_DEFAULT"),
            usage=str(metadata.get("keyUsage") or "ENCRYPT_DECRYPT"),
            origin=str(metadata.get("origin") or params.get("origin") or "AWS_KMS"),
            custom_key_store=metadata.get("customKeyStoreId"),
            multi_region_type=multi_region.get("multiRegionKeyType") if isinstance(multi_region, Mapping) else None,
            rotation_enabled=False,
            tags=_request_tags(params, "tagKey", "tagValue"),
        )
        said = (
            f"the key is {key.state}, {key.spec} with {key.origin} material, created at the event time with "
            "automatic rotation off (a new key starts without it), tagged as in the request"
        )
    elif name == "EnableKeyRotation":
        requested = params.get("rotationPeriodInDays")
        period = requested_rotation_days(requested, record)
        key = replace(key, rotation_enabled=True, rotation_period_days=period)
        given = f"{period} days" if requested is not None else f"no period given, so AWS's default {period} days"
        said = f"the key is an enabled symmetric customer key; rotation is on as the call set it ({given})"
    elif name == "DisableKeyRotation":
        key = replace(key, rotation_enabled=False)
        said = "the key is an enabled symmetric customer key; rotation is off as the call left it"
    else:
        key = replace(key, state="PendingDeletion")
        window = params.get("pendingWindowInDays", "?")
        said = (
            f"the key is pending deletion ({window}-day window); if the deletion is cancelled, the next sweep checks "
            "it again"
        )
    return Assumed(key, (f"{said} ({_NOT_READ})", "no exemption or owner tag beyond those in the event"))


def _assumed_access_key(record: CloudTrailRecord, user: str, policy: Policy) -> Assumed[Resource]:
    params, response = request_params(record), response_elements(record)
    keys, at = policy.keys, _at(record)
    if record.event_name == "CreateAccessKey":
        created = response.get("accessKey") or {}
        key = AccessKey(
            user=user, user_arn="", active=True, created=at, key_id=str(created.get("accessKeyId") or "") or None
        )
        said = f"the new key is active and created at the event time; {user}'s other access keys are read at run time"
    else:
        status = str(params.get("status") or "Active")
        key = AccessKey(
            user=user,
            user_arn="",
            active=status == "Active",
            created=at,
            key_id=str(params.get("accessKeyId") or "") or None,
        )
        mode = "deactivated again" if keys.enforces("access_keys") else "reported (report-only)"
        said = (
            f"the key is {status}; its age, read at run time, is taken as 0 days here: older than "
            f"{keys.access_key_max_age_days} days, it is {mode}"
        )
    return Assumed(key, (f"{said} ({_NOT_READ})", "no exemption or owner tag on the user"))


def _assumed_secret(record: CloudTrailRecord, resource: str, policy: Policy) -> Assumed[Resource]:
    params, response = request_params(record), response_elements(record)
    limit, at = policy.keys.secret_max_rotation_days, _at(record)
    name = str(response.get("name") or params.get("name") or resource)
    secret = Secret(arn=resource, name=name, created=at, tags=_request_tags(params, "key", "value"))
    rules = params.get("rotationRules") or {}
    event = record.event_name
    if event == "RotateSecret" and rules:
        function = params.get("rotationLambdaARN")
        secret = replace(
            secret,
            rotation_enabled=True,
            rules=dict(rules),
            lambda_arn=str(function or "(the secret's rotation function)"),
        )
        said = "rotation is on with the rules the call set, and the secret has a rotation function" + (
            "" if function else " (RotateSecret needs one)"
        )
    elif event in ("CreateSecret", "CancelRotateSecret"):
        state = "a new secret has no rotation" if event == "CreateSecret" else "rotation is off as the call left it"
        said = (
            f"{state} and no rotation function (with one, the handler schedules rotation at the policy's "
            f"{limit} days); a schedule set since is seen at run time"
        )
    else:
        secret = replace(secret, rotation_enabled=True, rules={"AutomaticallyAfterDays": limit})
        what = "rotation started with the stored schedule" if event == "RotateSecret" else "the secret was updated"
        said = f"{what}; its stored schedule is within policy (every {limit} days): the real one is read at run time"
    return Assumed(secret, (f"{said} ({_NOT_READ})", "no exemption or owner tag beyond those in the event"))


_ASSUME = {"kms": _assumed_kms, "access_keys": _assumed_access_key, "secrets": _assumed_secret}


def assumed_resource(record: CloudTrailRecord, policy: Policy) -> Assumed[Resource] | None:
    """The key, access key or secret a successful trigger call concerns, as ``explain`` assumes it to be now.

    None when the handler reads nothing (a failed call, a root access key, a record that names no resource).
    """
    target = event_target(record)
    if record.failed or target is None or (target.kind == "access_keys" and target.resource_id == ROOT_USER):
        return None
    return _ASSUME[target.kind](record, target.resource_id, policy)


def explain_record(record: CloudTrailRecord, source: str, policy: Policy) -> Decision:
    """What the keys handler decides about one trigger event, on the resource as the event implies it to be."""
    failed = domain.decide_failed_call(record)
    if failed is not None:
        return failed
    target = event_target(record)
    if target is None:  # the handler parks such an event in its DLQ; explain refuses it the same way (exit 2)
        raise InvalidEventError(
            f"{record.event_name} record names no key, user or secret (requestParameters missing)", record.event_id
        )
    if target.kind == "access_keys" and target.resource_id == ROOT_USER:
        return domain.decide_root_key_event(record)  # judged from the call itself, by the handler too
    assumed = _ASSUME[target.kind](record, target.resource_id, policy)
    at, resource = _at(record), assumed.state
    if isinstance(resource, KmsKey):
        return assumed.on(domain.decide_kms_key(resource, policy, at))
    if isinstance(resource, AccessKey):
        return assumed.on(domain.decide_access_key(resource, policy, at))
    return assumed.on(domain.decide_secret(resource, policy, at))


def _matches(event: InboundEvent) -> bool:
    return any(cloudtrail_call(source, *names)(event) for source, names in EVENT_SOURCES.items())


@explainer(
    POLICY,
    _matches,
    decides=(
        domain.decide_failed_call,
        domain.decide_root_key_event,
        domain.decide_kms_key,
        domain.decide_access_key,
        domain.decide_secret,
    ),
)
def explain_keys_event(event: InboundEvent, policy: Policy) -> list[Decision]:
    """``governor explain`` for the KMS, IAM and Secrets Manager calls that trigger an immediate check."""
    assert event.cloudtrail is not None
    return [explain_record(event.cloudtrail, event.source, policy)]


@explainer(
    POLICY,
    lambda event: any(cloudtrail_call(source, *names)(event) for source, names in TAG_CALLS.items()),
    decides=(credential_tags.tag_settings, credential_tags.decide_tag_setting),
)
def explain_tag_call(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Who tagged a user, role, KMS key or secret: read from the call alone, as the handler reads it."""
    assert event.cloudtrail is not None
    settings = credential_tags.tag_settings(event.cloudtrail, event.source, policy, event.id)
    return [credential_tags.decide_tag_setting(setting, policy) for setting in settings]
