"""Key and credential rotation: KMS rotation periods, IAM access-key age, Secrets Manager rotation intervals.

AWS Config and most scanners only ask whether KMS rotation is on; this policy checks the period too, and acts.
Everything here is pure: the handler reads AWS through the ports below and acts on the decisions returned.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from governor.domain.actions import AnyAction, Notify, Outcome
from governor.domain.decision import Action, Decision, Finding, Severity
from governor.domain.fleet import exemption
from governor.domain.times import parse_time
from governor.events.envelopes import CloudTrailRecord, InvalidEventError
from governor.keys.actions import DeactivateAccessKey, EnableKeyRotation, RotateKey, SetSecretRotation
from governor.policy import Policy

POLICY = "keys"
Kind = Literal["kms", "access_keys", "secrets"]

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
ON_DEMAND_LIMIT = 10  # RotateKeyOnDemand calls AWS allows per key
ROOT_USER = "<root_account>"


# ---------------------------------------------------------------------------------------------------------------
# What the governor reads about each resource (adapters build these; tests build them by hand).


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


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def _days(delta: dt.timedelta) -> int:
    return max(0, delta.days)


def _date(value: dt.datetime | None) -> str:
    return value.date().isoformat() if value else "unknown"


def _exempt(ids: tuple[str, ...], tags: dict[str, str], policy: Policy, now: dt.datetime) -> str | None:
    for resource_id in ids:
        reason = exemption(resource_id, tags, policy.fleet, policy.keys.exemptions, now)
        if reason:
            return reason
    return None


def _owner(tags: dict[str, str], policy: Policy, default: str) -> tuple[str, str | None]:
    owner = tags.get(policy.fleet.owner_tag, "").strip() or default
    team = tags.get(policy.fleet.team_tag, "").strip() or None
    return owner, team


def _short(key_id: str) -> str:
    return key_id.rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------------------------------------------
# KMS


def decide_kms_key(key: KmsKey, policy: Policy, now: dt.datetime) -> Decision:
    """Customer keys that can rotate automatically must, at most every ``kms_max_rotation_days``; others are aged.

    The period is checked, not just the on/off switch. Keys AWS manages, keys pending deletion or not enabled, and
    multi-Region replicas (rotation is set on the primary) are out of scope.
    """
    keys = policy.keys
    limit = keys.kms_max_rotation_days
    enforce = keys.enforces("kms")
    evidence: dict[str, Any] = {
        "key_id": key.key_id,
        "arn": key.arn,
        "spec": key.spec,
        "origin": key.origin,
        "state": key.state,
        "rotation_enabled": key.rotation_enabled,
        "rotation_period_days": key.rotation_period_days,
        "policy_days": limit,
    }
    base = Decision(policy=POLICY, verdict="ok", resource=key.arn or key.key_id, evidence=evidence)
    if key.manager != "CUSTOMER":
        return base.model_copy(
            update={"verdict": "ignored", "reasons": ["AWS managed key: AWS rotates it every year; not configurable"]}
        )
    if key.state in ("PendingDeletion", "PendingReplicaDeletion"):
        return base.model_copy(update={"verdict": "ignored", "reasons": ["key is pending deletion"]})
    if key.state != "Enabled":
        return base.model_copy(
            update={"verdict": "ignored", "reasons": [f"key is {key.state}: it encrypts nothing new until enabled"]}
        )
    if key.multi_region_type == "REPLICA":
        return base.model_copy(
            update={"verdict": "ignored", "reasons": ["multi-Region replica: rotation is set on its primary key"]}
        )
    owner, team = _owner(key.tags, policy, "unknown")
    base = base.model_copy(update={"evidence": {**base.evidence, "owner": owner, "team": team}})
    reason = _exempt((key.key_id, key.arn), key.tags, policy, now)
    if key.rotates_automatically:
        decision = _decide_auto_rotation(key, base, limit, enforce)
    else:
        decision = _decide_manual_rotation(key, base, policy, now)
    if reason and decision.verdict == "act":
        return decision.model_copy(
            update={
                "verdict": "ignored",
                "actions": [],
                "severity": "info",
                "reasons": [*decision.reasons, f"not acted on: {reason}"],
            }
        )
    return decision


def _decide_auto_rotation(key: KmsKey, base: Decision, limit: int, enforce: bool) -> Decision:
    action = EnableKeyRotation(enforced=enforce, key_id=key.key_id, rotation_period_days=limit)
    if not key.rotation_enabled:
        return base.model_copy(
            update={
                "verdict": "act",
                "actions": [action],
                "severity": "warning",
                "rule": "keys.kms.rotation_off",
                "reasons": [f"automatic rotation is off; policy requires rotation at least every {limit} days"],
                "evidence": {**base.evidence, "title": f"KMS key {_short(key.key_id)} does not rotate"},
            }
        )
    if key.rotation_period_days is None:
        return base.model_copy(
            update={
                "reasons": ["automatic rotation is on"],
                "assumptions": [
                    "AWS did not report RotationPeriodInDays; the period is assumed to be within policy "
                    "(AWS reports it for every key with rotation on)"
                ],
            }
        )
    if key.rotation_period_days > limit:
        return base.model_copy(
            update={
                "verdict": "act",
                "actions": [action],
                "severity": "warning",
                "rule": "keys.kms.rotation_period_too_long",
                "reasons": [f"rotates every {key.rotation_period_days} days; policy allows at most {limit}"],
                "evidence": {
                    **base.evidence,
                    "title": f"KMS key {_short(key.key_id)} rotates every {key.rotation_period_days} days "
                    f"(policy: {limit})",
                },
            }
        )
    next_rotation = f", next rotation {_date(key.next_rotation)}" if key.next_rotation else ""
    return base.model_copy(
        update={"reasons": [f"rotates every {key.rotation_period_days} days (policy: {limit}){next_rotation}"]}
    )


def _decide_manual_rotation(key: KmsKey, base: Decision, policy: Policy, now: dt.datetime) -> Decision:
    limit = policy.keys.kms_max_rotation_days
    why = (
        "asymmetric"
        if key.spec.startswith(("RSA", "ECC", "SM2", "ML_DSA"))
        else "HMAC"
        if key.spec.startswith("HMAC")
        else "imported key material"
        if key.origin == "EXTERNAL"
        else "in a custom key store"
    )
    since = key.last_rotation or key.created
    label = "last rotated" if key.last_rotation else "created (never rotated)"
    if since is None:
        age = None
        age_text = "no creation or rotation date"
    else:
        age = _days(now - since)
        age_text = f"{label} {_date(since)}, {age} days ago"
    evidence = {**base.evidence, "last_rotation": since.isoformat() if since else None, "age_days": age}
    if age is not None and age <= limit:
        return base.model_copy(
            update={
                "reasons": [f"cannot rotate automatically ({why}); {age_text}, within {limit} days"],
                "evidence": evidence,
            }
        )
    reasons = [f"cannot rotate automatically ({why}); {age_text}; policy allows at most {limit} days"]
    actions: list[AnyAction]
    if key.rotates_on_demand and policy.keys.rotate_on_demand:
        remaining = max(0, ON_DEMAND_LIMIT - key.on_demand_rotations)
        if remaining:
            actions = [RotateKey(enforced=policy.keys.enforces("kms"), key_id=key.key_id)]
            reasons.append(
                "rotate on demand (AWS needs new key material imported first; "
                f"{remaining} of {ON_DEMAND_LIMIT} on-demand rotations left)"
            )
        else:
            actions = [Notify(enforced=False)]
            reasons.append(f"all {ON_DEMAND_LIMIT} on-demand rotations used: create a new key and move its aliases")
    elif key.rotates_on_demand:
        actions = [Notify(enforced=False)]
        reasons.append("import new key material and rotate on demand (policy rotate_on_demand is off)")
    else:
        actions = [Notify(enforced=False)]
        reasons.append("AWS cannot rotate this key in place: create a new key and move its aliases")
    return base.model_copy(
        update={
            "verdict": "act",
            "actions": actions,
            "severity": "warning",
            "rule": "keys.kms.manual_rotation_overdue",
            "reasons": reasons,
            "evidence": {
                **evidence,
                "title": f"KMS key {_short(key.key_id)} ({why}) not rotated for "
                f"{age if age is not None else 'unknown'} days",
            },
        }
    )


# ---------------------------------------------------------------------------------------------------------------
# IAM access keys


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


def _root_key(base: Decision, what: str, title: str) -> Decision:
    """A root user access key, active or just created: critical, reported only (IAM lets no one but the root user
    deactivate it)."""
    return base.model_copy(
        update={
            "verdict": "act",
            "severity": "critical",
            "rule": "keys.access_key.root",
            "actions": [Notify(enforced=False)],
            "reasons": [f"{what}; the governor cannot deactivate root keys: delete it and use roles"],
            "evidence": {**base.evidence, "title": title},
        }
    )


def decide_access_key(key: AccessKey, policy: Policy, now: dt.datetime) -> Decision:
    """Warn the owner past ``access_key_warn_days``, deactivate past ``access_key_max_age_days``, report unused keys.

    The finding goes to the user's owner tag, else the user name. Root access keys are always critical: the
    governor cannot deactivate them, only report them.
    """
    keys = policy.keys
    owner, team = _owner(key.tags, policy, key.user)
    age = _days(now - key.created) if key.created else None
    last_seen = key.last_used or key.created
    unused_for = _days(now - last_seen) if last_seen else None
    evidence: dict[str, Any] = {
        "user": key.user,
        "user_arn": key.user_arn,
        "key_id": key.key_id,
        "slot": key.slot,
        "created": key.created.isoformat() if key.created else None,
        "last_used": key.last_used.isoformat() if key.last_used else None,
        "age_days": age,
        "unused_days": unused_for,
        "owner": owner,
        "team": team,
    }
    base = Decision(policy=POLICY, verdict="ok", resource=key.resource, evidence=evidence)
    if not key.active:
        return base.model_copy(update={"verdict": "ignored", "reasons": ["key is inactive: it cannot sign requests"]})
    name = key.key_id or f"access key {key.slot}"
    if key.user == ROOT_USER:
        return _root_key(
            base,
            f"the root user has an active access key ({age} days old)",
            "The root user has an active access key",
        )
    reasons: list[str] = []
    actions: list[AnyAction] = []
    severity: Severity = "info"
    rule: str | None = None
    title = ""
    if age is not None and age > keys.access_key_max_age_days:
        enforce = keys.enforces("access_keys")
        actions.append(DeactivateAccessKey(enforced=enforce, user=key.user, access_key_id=key.key_id))
        reasons.append(f"{age} days old; policy allows at most {keys.access_key_max_age_days}")
        severity, rule = "critical", "keys.access_key.too_old"
        title = f"Access key {name} of {key.user} is {age} days old (max {keys.access_key_max_age_days})"
    elif age is not None and age > keys.access_key_warn_days:
        due = (key.created + dt.timedelta(days=keys.access_key_max_age_days)).date() if key.created else None
        actions.append(Notify(enforced=False, to=owner))
        reasons.append(
            f"{age} days old: rotate it before {due} (deactivated after {keys.access_key_max_age_days} days "
            "when enforcing)"
        )
        severity, rule = "warning", "keys.access_key.age_warning"
        title = f"Access key {name} of {key.user} is {age} days old: rotate it before {due}"
    if unused_for is not None and unused_for > keys.access_key_unused_days:
        used = f"last used {_date(key.last_used)}" if key.last_used else "never used"
        reasons.append(f"{used}: unused for {unused_for} days (policy: {keys.access_key_unused_days}); delete it")
        if not actions:
            actions.append(Notify(enforced=False, to=owner))
            rule = "keys.access_key.unused"
            title = f"Access key {name} of {key.user} unused for {unused_for} days"
    if not actions:
        return base.model_copy(
            update={"reasons": [f"{age} days old, within {keys.access_key_warn_days} (warning age)"]}
        )
    decision = base.model_copy(
        update={
            "verdict": "act",
            "actions": actions,
            "severity": severity,
            "rule": rule,
            "reasons": reasons,
            "evidence": {**evidence, "title": title},
        }
    )
    reason = _exempt(tuple(x for x in (key.user, key.user_arn, key.key_id) if x), key.tags, policy, now)
    if reason:
        return decision.model_copy(
            update={"verdict": "ignored", "actions": [], "reasons": [*reasons, f"not acted on: {reason}"]}
        )
    return decision


# ---------------------------------------------------------------------------------------------------------------
# Secrets Manager

_RATE = re.compile(r"^\s*rate\(\s*(\d+)\s+(day|days|hour|hours)\s*\)\s*$", re.IGNORECASE)
_CRON = re.compile(r"^\s*cron\((.+)\)\s*$", re.IGNORECASE)


def _field(rules: Mapping[str, Any], name: str) -> Any:
    """Rotation rules arrive as ``AutomaticallyAfterDays`` from the API and ``automaticallyAfterDays`` in CloudTrail."""
    for key, value in rules.items():
        if key.lower() == name.lower():
            return value
    return None


def _month_gap(months: str) -> int | None:
    if months in ("*", "?"):
        return 1
    step = re.fullmatch(r"(\*|\d+)/(\d+)", months)
    if step:
        return int(step.group(2))
    chosen: set[int] = set()
    for part in months.split(","):
        span = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not span:
            return None
        low, high = int(span.group(1)), int(span.group(2) or span.group(1))
        chosen.update(range(low, high + 1))
    ordered = sorted(m for m in chosen if 1 <= m <= 12)
    if not ordered:
        return None
    gaps = [(ordered[(i + 1) % len(ordered)] - m) % 12 or 12 for i, m in enumerate(ordered)]
    return max(gaps)


def rotation_interval_days(rules: Mapping[str, Any]) -> int | None:
    """The longest time between two rotations a schedule allows, in days (an upper bound for cron schedules).

    ``AutomaticallyAfterDays: N`` and ``rate(N days)`` are exact; a cron schedule is bounded by its day/month
    fields (daily 1, weekly 7, monthly 31, every third month 93). None when the schedule cannot be read.
    """
    days = _field(rules, "AutomaticallyAfterDays")
    expression = _field(rules, "ScheduleExpression")
    if expression:
        rate = _RATE.match(str(expression))
        if rate:
            amount = int(rate.group(1))
            return amount if rate.group(2).lower().startswith("day") else max(1, math.ceil(amount / 24))
        cron = _CRON.match(str(expression))
        if not cron:
            return None
        parts = cron.group(1).split()
        if len(parts) != 6:
            return None
        _minutes, _hours, day_of_month, month, day_of_week, _year = parts
        gap = _month_gap(month)
        if gap is None:
            return None
        if day_of_month in ("*", "?") and day_of_week in ("*", "?"):
            return 1 if gap == 1 else 31 * gap
        if day_of_month in ("*", "?") and not any(c in day_of_week for c in "#L"):
            return 7 if gap == 1 else 31 * gap
        return 31 * gap
    if isinstance(days, int | float) and days > 0:
        return int(days)
    return None


def policy_rules(secret_rules: Mapping[str, Any], days: int) -> dict[str, Any]:
    """The rotation rules that bring a schedule to the policy, keeping the secret's style and window."""
    rules: dict[str, Any]
    if _field(secret_rules, "ScheduleExpression"):
        rules = {"ScheduleExpression": f"rate({days} days)"}
    else:
        rules = {"AutomaticallyAfterDays": days}
    duration = _field(secret_rules, "Duration")
    if duration:
        rules["Duration"] = duration
    return rules


