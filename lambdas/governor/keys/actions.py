"""The keys capability's typed actions: KMS rotation switched on or done on demand, IAM access keys deactivated,
secrets given a rotation schedule, each with the IAM actions it takes and the re-read that says whether it held."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, Protocol

from pydantic import Field

from governor.core_policy import section_of
from governor.domain.actions import Acting, Action, Outcome
from governor.domain.ids import deterministic_id
from governor.domain.verification import Verification
from governor.keys.policy import KeysPolicy


class _Kms(Protocol):
    def enable_rotation(self, key_id: str, period_days: int) -> Outcome: ...

    def rotate_on_demand(self, key_id: str) -> Outcome: ...


class _AccessKeys(Protocol):
    def deactivate(self, user: str, key_id: str) -> Outcome: ...


class _Secrets(Protocol):
    def set_rotation(self, secret: Any, rules: dict[str, Any], token: str | None = None) -> Outcome: ...


class KeyChanges(Protocol):
    @property
    def kms(self) -> _Kms: ...

    @property
    def iam(self) -> _AccessKeys: ...

    @property
    def secrets(self) -> _Secrets: ...


class EnableKeyRotation(Action):
    type: Literal["enable_key_rotation"] = "enable_key_rotation"
    key_id: str | None = None
    rotation_period_days: int | None = None
    FIXES = True
    IAM = frozenset({"kms:EnableKeyRotation"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        key_id = _live_id(at, "key_id") or str(self.key_id)
        period = section_of(at.policy, "keys", KeysPolicy).kms_max_rotation_days
        return _said(aws.kms.enable_rotation(key_id, period), f"enabled rotation of {key_id} every {period} days")

    def verify(self, aws: Any, at: Acting) -> Verification:
        key_id = _key_id(self, at, "key_id")
        key = aws.kms.key(key_id)
        if key is None:
            return Verification(fixed=True, seen=f"key {key_id} no longer exists")
        if not key.rotation_enabled:
            return Verification(fixed=False, seen=f"key {key_id}: automatic rotation still off")
        period, most = key.rotation_period_days, section_of(at.policy, "keys", KeysPolicy).kms_max_rotation_days
        if period is not None and period > most:
            return Verification(fixed=False, seen=f"key {key_id} rotates every {period} days (policy: at most {most})")
        every = f"every {period} days" if period is not None else "period not reported"
        return Verification(fixed=True, seen=f"key {key_id}: automatic rotation on ({every})")


class RotateKey(Action):
    type: Literal["rotate_key"] = "rotate_key"
    key_id: str | None = None
    FIXES = True
    IAM = frozenset({"kms:RotateKeyOnDemand"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        key_id = _live_id(at, "key_id") or str(self.key_id)
        return _said(aws.kms.rotate_on_demand(key_id), f"rotated {key_id} on demand")

    def verify(self, aws: Any, at: Acting) -> Verification:
        key_id = _key_id(self, at, "key_id")
        before, key = at.live, aws.kms.key(key_id)
        if key is None:
            return Verification(fixed=True, seen=f"key {key_id} no longer exists")
        count = getattr(before, "on_demand_rotations", None)
        last = getattr(before, "last_rotation", None)
        newer = key.last_rotation is not None and (last is None or key.last_rotation > last)
        if (count is not None and key.on_demand_rotations > count) or (before is not None and newer):
            return Verification(fixed=True, seen=f"key {key_id} rotated on demand")
        return Verification(fixed=False, seen=f"key {key_id}: no new rotation seen yet")


class DeactivateAccessKey(Action):
    type: Literal["deactivate_access_key"] = "deactivate_access_key"
    user: str | None = None
    access_key_id: str | None = None
    FIXES = True
    IAM = frozenset({"iam:UpdateAccessKey"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        user, key_id = str(self.user), _live_id(at, "key_id") or str(self.access_key_id)
        return _said(aws.iam.deactivate(user, key_id), f"deactivated access key {key_id} of {user}")

    def verify(self, aws: Any, at: Acting) -> Verification:
        user = str(self.user or "")
        key_id = _key_id(self, at, "access_key_id")
        found = next((key for key in aws.iam.user_keys(user) if key.key_id == key_id), None)
        if found is None:
            return Verification(fixed=True, seen=f"access key {key_id} of {user} no longer exists")
        if found.active:
            return Verification(fixed=False, seen=f"access key {key_id} of {user} is still active")
        return Verification(fixed=True, seen=f"access key {key_id} of {user} is inactive")


class SetSecretRotation(Action):
    """RotateSecret with the policy's schedule; Secrets Manager requires the caller may invoke the rotation function."""

    type: Literal["set_secret_rotation"] = "set_secret_rotation"
    secret_id: str | None = None
    rotation_lambda: str | None = None
    rotation_rules: dict[str, Any] = Field(default_factory=dict)
    FIXES = True
    IAM = frozenset({"secretsmanager:RotateSecret", "lambda:InvokeFunction"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        """The secret as re-read (its own rotation function is kept); RotateSecret's ClientRequestToken comes from
        the event id, so a resent call is the same request."""
        secret = at.live
        token = deterministic_id(at.event_id, secret.arn, self.type)
        outcome = aws.secrets.set_rotation(secret, dict(self.rotation_rules), token=token)
        return _said(outcome, f"set the rotation schedule of {secret.arn}")

    def verify(self, aws: Any, at: Acting) -> Verification:
        secret_id = str(getattr(at.live, "arn", None) or self.secret_id or at.resource)
        secret = aws.secrets.secret(secret_id)
        if secret is None:
            return Verification(fixed=True, seen=f"secret {secret_id} no longer exists")
        if not secret.rotation_enabled:
            return Verification(fixed=False, seen=f"secret {secret_id}: rotation still off")
        return Verification(fixed=True, seen=f"secret {secret_id}: rotation on")


def _live_id(at: Acting, name: str) -> str | None:
    """An id from the re-read resource when the runner has one (it is what AWS calls the resource now)."""
    value = getattr(at.live, name, None)
    return str(value) if value else None


def _said(outcome: Outcome, done: str) -> Outcome:
    """An adapter's outcome with the sentence a finding reports when the change went through."""
    return replace(outcome, done=done) if outcome.ok and not outcome.done else outcome


def _key_id(action: Action, at: Acting, field: str) -> str:
    """The key the re-read is about: as re-read before acting, else the action's, else the decision's resource."""
    live = getattr(at.live, "key_id", None)
    return str(live or getattr(action, field, None) or at.resource)
