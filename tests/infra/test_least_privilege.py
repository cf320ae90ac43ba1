"""Least privilege, proven on the synthesized stack: each function's role grants exactly what its registry entry
declares for the policy (``governor.registry``: adapters' reads plus its typed actions' permissions) plus the shared
runtime's base grants, nothing missing and nothing extra (the same check with every option on is in ``test_nist.py``),
destructive EC2 actions are held to GPU instance types, tag writes to ``governor:*`` keys, ``*`` resources only where
AWS offers no resource-level permission, and nothing secret sits in the template or the functions' environment."""

from __future__ import annotations

import json
from typing import Any

from governor.capability import BASE_PERMISSIONS
from governor.policy import Policy
from governor.registry import REGISTRY
from governor_cli.testing.secrets import find_secrets
from tests.infra.conftest import Synth
from tests.infra.policy_eval import ACCOUNT, REGION, RolePolicy, role_policy, wildcard_match

INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
SCHEDULING = {
    "ec2:StopInstances",
    "ec2:TerminateInstances",
    "ec2:StartInstances",
    "ec2:RebootInstances",
    "ec2:RunInstances",
}
TAG_WRITES = {"ec2:CreateTags", "ec2:DeleteTags"}
NOT_GPU = ["m5.large", "c6i.xlarge", "t3.micro", "r7g.2xlarge", "x2idn.16xlarge", "hpc7g.16xlarge", "mac2.metal"]
# Actions for which AWS offers no resource-level permission (Service Authorization Reference): '*' is the only choice.
UNSCOPABLE_PREFIXES = ("ec2:Describe", "autoscaling:Describe", "elasticloadbalancing:Describe")
UNSCOPABLE = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "cloudwatch:GetMetricData",
    "cloudwatch:GetMetricWidgetImage",
    "cloudwatch:ListMetrics",
    "pricing:GetProducts",
    "iam:GenerateCredentialReport",
    "iam:GetCredentialReport",
    "kms:ListKeys",
    "kms:ListAliases",
    "secretsmanager:ListSecrets",
    "ssm:GetCommandInvocation",
    "ssm:ListCommandInvocations",
    "ssm:ListCommands",
    "ssm:DescribeInstanceInformation",
    "tag:GetResources",
    "athena:ListWorkGroups",
    "sagemaker:ListClusters",  # SAR: no resource type for ListClusters
}
SENSITIVE_NAMES = ("SECRET", "TOKEN", "PASSWORD", "WEBHOOK", "PRIVATE", "CREDENTIAL")


def _functions(synth: Synth) -> dict[str, dict[str, Any]]:
    """Governor functions by handler module name: logical id, role logical id, environment."""
    found: dict[str, dict[str, Any]] = {}
    for logical_id, resource in synth.resources("AWS::Lambda::Function").items():
        props = resource["Properties"]
        handler = props.get("Handler", "")
        if not handler.endswith(".handler.lambda_handler"):
            continue
        name = handler.split(".")[1]
        found[name] = {
            "id": logical_id,
            "role": props["Role"]["Fn::GetAtt"][0],
            "env": props.get("Environment", {}).get("Variables", {}),
            "handler": handler,
        }
    return found