def decide_secret(secret: Secret, policy: Policy, now: dt.datetime) -> Decision:
    """Every secret rotates at most every ``secret_max_rotation_days``; with a rotation function, the governor sets it.

    Without a rotation function there is nothing to schedule, so the owner is told what is missing.
    """
    keys = policy.keys
    limit = keys.secret_max_rotation_days
    interval = rotation_interval_days(secret.rules) if secret.rotation_enabled else None
    owner, team = _owner(secret.tags, policy, "unknown")
    evidence: dict[str, Any] = {
        "name": secret.name,
        "rotation_enabled": secret.rotation_enabled,
        "rotation_lambda": secret.lambda_arn,
        "rules": dict(secret.rules),
        "interval_days": interval,
        "last_rotated": secret.last_rotated.isoformat() if secret.last_rotated else None,
        "policy_days": limit,
        "owner": owner,
        "team": team,
    }
    base = Decision(policy=POLICY, verdict="ok", resource=secret.arn, evidence=evidence)
    if secret.deleted:
        return base.model_copy(update={"verdict": "ignored", "reasons": ["secret is scheduled for deletion"]})
    rules = policy_rules(secret.rules, limit)
    fix = SetSecretRotation(
        enforced=keys.enforces("secrets"),
        secret_id=secret.arn,
        rotation_lambda=secret.lambda_arn,
        rotation_rules=rules,
    )
    actions: list[AnyAction]
    if not secret.rotation_enabled:
        reasons = [f"rotation is off; policy requires rotation at least every {limit} days"]
        if secret.lambda_arn:
            actions = [fix]
            reasons.append(f"its rotation function {secret.lambda_arn} is still configured: schedule it")
        else:
            actions = [Notify(enforced=False, to=owner)]
            reasons.append("no rotation function: configure one (a Secrets Manager rotation template or your own)")
        decision = base.model_copy(
            update={
                "verdict": "act",
                "actions": actions,
                "severity": "warning",
                "rule": "keys.secret.no_rotation",
                "reasons": reasons,
                "evidence": {**evidence, "title": f"Secret {secret.name} is never rotated"},
            }
        )
    elif interval is None:
        decision = base.model_copy(
            update={
                "verdict": "act",
                "actions": [Notify(enforced=False, to=owner)],
                "severity": "info",
                "rule": "keys.secret.rotation_unreadable",
                "reasons": [f"rotation is on but its schedule {dict(secret.rules)} cannot be read; check it"],
                "evidence": {**evidence, "title": f"Secret {secret.name}: rotation schedule unreadable"},
            }
        )
    elif interval > limit:
        reasons = [f"rotates every {interval} days; policy allows at most {limit}"]
        if secret.lambda_arn:
            actions = [fix]
        else:
            actions = [Notify(enforced=False, to=owner)]
            reasons.append(
                f"managed rotation ({secret.owning_service or 'no rotation function'}): change it at its owner"
            )
        decision = base.model_copy(
            update={
                "verdict": "act",
                "actions": actions,
                "severity": "warning",
                "rule": "keys.secret.rotation_interval_too_long",
                "reasons": reasons,
                "evidence": {**evidence, "title": f"Secret {secret.name} rotates every {interval} days (max {limit})"},
            }
        )
    else:
        return base.model_copy(update={"reasons": [f"rotates every {interval} days (policy: {limit})"]})
    reason = _exempt((secret.arn, secret.name), secret.tags, policy, now)
    if reason:
        return decision.model_copy(
            update={"verdict": "ignored", "actions": [], "reasons": [*decision.reasons, f"not acted on: {reason}"]}
        )
    return decision


