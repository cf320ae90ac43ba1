"""EKS clusters in member accounts (issue 39): the spoke template creates the idle spoke role's access entry only in
the cluster's own account and region (a CloudFormation condition, since the StackSet deploys the same template into
every member and region), the spoke idle role may DescribeCluster that one cluster and query AMP, and the hub creates
no access entry for a cluster it does not have. The run-time side is tests/adapters/test_kubernetes_members.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from governor.policy import load_policy
from infra.app_builder import build_app
from tests.infra.sar import validate
from tests.infra.test_organization import _parameters, _with_parameters
from tests.infra.test_sar import _known

ORG = {"id": "o-abcdefghij", "ou_ids": ["ou-ab12-abcdefgh"], "regions": ["us-east-1", "eu-west-1"]}
MEMBER = "222222222222"


def _templates() -> tuple[dict[str, Any], dict[str, Any]]:
    shipped = load_policy(Path(__file__).resolve().parents[2] / "governor.yaml")
    clusters = [
        {
            "name": "gpu-home",
            "metric_source": "prometheus",
            "prometheus_url": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
            "reclaim": "drain",
        },
        {
            "name": "gpu-member",
            "metric_source": "prometheus",
            "prometheus_url": "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-2",
            "reclaim": "drain",
            "account": MEMBER,
            "region": "eu-west-1",
        },
        {"name": "reported-only", "metric_source": "container_insights", "account": MEMBER, "region": "eu-west-1"},
    ]
    policy = type(shipped).model_validate(
        {
            **shipped.model_dump(by_alias=True),
            "idle": {**shipped.idle.model_dump(by_alias=True), "clusters": clusters},
        }
    )
    app, stack = build_app(policy=policy, context={"organization": ORG})
    hub: dict[str, Any] = app.synth().get_stack_by_name(stack.stack_name).template
    (stack_set,) = [r for r in hub["Resources"].values() if r["Type"] == "AWS::CloudFormation::StackSet"]
    return hub, json.loads(stack_set["Properties"]["TemplateBody"])


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _text(value: Any) -> str:
    """An ARN as CloudFormation resolves it (partition aws; other pseudo parameters kept as ${...})."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return "aws" if value["Ref"] == "AWS::Partition" else "${" + value["Ref"] + "}"
    return str(value)


def _allowed(statements: list[dict[str, Any]], action: str) -> list[Any]:
    found: list[Any] = []
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and action in actions:
            resources = statement["Resource"]
            found += [_text(r) for r in (resources if isinstance(resources, list) else [resources])]
    return found


def test_a_member_clusters_access_entry_is_the_spoke_idle_roles_in_its_own_account_and_region_only() -> None:
    hub, spoke = _templates()
    assert [e["Properties"]["ClusterName"] for e in _of_type(hub, "AWS::EKS::AccessEntry").values()] == ["gpu-home"]

    (entry,) = _of_type(spoke, "AWS::EKS::AccessEntry").values()  # drained member clusters only
    assert entry["Properties"]["ClusterName"] == "gpu-member"
    assert (
        entry["Properties"]["KubernetesGroups"] == ["gpu-fleet-governor"]
        and "AccessPolicies" not in entry["Properties"]
    )
    assert entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0].startswith("IdleExecutionRole")
    condition = spoke["Conditions"][entry["Condition"]]
    assert condition == {
        "Fn::And": [
            {"Fn::Equals": [{"Ref": "AWS::AccountId"}, MEMBER]},
            {"Fn::Equals": [{"Ref": "AWS::Region"}, "eu-west-1"]},
        ]
    }

    (policy,) = [p for k, p in _of_type(spoke, "AWS::IAM::Policy").items() if k == "IdleExecutionPolicy"]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    described = _allowed(statements, "eks:DescribeCluster")
    assert f"arn:aws:eks:eu-west-1:{MEMBER}:cluster/gpu-member" in described
    assert not any("reported-only" in r or r == "*" for r in described)  # only drained clusters, by name
    assert _allowed(statements, "aps:QueryMetrics")  # AMP in the member, signed as the spoke role
    roles = [f"arn:aws:iam::111111111111:role/hub-{n}" for n in range(10)]
    assert not validate(_with_parameters(spoke, _parameters(roles)))  # valid per the SAR
    assert not [str(p) for p in validate(hub) if not _known(p)]
