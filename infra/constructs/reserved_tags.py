"""Optional: reserve the tag keys that steer the governor (``fleet.fleet_tags`` and ``governor:*``) to named principals.

Whoever can write ``gpu-fleet=true`` decides which instances the governor may send commands to, and whoever can write
``governor:exempt`` asks it to look away. The governor never trusts those tags alone (exemptions end and are recorded,
a group is changed only when its interfaces prove it is the fleet's), but the strongest bound is that nobody else can
write them. One document states it, used twice:

- organisation mode with ``organization.reserve_tags``: a service control policy the hub creates and attaches to the
  organisation's OUs, exempting the governor's own roles (hub and spokes) and ``organization.tag_admins``;
- a single account: the managed policy ``ReservedTagKeys`` every stack holds (it does nothing until attached): attach
  it to the roles and groups people use; the governor's roles and the named admins are exempt.

Tag policies (the Organizations policy type) cannot say *who* may write a key, only which values are allowed, so the
reservation is a deny on the tagging calls of every service whose tags the governor reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from governor.policy import Policy

#: Every call that writes or removes a tag on a resource whose tags the governor reads: EC2 (instances, security
#: groups; RunInstances' tag specifications are authorised as ec2:CreateTags), IAM users and roles, KMS keys,
#: secrets, target groups and Auto Scaling groups.
TAGGING_ACTIONS = (
    "autoscaling:CreateOrUpdateTags",
    "autoscaling:DeleteTags",
    "ec2:CreateTags",
    "ec2:DeleteTags",
    "elasticloadbalancing:AddTags",
    "elasticloadbalancing:RemoveTags",
    "iam:TagRole",
    "iam:TagUser",
    "iam:UntagRole",
    "iam:UntagUser",
    "kms:TagResource",
    "kms:UntagResource",
    "secretsmanager:TagResource",
    "secretsmanager:UntagResource",
)


def reserved_keys(policy: Policy) -> list[str]:
    """The fleet tag keys and every ``governor:`` key (exemptions, snoozes, command names, the governor's marks)."""
    return sorted({*policy.fleet.fleet_tags, "governor:*"})


def reserved_tag_statement(policy: Policy, allowed_principals: Sequence[Any]) -> dict[str, Any]:
    """One Deny: the tagging calls, when they name a reserved key, by anyone but ``allowed_principals`` (ARN patterns).

    ``aws:TagKeys`` is listed for every one of these actions (Service Authorization Reference); ``aws:PrincipalArn``
    is global, and for an assumed role it is the role's ARN, so a pattern names a role whatever its session.
    """
    return {
        "Sid": "ReserveGovernorTagKeys",
        "Effect": "Deny",
        "Action": list(TAGGING_ACTIONS),
        "Resource": "*",
        "Condition": {
            "ForAnyValue:StringLike": {"aws:TagKeys": reserved_keys(policy)},
            "ArnNotLike": {"aws:PrincipalArn": list(allowed_principals)},
        },
    }


def reserved_tag_document(policy: Policy, allowed_principals: Sequence[Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [reserved_tag_statement(policy, allowed_principals)]}
