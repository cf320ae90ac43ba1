"""The lifecycle function's infrastructure: its three triggers and a role that can only tag GPU instances' ownership."""

from __future__ import annotations

import json
from typing import Any

from governor.policy import parse_policy
from governor.registry import REGISTRY
from tests.infra.conftest import Synth
from tests.infra.policy_eval import ACCOUNT, REGION, role_policy

INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
OWNERSHIP_TAGS = ["governor:creator", "governor:launched-at"]


def _function(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(logical_id, function)] = [
        (k, v)
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == "governor.lifecycle.handler.lambda_handler"
    ]
    return logical_id, function


def _rules_for(synth: Synth, function_id: str) -> list[dict[str, Any]]:
    return [
        rule["Properties"]["EventPattern"]
        for rule in synth.resources("AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]} for t in rule["Properties"]["Targets"])
    ]


def test_function_carries_the_lifecycle_policy(synth: Synth) -> None:
    _, function = _function(synth)
    assert '"lifecycle":' in function["Properties"]["Environment"]["Variables"]["GOVERNOR_POLICY"]
    # sessions are priced from the policy's price book (only what differs from the defaults is written)
    carried = parse_policy(json.loads(function["Properties"]["Environment"]["Variables"]["GOVERNOR_POLICY"]))
    assert carried.pricing == synth.stack.policy.pricing and carried.pricing.prices["p4d.24xlarge"].gpus == 8


def test_triggers_successful_gpu_launches_and_state_changes(synth: Synth) -> None:
    function_id, _ = _function(synth)
    rules = _rules_for(synth, function_id)
    patterns = {p["detail-type"][0]: p for p in rules if p["detail"].get("eventName") != ["CreateTags"]}
    launch = patterns["AWS API Call via CloudTrail"]["detail"]
    assert launch["eventName"] == ["RunInstances"] and launch["errorCode"] == [{"exists": False}]
    prefixes = launch["responseElements"]["instancesSet"]["items"]["instanceType"]
    assert prefixes == [{"prefix": f} for f in ("p", "g", "trn", "inf", "dl")]
    states = patterns["EC2 Instance State-change Notification"]["detail"]["state"]
    assert sorted(states) == ["running", "shutting-down", "stopped", "stopping", "terminated"]
    (tags,) = [p["detail"] for p in rules if p["detail"].get("eventName") == ["CreateTags"]]
    assert tags["errorCode"] == [{"exists": False}]
    assert "governor:keep-until" in tags["requestParameters"]["tagSet"]["items"]["key"]


def test_daily_reconciliation_schedule(synth: Synth) -> None:
    function_id, _ = _function(synth)
    [schedule] = [
        s["Properties"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]
    assert schedule["ScheduleExpression"] == "rate(1 day)"
    assert "DeadLetterConfig" in schedule["Target"]


def test_role_can_only_add_ownership_tags_to_gpu_instances(synth: Synth) -> None:
    _, function = _function(synth)
    role = role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])
    gpu = {"ec2:InstanceType": "g5.xlarge", "aws:TagKeys": OWNERSHIP_TAGS}
    assert role.allows("ec2:CreateTags", INSTANCE, **gpu)
    assert role.allows("ec2:CreateTags", INSTANCE, **{**gpu, "ec2:InstanceType": "p4d.24xlarge"})
    assert not role.allows("ec2:CreateTags", INSTANCE, **{**gpu, "ec2:InstanceType": "m5.large"})
    assert not role.allows("ec2:CreateTags", INSTANCE, **{**gpu, "aws:TagKeys": ["team"]})
    assert not role.allows("ec2:CreateTags", f"arn:aws:ec2:{REGION}:{ACCOUNT}:volume/vol-1", **gpu)
    assert role.allows("ec2:DescribeInstances")
    for action in ("ec2:StopInstances", "ec2:TerminateInstances", "ec2:DeleteTags", "pricing:GetProducts"):
        assert not role.allows(action, INSTANCE, **gpu), action


def test_role_grants_exactly_the_actions_the_code_declares(synth: Synth) -> None:
    _, function = _function(synth)
    role = role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])
    capability = {a for a in role.granted_actions() if a.split(":")[0] in ("ec2", "pricing")}
    assert capability == REGISTRY["lifecycle"].permissions(synth.stack.policy)
    assert capability == {"ec2:DescribeInstances", "ec2:CreateTags"}  # pricing only with use_price_list_api
