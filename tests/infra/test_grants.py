"""Issue 33's least-privilege findings on the synthesized template: each grant held to the fleet, or written down.

moto evaluates no IAM, so these prove on the template (``tests/infra/policy_eval.py`` evaluates the role policies the
way IAM does for one account) what a function's role can no longer do: the Spot role drained any target group, the
idle role terminated members of any Auto Scaling group, the keys role invoked every function and could rotate the
governor's own Slack secrets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governor.core_policy import TeamRoute
from governor.policy import load_policy
from governor.registry import REGISTRY
from infra.app_builder import build_app
from tests.infra.conftest import Synth
from tests.infra.policy_eval import Request, RolePolicy, arn_of, resolve, role_policy, statement_matches
from tests.infra.sar import validate


class _ScaleInSynth(Synth):
    """The shipped policy with ``idle.asg_action: scale_in`` (the only setting with an Auto Scaling grant)."""

    def _build(self, outdir: Path) -> Any:
        shipped = load_policy(Path(__file__).resolve().parents[2] / "governor.yaml")
        policy = shipped.model_copy(update={"idle": shipped.idle.model_copy(update={"asg_action": "scale_in"})})
        return build_app(policy=policy, outdir=str(outdir))


@pytest.fixture(scope="module")
def full_policy_synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _ScaleInSynth(tmp_path_factory.mktemp("scale-in"))


TARGET_GROUP = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/website/0123456789abcdef"


def _role_of(synth: Synth, capability: str) -> RolePolicy:
    (function,) = [
        f
        for f in synth.resources("AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == f"governor.{capability}.handler.lambda_handler"
    ]
    return role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_spot_deregisters_only_from_target_groups_carrying_the_fleet_tags(synth: Synth) -> None:
    role = _role_of(synth, "spot")
    fleet: dict[str, Any] = {"aws:ResourceTag/gpu-fleet": "true"}
    assert role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP, **fleet)
    assert not role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP)
    assert not role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP, **{"aws:ResourceTag/gpu-fleet": "x"})


def _functions(synth: Synth) -> dict[str, str]:
    """Each governor function's logical id, by capability."""
    return {
        f["Properties"]["Handler"].split(".")[1]: logical_id
        for logical_id, f in synth.resources("AWS::Lambda::Function").items()
        if str(f["Properties"].get("Handler", "")).endswith(".handler.lambda_handler")
    }


def test_the_keys_role_invokes_rotation_functions_but_none_of_the_governors(synth: Synth) -> None:
    role = _role_of(synth, "keys")
    rotation = "arn:aws:lambda:us-east-1:123456789012:function:SecretsManagerRDSRotation"
    assert role.allows("lambda:InvokeFunction", rotation)
    for name, logical_id in _functions(synth).items():
        assert not role.allows("lambda:InvokeFunction", arn_of(synth.json, logical_id)), name


def test_the_keys_role_invokes_no_version_or_alias_of_the_governors_functions(synth: Synth) -> None:
    """Issue 45.9: the Deny named each function's ARN only, and Invoke on ``<arn>:1`` or ``<arn>:live`` is matched
    against the qualified ARN, which the allow's ``function:*`` covers."""
    role = _role_of(synth, "keys")
    assert role.allows("lambda:InvokeFunction", "arn:aws:lambda:us-east-1:123456789012:function:Rotation:live")
    for name, logical_id in _functions(synth).items():
        for qualifier in ("1", "live", "$LATEST"):
            assert not role.allows("lambda:InvokeFunction", f"{arn_of(synth.json, logical_id)}:{qualifier}"), name


SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:{}-AbCdEf"


def test_only_the_delivering_functions_read_the_governors_secrets_and_keys_never_rotates_them(synth: Synth) -> None:
    policy = synth.stack.policy
    webhook = SECRET.format(policy.notifications.slack_secret_name)
    signing = SECRET.format(policy.interactions.signing_secret_name)
    readers = {
        name
        for name in _functions(synth)
        if _role_of(synth, name).allows("secretsmanager:GetSecretValue", webhook)
        or _role_of(synth, name).allows("secretsmanager:GetSecretValue", signing)
    }
    assert readers == {"notifier", "report", "interactions"}
    keys = _role_of(synth, "keys")
    assert keys.allows("secretsmanager:RotateSecret", SECRET.format("training-db"))
    assert not keys.allows("secretsmanager:RotateSecret", webhook)
    assert not keys.allows("secretsmanager:RotateSecret", signing)


