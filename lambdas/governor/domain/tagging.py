"""Who set a tag that steers the governor, and when; and the end of every exemption.

Any account user can tag. A tag that exempts, snoozes, names a command, claims ownership (owner, team, the fleet
tags) or claims a node for Kubernetes is recorded with its author and time as CloudTrail reports the call (EC2
``CreateTags`` and ``RunInstances`` tag specifications; IAM ``TagUser`` / ``TagRole``; KMS and Secrets Manager
``TagResource``), in ledger items of kind :data:`TAG_SET` that the report lists by person.

``governor:exempt=true`` carries no end of its own, so its end is the recorded setting plus
``fleet.max_exemption_days``: :func:`bounded_tags` hands the decisions the tag as that end date, which the pure
exemption rules (``governor.domain.fleet.exemption``) honour only until then. A ``true`` nobody is recorded as setting
(set before the governor was deployed, or in a region whose calls it does not see) starts its clock when the governor
first sees it, and that first sighting is recorded too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from governor.core_policy import ExemptingTags, Exemptions, FleetPolicy
from governor.domain.actions import Notify, Record
from governor.domain.decision import Decision, Severity
from governor.domain.fleet import EXEMPT_TRUE, Instance, TagProblem, exempt_tag_problem, snooze_tag_problem
from governor.domain.identity import Author
from governor.domain.ports import Ledger
from governor.domain.tag_exemptions import holding_back_refusals, launched_by_service, policy_tag_refusals
from governor.domain.times import parse_time

TAG_SET = "governor-tag"
FIRST_SEEN = "unknown: present when the governor first saw it"
#: Tags Kubernetes node groups put on their nodes: a claim the idle policy checks (``governor.idle.ownership``).
KUBERNETES_TAGS = ("eks:cluster-name", "eks:nodegroup-name", "karpenter.sh/nodepool", "karpenter.sh/provisioner-name")
KUBERNETES_TAG_PREFIX = "kubernetes.io/cluster/"


class TaggingPolicy(Protocol):
    """What deciding on a tag setting reads of the policy: the fleet's tags, and every capability's exempting tags
    (the composed ``governor.policy.Policy`` gathers them from the registry)."""

    @property
    def fleet(self) -> FleetPolicy: ...

    def exempting_tags(self) -> tuple[ExemptingTags, ...]: ...


Source = Literal[
    "CreateTags",
    "RunInstances",
    "TagUser",
    "TagRole",
    "TagResource",
    "CreateUser",
    "CreateRole",
    "CreateKey",
    "CreateSecret",
    "first-seen",
]
ResourceKind = Literal["instance", "security-group", "iam-user", "iam-role", "kms-key", "secret", "other"]
#: The resources whose tags exempt a credential from rotation (issue 33: a user exempted their own access key).
CREDENTIALS: frozenset[str] = frozenset({"iam-user", "kms-key", "secret"})


@dataclass(frozen=True)
class TagSetting:
    """One watched tag written by someone: who wrote it, when, on what, and whether the governor honours it."""

    resource_id: str
    key: str
    value: str
    who: str
    at: dt.datetime
    event_id: str
    problem: str | None = None
    source: Source = "CreateTags"
    kind: ResourceKind = "instance"
    #: How ``who`` was established (``governor.domain.identity.Author``): the field used, the raw ids, and whether a
    #: person is proven at all (a service-linked role's call proves nobody).
    via: str = "arn"
    principal_id: str | None = None
    source_identity: str | None = None
    proven: bool = True

    @property
    def credential(self) -> bool:
        return self.kind in CREDENTIALS

    def item(self) -> dict[str, Any]:
        return {
            "kind": TAG_SET,
            "resource_id": self.resource_id,
            "resource_kind": self.kind,
            "key": self.key,
            "value": self.value,
            "who": self.who,
            "at": self.at.isoformat(),
            "event_id": self.event_id,
            "problem": self.problem,
            "source": self.source,
            "via": self.via,
            "principal_id": self.principal_id,
            "source_identity": self.source_identity,
            "proven": self.proven,
        }


def setting_key(resource_id: str, key: str) -> str:
    """The ledger key of the latest setting of ``key`` on ``resource_id``."""
    return f"{resource_id}#{key}"


def watched_tag_keys(policy: TaggingPolicy) -> tuple[str, ...]:
    """The tags that ask the governor to hold back, run something, or claim whose a resource is."""
    fleet = policy.fleet
    return tuple(
        dict.fromkeys(
            (
                fleet.exempt_tag,
                fleet.keep_until_tag,
                fleet.checkpoint_command_tag,
                "governor:idle-since",
                fleet.owner_tag,
                fleet.team_tag,
                *fleet.fleet_tags,
                *KUBERNETES_TAGS,
                *(key for exempting in policy.exempting_tags() for key in exempting.tags),
            )
        )
    )


def exempting(key: str, value: str, policy: TaggingPolicy) -> ExemptingTags | None:
    """The capability's exempting tags ``key=value`` is one of (``idle.exemptions.tags``), if any."""
    for declared in policy.exempting_tags():
        wanted = declared.tags.get(key)
        if wanted is not None and (wanted == "*" or wanted == value):
            return declared
    return None