# ---------------------------------------------------------------------------------------------------------------
# Findings


def finding_for(decision: Decision, *, event_id: str | None, account: str | None, region: str | None) -> Finding:
    """The message a platform engineer receives, addressed to the resource's owner (tag) or the IAM user."""
    evidence = decision.evidence
    owner = evidence.get("owner")
    return Finding.from_decision(
        decision,
        title=str(evidence.get("title") or f"{decision.rule}: {decision.resource}"),
        owner=owner if owner and owner != "unknown" else None,
        team=evidence.get("team"),
        account=account,
        region=region,
        event_id=event_id,
    )


def failure_finding(
    decision: Decision, action: Action, outcome: Outcome, *, event_id: str | None, region: str | None
) -> Finding:
    """An action AWS refused (a rotation limit, a key state): the owner must step in."""
    hint = ""
    if action.type == "rotate_key" and outcome.error_code == "LimitExceededException":
        hint = f" (AWS allows {ON_DEMAND_LIMIT} on-demand rotations per key: create a new key and move its aliases)"
    failed = decision.model_copy(
        update={"severity": "warning", "rule": f"{decision.rule or POLICY}.action_failed", "actions": [action]}
    )
    finding = finding_for(failed, event_id=event_id, account=None, region=region)
    return finding.model_copy(
        update={
            "title": f"{action.type} failed for {decision.resource}: {outcome.error_code}",
            "detail": f"{outcome.message}{hint}",
            "enforced": False,
        }
    )


