"""The Spot construct as deployed: rules, reserved concurrency, a least-privilege role, the checkpoint bucket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack, assertions

from governor.policy import parse_policy
from governor.registry import REGISTRY
from infra.constructs.shared import SharedResources
from infra.constructs.spot import Spot
from infra.settings import Settings
from tests.infra.conftest import Synth

HANDLER = "governor.spot.handler.lambda_handler"


def spot_function(synth: Synth) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical_id, resource)
        for logical_id, resource in synth.resources("AWS::Lambda::Function").items()
        if resource["Properties"].get("Handler") == HANDLER
    ]
    return found


def statements_of(template: dict[str, Any], function_id: str) -> list[dict[str, Any]]:
    role = template["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"].get("Roles", [])
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def role_actions(template: dict[str, Any], function_id: str) -> set[str]:
    """Every action granted to the function's role, through the policies attached to it."""
    actions: set[str] = set()
    for statement in statements_of(template, function_id):
        granted = statement["Action"]
        actions.update([granted] if isinstance(granted, str) else granted)
    return actions


def rule_targeting(synth: Synth, function_id: str, detail_type: str) -> dict[str, Any]:
    for rule in synth.resources("AWS::Events::Rule").values():
        pattern = rule["Properties"].get("EventPattern", {})
        targets = [t["Arn"] for t in rule["Properties"].get("Targets", [])]
        if detail_type in pattern.get("detail-type", []) and {"Fn::GetAtt": [function_id, "Arn"]} in targets:
            return pattern
    raise AssertionError(f"no rule sends {detail_type} to the spot function")


def test_spot_function_reserves_no_concurrency_by_default_and_has_its_own_dlq(synth: Synth) -> None:
    """Reserving fails the deploy unless the account keeps 100 unreserved executions: opt-in only."""
    _, function = spot_function(synth)
    props = function["Properties"]
    assert "ReservedConcurrentExecutions" not in props
    assert props["Timeout"] == 180  # a faulted attempt needed 126 s in the soak; the checkpoint itself goes first
    policy = json.loads(props["Environment"]["Variables"]["GOVERNOR_POLICY"])
    assert set(policy) == {"fleet", "ledger", "spot"}
    assert "spot" in synth.stack.functions


def test_rules_route_the_three_ec2_events_and_only_final_states(synth: Synth) -> None:
    function_id, _ = spot_function(synth)
    warning = rule_targeting(synth, function_id, "EC2 Spot Instance Interruption Warning")
    assert warning["source"] == ["aws.ec2"]
    assert "EC2 Instance Rebalance Recommendation" in warning["detail-type"]
    state = rule_targeting(synth, function_id, "EC2 Instance State-change Notification")
    assert sorted(state["detail"]["state"]) == ["stopped", "terminated"]
    status = rule_targeting(synth, function_id, "EC2 Command Invocation Status-change Notification")
    assert status["source"] == ["aws.ssm"] and "Success" in status["detail"]["status"]


def test_role_grants_only_declared_actions_and_no_relaunch_by_default(synth: Synth) -> None:
    function_id, _ = spot_function(synth)
    granted = {
        a
        for a in role_actions(synth.json, function_id)
        if a.split(":")[0] in {"ec2", "ssm", "elasticloadbalancing", "autoscaling", "iam"}
    }
    assert granted <= REGISTRY["spot"].permissions(synth.stack.policy)
    assert "ssm:SendCommand" in granted and "elasticloadbalancing:DeregisterTargets" in granted
    assert "autoscaling:CompleteLifecycleAction" in granted
    assert not granted & {"ec2:RunInstances", "iam:PassRole", "ec2:CreateTags"}  # spot.replacement: none


def test_send_command_is_limited_to_the_shell_document_and_instances(synth: Synth) -> None:
    function_id, _ = spot_function(synth)
    document, instances = sorted(
        (s for s in statements_of(synth.json, function_id) if s["Action"] == "ssm:SendCommand"),
        key=lambda s: "instance" in json.dumps(s["Resource"]),
    )
    assert "::document/AWS-RunShellScript" in json.dumps(document["Resource"]) and "Condition" not in document
    assert ":instance/*" in json.dumps(instances["Resource"])
    assert instances["Condition"] == {"StringEquals": {"ssm:resourceTag/gpu-fleet": "true"}}