def policy_exempting(key: str, value: str, policy: TaggingPolicy) -> bool:
    """Whether ``key=value`` exempts an instance through a capability's policy (``idle.exemptions.tags``)."""
    return exempting(key, value, policy) is not None


def holds_back(key: str, value: str, policy: TaggingPolicy) -> bool:
    """A tag that asks the governor to look away: the exemption, the snooze, or a policy tag exemption."""
    return key in (policy.fleet.exempt_tag, policy.fleet.keep_until_tag) or policy_exempting(key, value, policy)


def is_watched(key: str, policy: TaggingPolicy) -> bool:
    return key in watched_tag_keys(policy) or key.startswith(KUBERNETES_TAG_PREFIX)


def tag_problem(key: str, value: str, policy: TaggingPolicy, at: dt.datetime) -> str | None:
    """Why the governor will not honour this tag value as set at ``at``, or None."""
    fleet = policy.fleet
    if key == fleet.exempt_tag:
        found = exempt_tag_problem(value, fleet, at)
        return found.reason if found else None
    if key == fleet.keep_until_tag:
        found = snooze_tag_problem(value, fleet, at)
        return found.reason if found else None
    if key == fleet.checkpoint_command_tag and value.strip() not in fleet.checkpoint_commands:
        return "names no entry of fleet.checkpoint_commands; never run"
    return None


def settings_from(
    pairs: Iterable[tuple[str, str]],
    resources: Sequence[tuple[str, ResourceKind]],
    policy: TaggingPolicy,
    *,
    author: Author,
    at: dt.datetime,
    event_id: str,
    source: Source,
    origin: str | None = None,
) -> list[TagSetting]:
    """One :class:`TagSetting` per watched tag and resource of one tagging call.

    A call that proves no person (an AWS service-linked role's, ``author.proven`` False) records its tags all the
    same, but a tag in it that would hold the governor back is not honoured: where it came from (``origin``, e.g. the
    launch template a group launched from) has no provable author.
    """
    found: list[TagSetting] = []
    ids = author.fields()
    for key, value in pairs:
        if not is_watched(key, policy):
            continue
        problem = tag_problem(key, value, policy, at)
        if problem is None and not author.proven and holds_back(key, value, policy):
            problem = unproven_reason(author, origin)
        found.extend(
            TagSetting(r, key, value, author.who, at, event_id, problem, source, kind, **ids) for r, kind in resources
        )
    return found


def unproven_reason(author: Author, origin: str | None) -> str:
    """Why a tag an AWS service wrote on someone's behalf holds nothing back."""
    where = f" from {origin}" if origin else ""
    return (
        f"written by {author.who}{where}: a service writes on someone's behalf, beyond any reserved-tag policy, and "
        "who put the tag in the template or group cannot be proven; set it with CreateTags (recorded) instead"
    )