# ---------------------------------------------------------------------------------------------------------------
# CloudTrail events: which resource to re-read


@dataclass(frozen=True)
class Target:
    """The resource a CloudTrail call concerns: ``kind`` and the id to re-read (key id/ARN, user name, secret id)."""

    kind: Kind
    resource_id: str


def request_params(record: CloudTrailRecord) -> dict[str, Any]:
    return record.request_parameters or {}


def response_elements(record: CloudTrailRecord) -> dict[str, Any]:
    return record.response_elements or {}


def event_target(record: CloudTrailRecord) -> Target | None:
    """The resource to check for one of the trigger events; None when the record names none."""
    params, response = request_params(record), response_elements(record)
    name = record.event_name
    if name in KMS_EVENTS:
        metadata = response.get("keyMetadata") or {}
        response_key = str(response.get("keyId") or "")
        key = (
            metadata.get("arn")
            or metadata.get("keyId")
            or (response_key if response_key.startswith("arn:") else None)
            or params.get("keyId")
            or response_key
        )
        return Target("kms", str(key)) if key else None
    if name in IAM_EVENTS:
        access_key = response.get("accessKey") or {}
        if not params.get("userName") and is_root(record):
            # Without UserName, IAM acts on the caller: a root caller creates or changes a root access key.
            return Target("access_keys", ROOT_USER)
        user = params.get("userName") or access_key.get("userName") or record.user_identity.user_name
        return Target("access_keys", str(user)) if user else None
    if name in SECRETS_EVENTS:
        secret = (
            params.get("secretId")
            or response.get("aRN")
            or response.get("arn")
            or response.get("name")
            or params.get("name")
        )
        return Target("secrets", str(secret)) if secret else None
    return None


