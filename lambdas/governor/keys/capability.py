"""The ``keys`` capability, declared: KMS keys, IAM access keys and secrets kept rotated."""

from __future__ import annotations

from typing import Literal

from governor.capability import Capability, Trigger, Uses
from governor.core_policy import CorePolicy, section_of
from governor.domain.actions import Notify
from governor.keys.actions import DeactivateAccessKey, EnableKeyRotation, RotateKey, SetSecretRotation
from governor.keys.policy import KeysPolicy

#: Its sweep's parts, in order (its Scheduled Event's ``detail.kinds``).
PARTS: tuple[Literal["kms", "access_keys", "secrets"], ...] = ("kms", "access_keys", "secrets")


def _enforcing(policy: CorePolicy) -> bool:
    keys = section_of(policy, "keys", KeysPolicy)
    return any(keys.enforces(kind) for kind in PARTS)


CAPABILITY = Capability(
    name="keys",
    stale_outbox="own",
    demo="governor_cli.demo.capabilities.keys",
    construct="infra.constructs.keys:KeysEnforcer",
    construct_id="Keys",
    acknowledgeable=True,
    sweep_parts=PARTS,
    account_wide_parts=frozenset({"access_keys"}),
    member_accounts=True,
    fans_out=True,
    findings="governor.keys.findings",
    section="keys",
    section_model=KeysPolicy,
    description="Keeps KMS keys, IAM access keys and secrets rotated within the keys policy",
    triggers=(
        Trigger(
            "Sweep",
            "schedule",
            "daily sweep of KMS keys, IAM access keys (credential report) and secrets",
            schedule="keys.schedule",
        ),
        Trigger(
            "CloudTrailCalls",
            "rule",
            "Successful KMS, IAM (us-east-1 only) and Secrets Manager calls that change rotation or credentials",
        ),
    ),
    uses=(Uses("governor.keys.kms"), Uses("governor.keys.iam_keys"), Uses("governor.keys.secrets")),
    actions=(EnableKeyRotation, RotateKey, DeactivateAccessKey, SetSecretRotation, Notify),
    enforcing=_enforcing,
)