def _statements(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    """Every identity-policy statement in the template, resolved, with the role it belongs to."""
    roles = [k for k, v in synth.json["Resources"].items() if v["Type"] == "AWS::IAM::Role"]
    return [(role, s) for role in roles for s in role_policy(synth.json, role).statements]


def _actions(statement: dict[str, Any]) -> list[str]:
    value = statement.get("Action", [])
    return value if isinstance(value, list) else [value]


def registry_mismatches(template: dict[str, Any], policy: Policy) -> list[str]:
    """Each governor function's role against ``registry[function].permissions(policy)`` + base grants, both ways."""
    problems = []
    functions = _functions_of(template)
    if set(functions) != set(REGISTRY):
        problems.append(f"functions {sorted(functions)} but registry entries {sorted(REGISTRY)}")
    for name, function in sorted(functions.items()):
        registered = REGISTRY[name].permissions(policy) | BASE_PERMISSIONS
        granted = role_policy(template, function["role"]).granted_actions()
        problems += [
            f"{name}: grants {a}, which its registry entry does not list" for a in sorted(granted - registered)
        ]
        problems += [
            f"{name}: its registry entry lists {a}, which its role does not grant" for a in sorted(registered - granted)
        ]
    return problems


def _functions_of(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for resource in template["Resources"].values():
        handler = resource["Properties"].get("Handler", "") if resource["Type"] == "AWS::Lambda::Function" else ""
        if handler.endswith(".handler.lambda_handler"):
            found[handler.split(".")[1]] = {"role": resource["Properties"]["Role"]["Fn::GetAtt"][0]}
    return found


def test_every_function_is_a_registered_capability(synth: Synth) -> None:
    functions = _functions(synth)
    assert set(functions) == set(REGISTRY), "the stack's functions and the registry disagree"
    for name, function in functions.items():
        assert function["handler"] == REGISTRY[name].handler
    assert set(functions) == set(synth.stack.functions), "stack.functions and the template disagree"


def test_each_role_grants_exactly_its_registered_permissions(synth: Synth) -> None:
    problems = registry_mismatches(synth.json, synth.stack.policy)
    assert not problems, "\n".join(problems)


def test_the_check_notices_an_extra_and_a_missing_grant(synth: Synth) -> None:
    """The comparison is not vacuous: a grant nobody registered, or a registered action left out, is reported."""
    template = json.loads(json.dumps(synth.json))
    role = _functions_of(template)["network"]["role"]
    policy = next(
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
    )
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    revoke = next(s for s in statements if s["Action"] == "ec2:RevokeSecurityGroupIngress")
    revoke["Action"] = "ec2:AuthorizeSecurityGroupIngress"
    problems = registry_mismatches(template, synth.stack.policy)
    assert "network: grants ec2:AuthorizeSecurityGroupIngress, which its registry entry does not list" in problems
    assert "network: its registry entry lists ec2:RevokeSecurityGroupIngress, which its role does not grant" in problems


def test_instance_changes_are_held_to_gpu_instance_types(synth: Synth) -> None:
    families = synth.stack.policy.fleet.gpu_families
    seen = 0
    for role, statement in _statements(synth):
        actions = set(_actions(statement)) & SCHEDULING
        if not actions or statement["Effect"] != "Allow":
            continue
        seen += 1
        conditions = statement.get("Condition", {})
        types = conditions.get("StringLike", {}).get("ec2:InstanceType") or conditions.get("StringEquals", {}).get(
            "ec2:InstanceType"
        )
        assert types, f"{role}: {sorted(actions)} without an ec2:InstanceType condition"
        patterns = types if isinstance(types, list) else [types]
        for instance_type in NOT_GPU:
            assert not any(wildcard_match(p, instance_type) for p in patterns), (
                f"{role}: {patterns} match {instance_type}"
            )
        for family in families:
            assert any(wildcard_match(p, f"{family}5.xlarge") for p in patterns) or "ec2:RunInstances" in actions, (
                f"{role}: {sorted(actions)} cannot reach the {family} family"
            )
        policy = RolePolicy(role, [statement])
        for action in actions:
            assert not policy.allows(action, INSTANCE, **{"ec2:InstanceType": "m5.large"}), f"{role}: {action} on m5"
    assert seen, "no statement grants an EC2 instance change: the check would prove nothing"


def test_tag_writes_are_held_to_governor_keys(synth: Synth) -> None:
    problems = []
    for role, statement in _statements(synth):
        actions = set(_actions(statement)) & TAG_WRITES
        if not actions or statement["Effect"] != "Allow":
            continue
        conditions = statement.get("Condition", {})
        if conditions.get("StringEquals", {}).get("ec2:CreateAction"):
            continue  # tag-on-create of an instance the function launches itself (RunInstances), not a tag write
        keys: list[str] = []
        for operator in ("ForAllValues:StringEquals", "ForAllValues:StringLike"):
            value = conditions.get(operator, {}).get("aws:TagKeys")
            keys.extend(value if isinstance(value, list) else [value] if value else [])
        if not keys:
            problems.append(f"{role}: {sorted(actions)} without an aws:TagKeys condition")
        elif not all(k.startswith("governor:") for k in keys):
            problems.append(f"{role}: {sorted(actions)} may write non-governor tag keys {keys}")
    assert not problems, "\n".join(problems)


def test_wildcard_resources_only_where_aws_cannot_scope(synth: Synth) -> None:
    problems = []
    for role, statement in _statements(synth):
        resources = statement.get("Resource", [])
        if statement["Effect"] != "Allow" or "*" not in (resources if isinstance(resources, list) else [resources]):
            continue
        for action in _actions(statement):
            if action not in UNSCOPABLE and not action.startswith(UNSCOPABLE_PREFIXES):
                problems.append(f"{role}: {action} on '*' although AWS supports resource-level permissions for it")
    assert not problems, "\n".join(problems)


def test_no_secret_in_function_environment(synth: Synth) -> None:
    for name, function in _functions(synth).items():
        for key, value in function["env"].items():
            text = value if isinstance(value, str) else json.dumps(value)
            assert not find_secrets(text), f"{name}: {key} holds a secret-looking value"
            if any(word in key.upper() for word in SENSITIVE_NAMES):
                assert key.upper().endswith(("_NAME", "_ARN", "_ID")), f"{name}: {key} looks like a secret itself"


def test_template_and_assets_hold_no_secret_looking_value(synth: Synth) -> None:
    hits = find_secrets(json.dumps(synth.json))
    assert not hits, f"secret-looking values in the template: {hits}"


def test_each_function_has_the_triggers_its_registry_entry_describes(synth: Synth) -> None:
    """What ``governor demo`` and the docs print is what the constructs built (rules, schedules, bus, URL)."""
    for name, function in synth.stack.functions.items():
        assert function.triggers == REGISTRY[name].trigger_lines(synth.stack.policy), name