def is_root(record: CloudTrailRecord) -> bool:
    """The call was made with the account's root credentials (``userIdentity.type`` Root)."""
    return (record.user_identity.type or "") == "Root"


def decide_root_key_event(record: CloudTrailRecord) -> Decision:
    """A root access key created or switched on: the most critical finding the keys policy knows.

    Decided from the event itself: the credential report lags by up to four hours, and nothing is acted on (the
    governor cannot deactivate root keys), so the record is the evidence.
    """
    params, response = request_params(record), response_elements(record)
    access_key = response.get("accessKey") or {}
    key_id = str(access_key.get("accessKeyId") or params.get("accessKeyId") or "")
    status = str(params.get("status") or access_key.get("status") or "Active")
    base = Decision(
        policy=POLICY,
        verdict="ok",
        resource=key_id or ROOT_USER,
        evidence={"user": ROOT_USER, "key_id": key_id or None, "event": record.event_name, "status": status},
    )
    if record.event_name == "UpdateAccessKey" and status != "Active":
        return base.model_copy(update={"reasons": [f"a root access key was set {status}"]})
    verb = "created" if record.event_name == "CreateAccessKey" else "set Active"
    return _root_key(
        base,
        f"a root user access key was {verb} ({key_id or 'id not in the event'})",
        f"A root user access key was {verb}",
    )


