"""The network enforcer's infrastructure: its six-call CloudTrail rule, the daily sweep, and a role that can revoke
and remove public addresses in this account, and nothing else."""

from __future__ import annotations

import json
from typing import Any

from governor.capability import BASE_PERMISSIONS
from governor.network.events import EVENT_NAMES
from governor.registry import REGISTRY
from tests.infra.conftest import Synth
from tests.infra.policy_eval import RolePolicy, role_policy

ARN = "arn:aws:ec2:us-east-1:123456789012"
OTHER_ACCOUNT = "arn:aws:ec2:us-east-1:210987654321"


def _function(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(logical_id, function)] = [
        (k, v)
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == "governor.network.handler.lambda_handler"
    ]
    return logical_id, function


def _role(synth: Synth) -> RolePolicy:
    _, function = _function(synth)
    return role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_function_gets_the_network_policy(synth: Synth) -> None:
    _, function = _function(synth)
    variables = function["Properties"]["Environment"]["Variables"]
    assert '"network":' in variables["GOVERNOR_POLICY"] and '"idle":' not in variables["GOVERNOR_POLICY"]
    assert synth.stack.functions["network"].function.node.default_child is not None


def test_cloudtrail_rule_routes_the_six_calls_and_the_sweep_is_daily(synth: Synth) -> None:
    function_id, _ = _function(synth)
    target = {"Fn::GetAtt": [function_id, "Arn"]}
    rules = [
        r["Properties"]["EventPattern"]
        for r in synth.resources("AWS::Events::Rule").values()
        if any(t["Arn"] == target for t in r["Properties"]["Targets"])
    ]
    assert rules == [
        {
            "detail": {
                "errorCode": [{"exists": False}],
                "eventName": sorted(EVENT_NAMES),
                "eventSource": ["ec2.amazonaws.com"],
            },
            "detail-type": ["AWS API Call via CloudTrail"],
            "source": ["aws.ec2"],
        }
    ]
    assert len(EVENT_NAMES) == 6
    schedules = [
        s["Properties"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == target
    ]
    assert [s["ScheduleExpression"] for s in schedules] == ["rate(1 day)"]
    assert "aws.scheduler" in json.dumps(schedules[0]["Target"]["Input"])  # parsed with the same envelope


def test_role_grants_exactly_what_the_registry_declares(synth: Synth) -> None:
    granted = {a for a in _role(synth).granted_actions() if a not in BASE_PERMISSIONS}
    assert granted == REGISTRY["network"].permissions(synth.stack.policy) - BASE_PERMISSIONS
    assert granted == {
        "ec2:DescribeAddresses",
        "ec2:DescribeInstances",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroupRules",
        "ec2:DescribeSecurityGroups",
        "ec2:DisassociateAddress",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:RevokeSecurityGroupIngress",
    }


def test_role_revokes_and_removes_addresses_only_in_this_account(synth: Synth) -> None:
    role = _role(synth)
    assert role.allows("ec2:RevokeSecurityGroupIngress", f"{ARN}:security-group/sg-0a1b2c3d")
    assert not role.allows("ec2:RevokeSecurityGroupIngress", f"{OTHER_ACCOUNT}:security-group/sg-0a1b2c3d")
    assert role.allows("ec2:DisassociateAddress", f"{ARN}:elastic-ip/eipalloc-0a1b")
    assert role.allows("ec2:ModifyNetworkInterfaceAttribute", f"{ARN}:network-interface/eni-0a1b")
    assert role.allows("ec2:DescribeSecurityGroupRules") and role.allows("ec2:DescribeInstances")
    # swapping an interface's groups needs the security-group resource for this action: not granted
    assert not role.allows("ec2:ModifyNetworkInterfaceAttribute", f"{ARN}:security-group/sg-0a1b2c3d")
    for action in (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:DeleteSecurityGroup",
        "ec2:ModifySecurityGroupRules",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:ReleaseAddress",
        "ec2:AssociateAddress",
        "ec2:StopInstances",
        "ec2:TerminateInstances",
        "ec2:ModifyInstanceAttribute",
    ):
        assert not role.allows(action, f"{ARN}:security-group/sg-0a1b2c3d"), action
        assert not role.allows(action, f"{ARN}:instance/i-0a1b2c3d"), action