def tag_pairs(items: Any) -> list[tuple[str, str]]:
    """Tags as CloudTrail records them: ``{"key", "value"}`` (EC2, IAM, Secrets Manager) or ``{"tagKey",
    "tagValue"}`` (KMS), in a list or an EC2 ``{"items": [...]}`` set."""
    if isinstance(items, Mapping):
        items = items.get("items") or []
    pairs = []
    for tag in items if isinstance(items, list) else []:
        if not isinstance(tag, Mapping):
            continue
        key = tag.get("key", tag.get("tagKey", tag.get("Key")))
        value = tag.get("value", tag.get("tagValue", tag.get("Value")))
        if key is not None:
            pairs.append((str(key), "" if value is None else str(value)))
    return pairs


def decide_setting(setting: TagSetting, policy: TaggingPolicy, *, policy_name: str, rule: str) -> Decision:
    """Every watched setting is recorded. A finding goes out for a value the governor will not honour, and for every
    exemption: on a credential (warning: it stops rotation) and on an instance (info), with its end."""
    fleet = policy.fleet
    reasons = [
        f"{setting.who} set {setting.key}={setting.value!r} on {setting.resource_id} at {setting.at.isoformat()} "
        f"({setting.source})"
    ]
    by_policy = exempting(setting.key, setting.value, policy)
    exemption = by_policy is not None or (setting.key == fleet.exempt_tag and setting.value.strip().lower() != "false")
    if setting.problem:
        reasons.append(f"ignored by the governor: {setting.problem}")
    elif by_policy is not None or (exemption and setting.value.strip().lower() == EXEMPT_TRUE):
        end = exemption_end(setting.at, fleet)
        what = f"exempts it from {by_policy.what} by policy ({by_policy.where} {setting.key}); " if by_policy else ""
        reasons.append(f"{what}honoured until {end.isoformat()} (fleet.max_exemption_days {fleet.max_exemption_days})")
    notify = bool(setting.problem) or exemption
    severity: Severity = "warning" if setting.problem or (exemption and setting.credential) else "info"
    return Decision(
        policy=policy_name,
        verdict="act" if notify else "ok",
        resource=setting.resource_id,
        actions=[Record(enforced=True, kind=TAG_SET)] + ([Notify(enforced=True)] if notify else []),
        reasons=reasons,
        evidence=setting.item(),
        severity=severity,
        rule=rule,
    )


def setting_title(setting: TagSetting) -> str:
    """The finding's title for a setting :func:`decide_setting` reports."""
    if setting.problem:
        return f"{setting.key} on {setting.resource_id} set by {setting.who} is not honoured"
    what = "credential " if setting.credential else ""
    return f"{setting.who} exempted {what}{setting.resource_id} ({setting.key}={setting.value})"


def record_settings(
    settings: Sequence[TagSetting], ledger: Ledger, decide: Callable[[TagSetting], Decision], *, event_id: str
) -> list[tuple[Decision, str]]:
    """Record each setting as ``decide`` (the capability's :func:`decide_setting`) judges it, and the latest setting per
    resource and key (the exemption clocks and the report read it); returns what to publish, with titles."""
    published: list[tuple[Decision, str]] = []
    for setting in settings:
        decision = decide(setting)
        ledger.record(decision, event_id=f"{event_id}#{setting.resource_id}#{setting.key}", at=setting.at)
        ledger.put_item(TAG_SET, setting_key(setting.resource_id, setting.key), setting.item())
        if decision.verdict == "act":
            published.append((decision, setting_title(setting)))
    return published


# --- the end of an exemption -------------------------------------------------------------------------------------


def exemption_end(set_at: dt.datetime, fleet: FleetPolicy) -> dt.datetime:
    return set_at + dt.timedelta(days=fleet.max_exemption_days)