def decide_unreadable(kind: str, resource: str, code: str, message: str) -> Decision:
    """A resource the governor may not read (a KMS key whose key policy does not delegate to IAM, an SCP): the
    sweep goes on with the others, and the owner is told the resource is not governed until access is granted."""
    what = {"kms": "KMS key", "access_keys": "IAM access keys", "secrets": "secret"}.get(kind, kind)
    hint = (
        "; add the keys function's role to the key policy, or exempt the key"
        if kind == "kms"
        else "; grant the keys function's role read access"
    )
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=resource,
        severity="warning",
        rule="keys.unreadable",
        actions=[Notify(enforced=False)],
        reasons=[f"{code}: the governor may not read this {what}, so its rotation is not checked{hint}"],
        evidence={"kind": kind, "error_code": code, "message": message[:500], "title": f"{what} {resource}: {code}"},
    )


def _ignored_failed(record: CloudTrailRecord, resource: str) -> Decision:
    return Decision(
        policy=POLICY,
        verdict="ignored",
        resource=resource,
        reasons=[f"{record.event_name} failed ({record.error_code}): it changed nothing"],
    )


def decide_failed_call(record: CloudTrailRecord) -> Decision | None:
    """A call with an ``errorCode`` changed nothing: an ``ignored`` decision, or None for a successful call."""
    if not record.failed:
        return None
    target = event_target(record)
    return _ignored_failed(record, target.resource_id if target else record.event_name)


def with_tags(key: KmsKey, tags: dict[str, str]) -> KmsKey:
    """The same key with its tags (read only for keys whose decision is ``act``: exemptions and owners)."""
    return replace(key, tags=dict(tags))
