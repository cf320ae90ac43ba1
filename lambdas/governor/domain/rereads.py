"""The re-read after a fixing action: did the problem go away? One check per fixing action type, on the same adapter
bundle the action executed through (the reads each capability already holds: DescribeInstances, DescribeSecurityGroups
and DescribeSecurityGroupRules, GetKeyRotationStatus, ListAccessKeys, DescribeSecret), so no grant is added.

The runner calls :func:`after` for every enforced action AWS accepted and keeps the answer on the action's outcome
(:attr:`governor.domain.actions.Outcome.verified`); the decision's findings then carry the combined answer
(:func:`governor.domain.verification.combined`). A type with no check here (a checkpoint, a Spot replacement) is
never called fixed; a re-read that fails says so and is not a fix either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from governor.domain.actions import Acting, Action
from governor.domain.verification import Verification, seen

#: EC2 states in which a stop or terminate has taken effect (the instance no longer runs the workload).
STOPPED = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
TERMINATED = frozenset({"shutting-down", "terminated"})


def _instance_state(wanted: frozenset[str]) -> Callable[[Action, Any, Acting], Verification]:
    def check(action: Action, aws: Any, at: Acting) -> Verification:
        live = aws.instances.instance(at.resource)
        if live is None:
            return Verification(fixed=True, seen=f"instance {at.resource} no longer exists")
        return Verification(fixed=live.state in wanted, seen=f"instance {at.resource} is {live.state}")

    return check


def _revoked(action: Action, aws: Any, at: Acting) -> Verification:
    group_id = str(getattr(action, "group_id", None) or at.resource)
    live = aws.groups.group(group_id)
    if live is None:
        return Verification(fixed=True, seen=f"security group {group_id} no longer exists")
    left = sorted({rule.rule_id for rule in live.rules} & set(getattr(action, "rule_ids", ()) or ()))
    if left:
        return Verification(fixed=False, seen=f"rule(s) {', '.join(left)} still in {group_id}")
    return Verification(fixed=True, seen=f"rule(s) gone from {group_id}")


def _no_public_ip(action: Action, aws: Any, at: Acting) -> Verification:
    instance_id = str(getattr(action, "instance_id", None) or at.resource)
    live = aws.instances.instance(instance_id)
    if live is None:
        return Verification(fixed=True, seen=f"instance {instance_id} no longer exists")
    if live.public_ip:
        return Verification(fixed=False, seen=f"instance {instance_id} still has public IPv4 {live.public_ip}")
    return Verification(fixed=True, seen=f"instance {instance_id} has no public IPv4 address")


def _key_id(action: Action, at: Acting, field: str) -> str:
    live = getattr(at.live, "key_id", None)
    return str(live or getattr(action, field, None) or at.resource)


def _rotation_on(action: Action, aws: Any, at: Acting) -> Verification:
    key_id = _key_id(action, at, "key_id")
    key = aws.kms.key(key_id)
    if key is None:
        return Verification(fixed=True, seen=f"key {key_id} no longer exists")
    if not key.rotation_enabled:
        return Verification(fixed=False, seen=f"key {key_id}: automatic rotation still off")
    period, most = key.rotation_period_days, at.policy.keys.kms_max_rotation_days
    if period is not None and period > most:
        return Verification(fixed=False, seen=f"key {key_id} rotates every {period} days (policy: at most {most})")
    every = f"every {period} days" if period is not None else "period not reported"
    return Verification(fixed=True, seen=f"key {key_id}: automatic rotation on ({every})")


def _rotated(action: Action, aws: Any, at: Acting) -> Verification:
    key_id = _key_id(action, at, "key_id")
    before, key = at.live, aws.kms.key(key_id)
    if key is None:
        return Verification(fixed=True, seen=f"key {key_id} no longer exists")
    count = getattr(before, "on_demand_rotations", None)
    last = getattr(before, "last_rotation", None)
    newer = key.last_rotation is not None and (last is None or key.last_rotation > last)
    if (count is not None and key.on_demand_rotations > count) or (before is not None and newer):
        return Verification(fixed=True, seen=f"key {key_id} rotated on demand")
    return Verification(fixed=False, seen=f"key {key_id}: no new rotation seen yet")


def _deactivated(action: Action, aws: Any, at: Acting) -> Verification:
    user = str(getattr(action, "user", None) or "")
    key_id = _key_id(action, at, "access_key_id")
    found = next((key for key in aws.iam.user_keys(user) if key.key_id == key_id), None)
    if found is None:
        return Verification(fixed=True, seen=f"access key {key_id} of {user} no longer exists")
    if found.active:
        return Verification(fixed=False, seen=f"access key {key_id} of {user} is still active")
    return Verification(fixed=True, seen=f"access key {key_id} of {user} is inactive")


def _secret_rotates(action: Action, aws: Any, at: Acting) -> Verification:
    secret_id = str(getattr(at.live, "arn", None) or getattr(action, "secret_id", None) or at.resource)
    secret = aws.secrets.secret(secret_id)
    if secret is None:
        return Verification(fixed=True, seen=f"secret {secret_id} no longer exists")
    if not secret.rotation_enabled:
        return Verification(fixed=False, seen=f"secret {secret_id}: rotation still off")
    return Verification(fixed=True, seen=f"secret {secret_id}: rotation on")


CHECKS: dict[str, Callable[[Action, Any, Acting], Verification]] = {
    "stop": _instance_state(STOPPED),
    "terminate": _instance_state(TERMINATED),
    "revoke_ingress": _revoked,
    "remove_public_ip": _no_public_ip,
    "enable_key_rotation": _rotation_on,
    "rotate_key": _rotated,
    "deactivate_access_key": _deactivated,
    "set_secret_rotation": _secret_rotates,
}


def after(action: Action, aws: Any, at: Acting) -> Verification | None:
    """The resource re-read after ``action``: None for an action type that fixes nothing by itself or has no check;
    a failed read is reported as not verified (the action itself stands)."""
    check = CHECKS.get(action.type)
    if check is None:
        return None
    try:
        return check(action, aws, at)
    except Exception as error:  # a refused or failed read: the fix is not seen, so it is not claimed
        return Verification(fixed=False, seen=seen(f"re-read after {action.type} failed: {error}"))