def recorded_setting(
    ledger: Ledger, resource_ids: Sequence[str], key: str, value: str
) -> tuple[str, dict[str, Any]] | None:
    """The latest recorded setting of ``key`` to ``value`` on any of the resource's ids."""
    for resource_id in resource_ids:
        item = ledger.get_item(TAG_SET, setting_key(resource_id, key))
        if item and str(item.get("value", "")).strip().lower() == value.strip().lower():
            return resource_id, item
    return None


@dataclass(frozen=True)
class Bounded:
    """A resource's tags as every decision reads them, what was not honoured, and a first sighting just recorded."""

    tags: dict[str, str]
    refused: tuple[TagProblem, ...] = ()
    first_seen: TagSetting | None = None


def bounded(
    resource_ids: Sequence[str],
    tags: Mapping[str, str],
    fleet: FleetPolicy,
    ledger: Ledger,
    now: dt.datetime,
    *,
    kind: ResourceKind = "instance",
    exemptions: Exemptions | None = None,
) -> Bounded:
    """``tags`` as the decisions read them: an exemption or snooze whose recorded author is no person (or that an
    AWS service put on an instance it launched, unrecorded) removed and refused; ``exempt=true`` replaced by its end
    (the recorded setting plus ``fleet.max_exemption_days``); a policy tag exemption (``exemptions.tags``) refused
    unless a person is recorded setting it within ``fleet.max_exemption_days`` (``governor.domain.tag_exemptions``).

    A ``true`` with no recorded setting is recorded now as first seen, so its clock starts today and a later sweep
    finds the same start. The decision then honours the exemption only until that end and says so in its reason.
    """

    def recorded(key: str, value: str) -> Mapping[str, Any] | None:
        found = recorded_setting(ledger, resource_ids, key, value)
        return found[1] if found else None

    service = launched_by_service(tags) if kind == "instance" else None
    refused = holding_back_refusals(tags, fleet, recorded, launched_by=service)
    if exemptions is not None:
        refused += policy_tag_refusals(tags, exemptions, fleet, recorded, now)
    dropped = {p.key for p in refused if p.key in (fleet.exempt_tag, fleet.keep_until_tag)}
    kept = {k: v for k, v in tags.items() if k not in dropped}
    value = kept.get(fleet.exempt_tag)
    if value is None or value.strip().lower() != EXEMPT_TRUE or not resource_ids:
        return Bounded(kept, tuple(refused))
    found = recorded(fleet.exempt_tag, value)
    first: TagSetting | None = None
    if found is None:
        first = TagSetting(
            resource_ids[0],
            fleet.exempt_tag,
            value,
            FIRST_SEEN,
            now,
            "first-seen",
            source="first-seen",
            kind=kind,
            via="none",
            proven=False,
        )
        ledger.put_item(TAG_SET, setting_key(first.resource_id, first.key), first.item())
        set_at = now
    else:
        set_at = _when(found.get("at")) or now
    end = exemption_end(set_at, fleet)
    return Bounded({**kept, fleet.exempt_tag: end.isoformat()}, tuple(refused), first)


def bounded_tags(
    resource_ids: Sequence[str],
    tags: Mapping[str, str],
    fleet: FleetPolicy,
    ledger: Ledger,
    now: dt.datetime,
    *,
    kind: ResourceKind = "instance",
) -> dict[str, str]:
    """The tags of :func:`bounded`, for callers that report nothing of their own."""
    return bounded(resource_ids, tags, fleet, ledger, now, kind=kind).tags


def _when(value: Any) -> dt.datetime | None:
    return parse_time(value) if value else None


def bounded_instance(
    instance: Instance, fleet: FleetPolicy, ledger: Ledger, now: dt.datetime, exemptions: Exemptions | None = None
) -> Instance:
    """The instance as :func:`bounded` reads it, with what was refused (``Instance.refused_tags``) for every decision
    about it and for the finding that says so."""
    found = bounded([instance.id], instance.tags, fleet, ledger, now, exemptions=exemptions)
    if found.tags == instance.tags and not found.refused:
        return instance
    return replace(instance, tags=found.tags, refused_tags=found.refused)
