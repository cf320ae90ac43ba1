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
#: Calls that create a resource with its tags, or a thing that tags later on the caller's behalf: an Auto Scaling
#: group's tags reach its instances through the service-linked role (which no identity policy or SCP binds), and the
#: user and key creations carry their tags in the same call. Each supports ``aws:TagKeys`` for the tags in the
#: request (Service Authorization Reference; ``tests/infra/test_sar.py`` checks it). ``ec2:CreateLaunchTemplate``'s
#: ``aws:TagKeys`` names the *template's own* tags only: the instance tags in its ``LaunchTemplateData``, and every
#: ``CreateLaunchTemplateVersion`` / ``UpdateAutoScalingGroup``, have no condition key at all, so the governor
#: distrusts what a service writes on a launch instead (``governor.domain.tag_exemptions``, docs/security.md).
CREATING_ACTIONS = (
    "autoscaling:CreateAutoScalingGroup",
    "ec2:CreateLaunchTemplate",
    "elasticloadbalancing:CreateTargetGroup",
    "iam:CreateRole",
    "iam:CreateUser",
    "kms:CreateKey",
    "secretsmanager:CreateSecret",
)


def reserved_keys(policy: Policy) -> list[str]:
    """The fleet tag keys and every ``governor:`` key (exemptions, snoozes, command names, the governor's marks)."""
    return sorted({*policy.fleet.fleet_tags, "governor:*"})


def reserved_tag_statements(policy: Policy, allowed_principals: Sequence[Any]) -> list[dict[str, Any]]:
    """Two Denies for anyone but ``allowed_principals`` (ARN patterns): the tagging and creating calls when they name
    a reserved key, and ``ec2:DeleteTags`` naming no key at all (EC2 then deletes *every* tag, reserved ones included,
    and the request carries no ``aws:TagKeys`` for the first Deny to match).

    ``aws:TagKeys`` is listed for every one of these actions (Service Authorization Reference); ``aws:PrincipalArn``
    is global, and for an assumed role it is the role's ARN, so a pattern names a role whatever its session.
    """
    others = {"ArnNotLike": {"aws:PrincipalArn": list(allowed_principals)}}
    return [
        {
            "Sid": "ReserveGovernorTagKeys",
            "Effect": "Deny",
            "Action": [*TAGGING_ACTIONS, *CREATING_ACTIONS],
            "Resource": "*",
            "Condition": {"ForAnyValue:StringLike": {"aws:TagKeys": reserved_keys(policy)}, **others},
        },
        {
            "Sid": "NoDeletingEveryTag",
            "Effect": "Deny",
            "Action": ["ec2:DeleteTags"],
            "Resource": "*",
            "Condition": {"Null": {"aws:TagKeys": "true"}, **others},
        },
    ]


def reserved_tag_document(policy: Policy, allowed_principals: Sequence[Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": reserved_tag_statements(policy, allowed_principals)}
