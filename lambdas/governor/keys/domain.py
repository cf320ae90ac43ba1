"""Key and credential rotation: KMS rotation periods, IAM access-key age, Secrets Manager rotation intervals.

AWS Config and most scanners only ask whether KMS rotation is on; this policy checks the period too, and acts.
Everything here is pure: the handler reads AWS through the ports in ``resources`` and acts on the decisions returned;
what a CloudTrail call names is read in ``events``, a secret's schedule in ``schedules``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.actions import AnyAction, Notify, Outcome
from governor.domain.decision import Action, Decision, Finding, Severity
from governor.domain.fleet import TagProblem, exemption
from governor.events.envelopes import CloudTrailRecord
from governor.keys.actions import DeactivateAccessKey, EnableKeyRotation, RotateKey, SetSecretRotation
from governor.keys.events import ROOT_USER, event_target, request_params, response_elements
from governor.keys.resources import AccessKey, KmsKey, Secret
from governor.keys.schedules import policy_rules, rotation_interval_days
from governor.policy import Policy

POLICY = "keys"
ON_DEMAND_LIMIT = 10  # RotateKeyOnDemand calls AWS allows per key


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def _days(delta: dt.timedelta) -> int:
    return max(0, delta.days)


def _date(value: dt.datetime | None) -> str:
    return value.date().isoformat() if value else "unknown"


def _exempt(
    ids: tuple[str, ...], tags: dict[str, str], policy: Policy, now: dt.datetime, refused: tuple[TagProblem, ...] = ()
) -> str | None:
    """Why the credential is exempt now, or None. A tag in ``refused`` (a policy tag exemption no person is recorded
    setting, or set longer than ``fleet.max_exemption_days`` ago: any account user can tag) exempts nothing."""
    keys = frozenset(problem.key for problem in refused)
    for resource_id in ids:
        reason = exemption(resource_id, tags, policy.fleet, policy.keys.exemptions, now, refused=keys)
        if reason:
            return reason
    return None


def _said(decision: Decision, refused: tuple[TagProblem, ...]) -> Decision:
    """The decision with each refused exemption among its reasons: a tag that held nothing back is said in the
    ledger and the finding, never skipped in silence."""
    if not refused:
        return decision
    return decision.model_copy(update={"reasons": [*decision.reasons, *(str(problem) for problem in refused)]})


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
    reason = _exempt((key.key_id, key.arn), key.tags, policy, now, key.refused_tags)
    if key.rotates_automatically:
        decision = _decide_auto_rotation(key, base, limit, enforce)
    else:
        decision = _decide_manual_rotation(key, base, policy, now)
    decision = _said(decision, key.refused_tags)
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


def _access_key_evidence(key: AccessKey, now: dt.datetime, owner: str, team: str | None) -> dict[str, Any]:
    """What a key's decision shows: its dates, its age and how long it has gone unused (None when unknown)."""
    last_seen = key.last_used or key.created
    return {
        "user": key.user,
        "user_arn": key.user_arn,
        "key_id": key.key_id,
        "slot": key.slot,
        "created": key.created.isoformat() if key.created else None,
        "last_used": key.last_used.isoformat() if key.last_used else None,
        "age_days": _days(now - key.created) if key.created else None,
        "unused_days": _days(now - last_seen) if last_seen else None,
        "owner": owner,
        "team": team,
    }


#: A rule's outcome before the decision is built: actions, reasons, severity, rule id, title.
_Judged = tuple[list[AnyAction], list[str], Severity, str | None, str]


def _judge_age(key: AccessKey, policy: Policy, age: int | None, owner: str) -> _Judged:
    """Deactivate past ``access_key_max_age_days``; past ``access_key_warn_days``, tell the owner when it will be."""
    keys = policy.keys
    name = key.key_id or f"access key {key.slot}"
    if age is not None and age > keys.access_key_max_age_days:
        enforce = keys.enforces("access_keys")
        return (
            [DeactivateAccessKey(enforced=enforce, user=key.user, access_key_id=key.key_id)],
            [f"{age} days old; policy allows at most {keys.access_key_max_age_days}"],
            "critical",
            "keys.access_key.too_old",
            f"Access key {name} of {key.user} is {age} days old (max {keys.access_key_max_age_days})",
        )
    if age is not None and age > keys.access_key_warn_days:
        due = (key.created + dt.timedelta(days=keys.access_key_max_age_days)).date() if key.created else None
        return (
            [Notify(enforced=False, to=owner)],
            [
                f"{age} days old: rotate it before {due} (deactivated after {keys.access_key_max_age_days} days "
                "when enforcing)"
            ],
            "warning",
            "keys.access_key.age_warning",
            f"Access key {name} of {key.user} is {age} days old: rotate it before {due}",
        )
    return [], [], "info", None, ""


def _judge_unused(key: AccessKey, policy: Policy, unused_for: int | None, owner: str, aged: _Judged) -> _Judged:
    """An unused key adds its reason to the age rule's; it is the finding only when its age is within policy."""
    actions, reasons, severity, rule, title = aged
    limit = policy.keys.access_key_unused_days
    if unused_for is None or unused_for <= limit:
        return aged
    used = f"last used {_date(key.last_used)}" if key.last_used else "never used"
    reasons = [*reasons, f"{used}: unused for {unused_for} days (policy: {limit}); delete it"]
    if actions:
        return actions, reasons, severity, rule, title
    name = key.key_id or f"access key {key.slot}"
    title = f"Access key {name} of {key.user} unused for {unused_for} days"
    return [Notify(enforced=False, to=owner)], reasons, severity, "keys.access_key.unused", title


def decide_access_key(key: AccessKey, policy: Policy, now: dt.datetime) -> Decision:
    """Warn the owner past ``access_key_warn_days``, deactivate past ``access_key_max_age_days``, report unused keys.

    The finding goes to the user's owner tag, else the user name. Root access keys are always critical: the
    governor cannot deactivate them, only report them.
    """
    owner, team = _owner(key.tags, policy, key.user)
    evidence = _access_key_evidence(key, now, owner, team)
    age = evidence["age_days"]
    base = Decision(policy=POLICY, verdict="ok", resource=key.resource, evidence=evidence)
    if not key.active:
        return base.model_copy(update={"verdict": "ignored", "reasons": ["key is inactive: it cannot sign requests"]})
    if key.user == ROOT_USER:
        return _root_key(
            base,
            f"the root user has an active access key ({age} days old)",
            "The root user has an active access key",
        )
    aged = _judge_age(key, policy, age, owner)
    actions, reasons, severity, rule, title = _judge_unused(key, policy, evidence["unused_days"], owner, aged)
    if not actions:
        return base.model_copy(
            update={"reasons": [f"{age} days old, within {policy.keys.access_key_warn_days} (warning age)"]}
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
    ids = tuple(x for x in (key.user, key.user_arn, key.key_id) if x)
    reason = _exempt(ids, key.tags, policy, now, key.refused_tags)
    decision = _said(decision, key.refused_tags)
    if reason:
        return decision.model_copy(
            update={"verdict": "ignored", "actions": [], "reasons": [*decision.reasons, f"not acted on: {reason}"]}
        )
    return decision


# ---------------------------------------------------------------------------------------------------------------
# Secrets Manager


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
    reason = _exempt((secret.arn, secret.name), secret.tags, policy, now, secret.refused_tags)
    decision = _said(decision, secret.refused_tags)
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
# Calls judged from the CloudTrail record alone


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
