"""Who tagged a credential, and when: the keys function's record of each exemption, snooze or claim on an IAM user
or role, a KMS key or a secret, from the call that set it (``TagUser``, ``TagRole``, ``TagResource``) or created the
credential with it (``CreateUser``, ``CreateRole``, ``CreateKey``, ``CreateSecret``), named as
``governor.domain.identity.author`` proves it; and the credential's tags as the decisions read them
(``governor.domain.tagging.bounded``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from governor.domain.decision import Decision
from governor.domain.identity import author
from governor.domain.ports import Ledger
from governor.domain.tagging import ResourceKind, Source, TagSetting, decide_setting, settings_from, tag_pairs
from governor.domain.tagging import bounded as bounded_tags
from governor.domain.times import utc
from governor.events.envelopes import CloudTrailRecord
from governor.keys.domain import POLICY
from governor.keys.events import CREATED_WITH_TAGS, TAG_CALLS, TAG_RULE, request_params, response_elements
from governor.keys.resources import AccessKey, KmsKey, Secret
from governor.policy import Policy


def is_tag_call(source: str, record: CloudTrailRecord) -> bool:
    return record.event_name in TAG_CALLS.get(source, ())


def tag_settings(record: CloudTrailRecord, source: str, policy: Policy, event_id: str) -> list[TagSetting]:
    """The watched tags (exemptions, snoozes, owner, team...) a successful tagging call set on a user, role, KMS key or
    secret, each with the caller and the time; the resource id is the one the keys decisions look it up by (the user
    name, ``role/<name>``, the key id, the secret as named in the call)."""
    if record.failed or not (is_tag_call(source, record) or record.event_name in CREATED_WITH_TAGS):
        return []
    params = request_params(record)
    resource = _tagged_resource(record, source, params)
    if resource is None:
        return []
    who = author(record.user_identity)
    at = utc(record.event_time)
    kind = _SOURCE_OF_CALL.get(record.event_name, "TagResource")
    pairs = tag_pairs(params.get("tags"))
    return settings_from(pairs, [resource], policy, author=who, at=at, event_id=event_id, source=kind)


def _tagged_resource(
    record: CloudTrailRecord, source: str, params: Mapping[str, Any]
) -> tuple[str, ResourceKind] | None:
    """The credential a tagging or creating call tagged, by the id the keys decisions look it up by."""
    name = record.event_name
    if name in ("TagUser", "CreateUser") and params.get("userName"):
        return str(params["userName"]), "iam-user"
    if name in ("TagRole", "CreateRole") and params.get("roleName"):
        return f"role/{params['roleName']}", "iam-role"
    created_key = (response_elements(record).get("keyMetadata") or {}).get("keyId")
    key = params.get("keyId") if name == "TagResource" else created_key if name == "CreateKey" else None
    if source == "aws.kms" and key:
        return str(key).rsplit("/", 1)[-1], "kms-key"
    secret = params.get("secretId") if name == "TagResource" else params.get("name") if name == "CreateSecret" else None
    if source == "aws.secretsmanager" and secret:
        return str(secret), "secret"
    return None


_SOURCE_OF_CALL: dict[str, Source] = {
    "TagUser": "TagUser",
    "TagRole": "TagRole",
    "CreateUser": "CreateUser",
    "CreateRole": "CreateRole",
    "CreateKey": "CreateKey",
    "CreateSecret": "CreateSecret",
}


def decide_tag_setting(setting: TagSetting, policy: Policy) -> Decision:
    """Recorded with its author; an exemption on a credential is a warning finding at once (it stops rotation), with
    the end ``fleet.max_exemption_days`` gives it (:func:`governor.domain.tagging.decide_setting`)."""
    return decide_setting(setting, policy, policy_name=POLICY, rule=TAG_RULE)


_Tagged = TypeVar("_Tagged", KmsKey, AccessKey, Secret)


def bounded(
    resource: _Tagged, ids: tuple[str, ...], kind: ResourceKind, ledger: Ledger, policy: Policy, now: dt.datetime
) -> tuple[_Tagged, TagSetting | None]:
    """The credential with ``exempt=true`` read as its end, an exemption nobody can be proven to have set removed, and
    a ``keys.exemptions.tags`` match honoured only while a person is recorded setting it within
    ``fleet.max_exemption_days`` (``governor.domain.tagging.bounded``; the refusals ride on ``refused_tags`` into the
    decision, which says them); and the first sighting it just recorded, if any (reported at once)."""
    found = bounded_tags(
        [i for i in ids if i], resource.tags, policy.fleet, ledger, now, kind=kind, exemptions=policy.keys.exemptions
    )
    if found.tags == resource.tags and not found.refused:
        return resource, found.first_seen
    return replace(resource, tags=found.tags, refused_tags=found.refused), found.first_seen