def checkpoint_bucket(synth: Synth) -> dict[str, Any]:
    (bucket,) = [b for k, b in synth.resources("AWS::S3::Bucket").items() if k.startswith("SpotCheckpointsBucket")]
    return bucket["Properties"]


def test_checkpoint_bucket_is_versioned_kms_private_logged_with_version_expiry(synth: Synth) -> None:
    props = checkpoint_bucket(synth)
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms" and sse["BucketKeyEnabled"]
    key_ref = sse["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]["Fn::GetAtt"][0]
    assert synth.json["Resources"][key_ref]["Type"] == "AWS::KMS::Key" and key_ref.startswith("Shared")
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["LoggingConfiguration"]["LogFilePrefix"] == "checkpoint-bucket/"
    (rule,) = [r for r in props["LifecycleConfiguration"]["Rules"] if r["Id"] == "ExpireOldCheckpointVersions"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7, "NewerNoncurrentVersions": 3}


def test_every_spot_bucket_refuses_plain_http(synth: Synth) -> None:
    denied = set()
    for policy in synth.resources("AWS::S3::BucketPolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false":
                denied.add(policy["Properties"]["Bucket"]["Ref"])
    spot_buckets = {k for k in synth.resources("AWS::S3::Bucket") if k.startswith("SpotCheckpoints")}
    assert len(spot_buckets) == 2 and spot_buckets <= denied


def test_managed_policy_scopes_each_team_to_its_own_prefix(synth: Synth) -> None:
    (policy,) = [
        p for k, p in synth.resources("AWS::IAM::ManagedPolicy").items() if k.startswith("SpotCheckpointsAccess")
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    objects = json.dumps(statements["ReadWriteOwnTeamPrefix"]["Resource"])
    assert "/checkpoints/${aws:PrincipalTag/team}/*" in objects
    listing = statements["ListOwnTeamPrefix"]["Condition"]["StringLike"]["s3:prefix"]
    assert "checkpoints/${aws:PrincipalTag/team}/*" in listing
    assert "kms:ViaService" in json.dumps(statements["ProjectKeyThroughS3Only"]["Condition"])
    outputs = synth.json["Outputs"]
    assert any(k.startswith("SpotCheckpointBucketName") for k in outputs)
    assert any(k.startswith("SpotCheckpointPolicyArn") for k in outputs)


@pytest.fixture(scope="module")
def relaunching() -> dict[str, Any]:
    """A small stack (not the app) with replacement on and no checkpoint bucket, to see the extra grants."""
    policy = parse_policy({"spot": {"enforce": True, "replacement": "spot", "checkpoint_bucket": {"create": False}}})
    stack = Stack(App(), "SpotOnly")
    shared = SharedResources(stack, "Shared", policy=policy, bus_name="governor")
    Spot(stack, "Spot", shared=shared, policy=policy, settings=Settings(), functions={})
    return assertions.Template.from_stack(stack).to_json()


def test_replacement_grants_run_instances_for_gpu_types_only(relaunching: dict[str, Any]) -> None:
    statements = [
        s
        for r in relaunching["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    launch = [s for s in statements if s["Action"] == "ec2:RunInstances" and "Condition" in s]
    patterns = launch[0]["Condition"]["StringLike"]["ec2:InstanceType"] if launch else []
    assert patterns == parse_policy({}).fleet.iam_instance_type_patterns()
    assert "g5*" in patterns and "g*" not in patterns  # g* would also let it launch gr6 instances
    (passing,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    (tagging,) = [s for s in statements if s["Action"] == "ec2:CreateTags"]
    assert tagging["Condition"] == {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
    assert not [r for r in relaunching["Resources"].values() if r["Type"] == "AWS::S3::Bucket"]