class _SlackAppSynth(Synth):
    """The shipped policy with the Slack bot token and a team's own webhook: every secret the governor can read."""

    def _build(self, outdir: Path) -> Any:
        shipped = load_policy(Path(__file__).resolve().parents[2] / "governor.yaml")
        teams = {"vision": TeamRoute(slack_secret_name="governor/vision-webhook")}
        policy = shipped.model_copy(
            update={
                "notifications": shipped.notifications.model_copy(update={"teams": teams}),
                "interactions": shipped.interactions.model_copy(update={"bot_token_secret_name": "governor/bot"}),
            }
        )
        return build_app(policy=policy, outdir=str(outdir))


def test_each_function_reads_exactly_the_secrets_its_registry_entry_names(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Registry ``secrets`` is what the roles grant: each function reads its own entry's secrets and no other of the
    governor's (the keys enforcer none: it denies itself all of them)."""
    synth = _SlackAppSynth(tmp_path_factory.mktemp("slack-app"))
    policy = synth.stack.policy
    everything = REGISTRY.secret_names(policy)
    assert set(everything) == {
        "governor/slack-webhook",
        "governor/vision-webhook",
        policy.interactions.signing_secret_name,
        "governor/bot",
    }
    for name in _functions(synth):
        role = _role_of(synth, name)
        readable = [s for s in everything if role.allows("secretsmanager:GetSecretValue", SECRET.format(s))]
        assert readable == REGISTRY[name].secret_names(policy), name


def test_idle_scales_in_only_auto_scaling_groups_carrying_the_fleet_tags(full_policy_synth: Synth) -> None:
    role = _role_of(full_policy_synth, "idle")
    group = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:1234:autoScalingGroupName/website"
    action = "autoscaling:TerminateInstanceInAutoScalingGroup"
    assert role.allows(action, group, **{"autoscaling:ResourceTag/gpu-fleet": "true"})
    assert not role.allows(action, group)


# --- the reserved tag keys (optional: attach the managed policy, or reserve_tags in organisation mode) ------------


def _reserved(template: dict[str, Any], kind: str, key: str) -> list[dict[str, Any]]:
    (found,) = [v for k, v in template["Resources"].items() if v["Type"] == kind and "ReservedTagKeys" in k]
    document = found["Properties"][key]
    return [resolve(s, template["Resources"]) for s in document["Statement"]]


def _may_tag(statements: list[dict[str, Any]], principal: str, keys: list[str], action: str = "ec2:CreateTags") -> bool:
    """Whether the reservation denies the call (the principal's own grants allow it, as in any account)."""
    request = Request(action, "*", {"aws:PrincipalArn": principal, "aws:TagKeys": keys})
    return not any(s["Effect"] == "Deny" and statement_matches(s, request) for s in statements)


PERSON = "arn:aws:iam::123456789012:role/ml-engineer"


def test_the_single_account_policy_reserves_the_fleet_and_governor_keys_to_the_governor(synth: Synth) -> None:
    """Issue 33: the docs advised protecting the fleet tag with an SCP, which the project did not deploy."""
    statements = _reserved(synth.json, "AWS::IAM::ManagedPolicy", "PolicyDocument")
    for keys in (["gpu-fleet"], ["governor:exempt"], ["Name", "governor:keep-until"]):
        assert not _may_tag(statements, PERSON, keys), keys
        for action in ("iam:TagUser", "kms:TagResource", "secretsmanager:TagResource", "elasticloadbalancing:AddTags"):
            assert not _may_tag(statements, PERSON, keys, action), (keys, action)
    assert _may_tag(statements, PERSON, ["Name", "owner"])
    idle = "arn:aws:iam::123456789012:role/IdleRole94DC025C"
    assert _may_tag(statements, idle, ["governor:idle-since"])  # the governor's own roles keep the keys
    assert "ReservedTagKeysPolicyArn" in synth.json["Outputs"]


def test_the_reservation_also_covers_groups_templates_creations_and_deleting_every_tag(synth: Synth) -> None:
    """Issue 45.7: an Auto Scaling group (or a new user, key, secret) carried reserved keys past the Deny, and
    ``DeleteTags`` with no keys deleted every tag; the Service Authorization Reference has ``aws:TagKeys`` for each."""
    statements = _reserved(synth.json, "AWS::IAM::ManagedPolicy", "PolicyDocument")
    for action in (
        "autoscaling:CreateAutoScalingGroup",
        "ec2:CreateLaunchTemplate",
        "iam:CreateUser",
        "iam:CreateRole",
        "kms:CreateKey",
        "secretsmanager:CreateSecret",
        "elasticloadbalancing:CreateTargetGroup",
    ):
        assert not _may_tag(statements, PERSON, ["Name", "governor:exempt"], action), action
        assert _may_tag(statements, PERSON, ["Name"], action), action
    every_tag = Request("ec2:DeleteTags", "*", {"aws:PrincipalArn": PERSON})  # no Tags: EC2 deletes them all
    assert any(s["Effect"] == "Deny" and statement_matches(s, every_tag) for s in statements)
    assert _may_tag(statements, PERSON, ["Name"], "ec2:DeleteTags")
    (admin,) = [k for k, v in synth.resources("AWS::IAM::Role").items() if k.startswith("OperatorsGpuAdmin")]
    as_admin = Request("ec2:DeleteTags", "*", {"aws:PrincipalArn": f"arn:aws:iam::123456789012:role/{admin}"})
    assert not any(s["Effect"] == "Deny" and statement_matches(s, as_admin) for s in statements)  # admins keep it
    assert not [str(p) for p in validate(synth.json) if "ReservedTagKeys" in str(p)]  # valid per the SAR


def test_organisation_mode_can_reserve_the_keys_by_service_control_policy() -> None:
    org = {
        "id": "o-abcdefghij",
        "ou_ids": ["ou-ab12-abcdefgh"],
        "regions": ["us-east-1"],
        "reserve_tags": True,
        "tag_admins": ["arn:aws:iam::*:role/PlatformAdmin"],
    }
    app, stack = build_app(context={"organization": org})
    template = app.synth().get_stack_by_name(stack.stack_name).template
    (scp,) = [v for k, v in template["Resources"].items() if v["Type"] == "AWS::Organizations::Policy"]
    assert scp["Properties"]["Type"] == "SERVICE_CONTROL_POLICY"
    assert scp["Properties"]["TargetIds"] == org["ou_ids"]
    statements = _reserved(template, "AWS::Organizations::Policy", "Content")
    member = "arn:aws:iam::222222222222:role/ml-engineer"
    assert not _may_tag(statements, member, ["gpu-fleet"])
    assert _may_tag(statements, "arn:aws:iam::222222222222:role/PlatformAdmin", ["gpu-fleet"])
    assert _may_tag(statements, "arn:aws:iam::222222222222:role/GovernorSpoke-idle-us-east-1", ["governor:idle-since"])
    assert not [str(p) for p in validate(template) if "ReservedTagKeys" in str(p)]  # valid per the SAR


class _DrainSynth(Synth):
    """The shipped policy with one EKS cluster whose idle nodes are drained (``idle.clusters[].reclaim: drain``)."""

    def _build(self, outdir: Path) -> Any:
        shipped = load_policy(Path(__file__).resolve().parents[2] / "governor.yaml")
        cluster = {
            "name": "gpu-prod",
            "metric_source": "prometheus",
            "prometheus_url": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
            "reclaim": "drain",
        }
        policy = type(shipped).model_validate(
            {
                **shipped.model_dump(by_alias=True),
                "idle": {**shipped.idle.model_dump(by_alias=True), "clusters": [cluster]},
            }
        )
        return build_app(policy=policy, outdir=str(outdir))


def test_draining_a_cluster_grants_its_access_entry_and_nothing_wider(tmp_path_factory: pytest.TempPathFactory) -> None:
    synth = _DrainSynth(tmp_path_factory.mktemp("drain"))
    role = _role_of(synth, "idle")
    cluster = "arn:aws:eks:us-east-1:123456789012:cluster/gpu-prod"
    assert role.allows("eks:DescribeCluster", cluster)
    assert not role.allows("eks:DescribeCluster", "arn:aws:eks:us-east-1:123456789012:cluster/other")
    assert role.allows("aps:QueryMetrics", "arn:aws:aps:us-east-1:123456789012:workspace/ws-1")
    (entry,) = synth.resources("AWS::EKS::AccessEntry").values()
    assert entry["Properties"]["ClusterName"] == "gpu-prod"
    assert (
        entry["Properties"]["KubernetesGroups"] == ["gpu-fleet-governor"]
        and "AccessPolicies" not in entry["Properties"]
    )
