"""The keys enforcer's infrastructure: triggers, an IAM role holding exactly what its code calls, and the stack's
own key and secrets complying with the same keys policy."""

from __future__ import annotations

from typing import Any

from governor.keys.events import RULE_EVENTS
from governor.policy import Policy
from governor.registry import REGISTRY
from tests.infra.conftest import Synth

DECLARED = REGISTRY["keys"].permissions(Policy())
UNSCOPABLE = {"kms:ListKeys", "iam:GenerateCredentialReport", "iam:GetCredentialReport", "secretsmanager:ListSecrets"}


def _keys_function(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(logical_id, function)] = [
        (k, v)
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == "governor.keys.handler.lambda_handler"
    ]
    return logical_id, function


def _statements_of_role(synth: Synth, role_id: str) -> list[dict[str, Any]]:
    found = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def test_function_gets_the_keys_policy_and_runs_long_enough_for_a_sweep(synth: Synth) -> None:
    _, function = _keys_function(synth)
    props = function["Properties"]
    assert '"keys":' in props["Environment"]["Variables"]["GOVERNOR_POLICY"]
    assert props["Timeout"] == 300


def test_role_grants_exactly_what_the_adapters_declare(synth: Synth) -> None:
    _, function = _keys_function(synth)
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [s for s in _statements_of_role(synth, role_id) if s["Effect"] == "Allow"]
    capability = {
        a for s in statements for a in _actions(s) if a.split(":")[0] in ("kms", "iam", "secretsmanager", "lambda")
    }
    shared = {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:GenerateDataKey*", "kms:ReEncrypt*"}
    assert capability - shared == DECLARED
    for statement in statements:
        if statement["Resource"] == "*":
            assert _actions(statement) & DECLARED <= UNSCOPABLE
        elif _actions(statement) & DECLARED:
            arn = "".join(p if isinstance(p, str) else "" for p in statement["Resource"]["Fn::Join"][1])
            assert arn.endswith((":key/*", ":user/*", ":secret:*", ":function:*")), arn
    unscoped = [s for s in statements if s["Resource"] == "*" and _actions(s) & DECLARED]
    assert unscoped and set().union(*(_actions(s) for s in unscoped)) == UNSCOPABLE


def test_daily_schedule_and_cloudtrail_rule(synth: Synth) -> None:
    function_id, _ = _keys_function(synth)
    schedules = [
        s
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]
    assert [s["Properties"]["ScheduleExpression"] for s in schedules] == ["rate(1 day)"]
    rules = [
        r["Properties"]["EventPattern"]
        for r in synth.resources("AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]} for t in r["Properties"]["Targets"])
    ]
    assert rules == [
        {
            "detail": {
                "eventName": sorted({n for names in RULE_EVENTS.values() for n in names}),
                "errorCode": [{"exists": False}],
            },
            "detail-type": ["AWS API Call via CloudTrail"],
            "source": ["aws.iam", "aws.kms", "aws.secretsmanager"],
        }
    ]


def test_the_stacks_own_keys_rotate_within_the_policy(synth: Synth) -> None:
    limit = synth.stack.policy.keys.kms_max_rotation_days
    keys = synth.resources("AWS::KMS::Key")
    assert keys
    for logical_id, key in keys.items():
        props = key["Properties"]
        if props.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
            continue
        assert props.get("EnableKeyRotation") is True, logical_id
        assert props.get("RotationPeriodInDays", 365) <= limit, logical_id


def test_the_stacks_own_secrets_rotate_within_the_policy(synth: Synth) -> None:
    limit = synth.stack.policy.keys.secret_max_rotation_days
    schedules = synth.resources("AWS::SecretsManager::RotationSchedule").values()
    for secret_id in synth.resources("AWS::SecretsManager::Secret"):
        rules = [
            s["Properties"].get("RotationRules", {})
            for s in schedules
            if s["Properties"]["SecretId"] == {"Ref": secret_id}
        ]
        assert rules, f"{secret_id} has no rotation schedule"
        assert all(r.get("AutomaticallyAfterDays", limit + 1) <= limit for r in rules), secret_id
