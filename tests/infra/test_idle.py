"""The idle sweep's infrastructure: a 15-minute schedule, a role bounded to GPU types and governor tags, and the
CloudWatch agent GPU configuration stored for State Manager."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from governor.capability import BASE_PERMISSIONS
from governor.idle import handler as idle
from governor.idle.metrics import METRICS
from governor.policy import parse_policy
from governor.registry import REGISTRY
from infra.constructs.dashboard import GPU_METRICS
from infra.constructs.function import GovernorFunction
from infra.constructs.idle import AGENT_CONFIG_FILE, IdleReclamation
from infra.constructs.shared import SharedResources
from infra.settings import Settings
from tests.infra.conftest import Synth
from tests.infra.policy_eval import RolePolicy, role_policy

INSTANCE = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"
DOCUMENT = "arn:aws:ssm:us-east-1::document/AWS-RunShellScript"
CODE_ACTIONS = {
    "ec2:DescribeInstances",
    "ec2:DescribeCapacityReservations",  # the reservations instances run in, and those nobody runs in (issue 38)
    "ec2:DescribeInstanceTypes",  # the GPUs of the types the sweep sees (issue 49): count, model, fractional share
    "ec2:StopInstances",
    "ec2:TerminateInstances",
    "ec2:CreateTags",
    "ec2:DeleteTags",
    "cloudwatch:GetMetricData",
    "ssm:SendCommand",
    "ssm:GetCommandInvocation",
    "ssm:ListCommands",
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "sagemaker:ListClusters",  # HyperPod clusters' node lists: their nodes are never stopped through EC2
    "sagemaker:ListClusterNodes",
    # what stopped GPU instances still bill, and their snapshots' state (issue 49): read only
    "ec2:DescribeVolumes",
    "ec2:DescribeAddresses",
    "ec2:DescribeSnapshots",
}
GROUP = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0f1e2d3c-aaaa-bbbb-cccc-0123456789ab:autoScalingGroupName/train-pool"


def _function(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(logical_id, function)] = [
        (k, v)
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == "governor.idle.handler.lambda_handler"
    ]
    return logical_id, function


def _role(synth: Synth) -> RolePolicy:
    _, function = _function(synth)
    return role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_sweep_runs_on_the_policy_schedule_with_the_idle_section(synth: Synth) -> None:
    function_id, function = _function(synth)
    variables = function["Properties"]["Environment"]["Variables"]
    assert '"idle":' in variables["GOVERNOR_POLICY"] and '"network":' not in variables["GOVERNOR_POLICY"]
    # what an idle instance costs an hour (its finding, which dear instance acts first): the policy's own prices
    assert parse_policy(json.loads(variables["GOVERNOR_POLICY"])).pricing == synth.stack.policy.pricing
    schedules = [
        s["Properties"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]
    assert len(schedules) == 1 and schedules[0]["ScheduleExpression"] == "rate(15 minutes)"
    payload = json.loads(schedules[0]["Target"]["Input"]) if isinstance(schedules[0]["Target"]["Input"], str) else None
    if payload is not None:
        assert payload["detail-type"] == "Scheduled Event" and payload["source"] == "aws.scheduler"
    assert synth.stack.functions["idle"].triggers[0].startswith("schedule rate(15 minutes)")


def test_role_grants_what_the_sweep_code_declares_and_nothing_more(synth: Synth) -> None:
    granted = _role(synth).granted_actions()
    assert granted - BASE_PERMISSIONS == CODE_ACTIONS == REGISTRY["idle"].permissions(synth.stack.policy)
    assert idle.Adapters.__dataclass_fields__.keys() == {
        "instances",
        "actions",
        "metrics",
        "commands",
        "groups",
        "reservations",  # capacity reservations' end dates and match criteria (issue 38): read only
        "nodes",  # EKS nodes drained through their cluster's API (issue 39): Kubernetes RBAC, no AWS permission
        "clock",
        "hyperpod",  # ListClusters, ListClusterNodes
        "respond",  # Slack's response_url for Stop now: plain HTTPS to hooks.slack.com, no AWS permission
        "gpu_types",  # DescribeInstanceTypes
        "storage",  # stopped instances' volumes, addresses, snapshots (issue 49): CreateSnapshots only when enabled
    }


def test_hyperpod_node_lists_are_read_on_the_accounts_clusters_only(synth: Synth) -> None:
    role = _role(synth)
    cluster = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc123def456"
    assert role.allows("sagemaker:ListClusterNodes", cluster)
    assert not role.allows("sagemaker:ListClusterNodes", "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x")
    assert role.allows("sagemaker:ListClusters", "*")
    assert not role.allows("sagemaker:BatchDeleteClusterNodes", cluster)


def test_auto_scaling_members_are_scaled_in_through_their_group_only(synth: Synth) -> None:
    """TerminateInstanceInAutoScalingGroup's resource is the group (Service Authorization Reference)."""
    role = _role(synth)
    fleet = {"autoscaling:ResourceTag/gpu-fleet": "true"}
    assert role.allows("autoscaling:TerminateInstanceInAutoScalingGroup", GROUP, **fleet)
    assert not role.allows("autoscaling:TerminateInstanceInAutoScalingGroup", GROUP)  # not a fleet group (issue 33)
    assert not role.allows("autoscaling:TerminateInstanceInAutoScalingGroup", INSTANCE, **fleet)
    assert role.allows("autoscaling:DescribeAutoScalingGroups", "*")
    for action in (
        "autoscaling:UpdateAutoScalingGroup",
        "autoscaling:SetDesiredCapacity",
        "autoscaling:DeleteAutoScalingGroup",
    ):
        assert not role.allows(action, GROUP), action


def test_report_only_groups_get_no_scale_in_grant() -> None:
    """``asg_action: report``: the role cannot change a group at all."""
    policy = parse_policy({"idle": {"asg_action": "report"}})
    stack = Stack(App(), "IdleReportGroups")
    shared = SharedResources(stack, "Shared", policy=policy, bus_name="governor")
    functions: dict[str, GovernorFunction] = {}
    IdleReclamation(stack, "Idle", shared=shared, policy=policy, settings=Settings(), functions=functions)
    statements = [
        s
        for p in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert not any(a.startswith("autoscaling:") for a in actions)


def test_snapshots_of_stopped_instances_are_granted_only_when_enabled_and_only_on_gpu_types(synth: Synth) -> None:
    """``idle.stopped.snapshot_and_terminate_after_days``: CreateSnapshots only of GPU instances, CreateTags on
    snapshots only as CreateSnapshots writes them; nothing of it in the shipped (off) policy."""
    assert not _role(synth).allows("ec2:CreateSnapshots", INSTANCE, **{"ec2:InstanceType": "g5.xlarge"})
    policy = parse_policy({"idle": {"stopped": {"snapshot_and_terminate_after_days": 30}}})
    stack = Stack(App(), "IdleSnapshots")
    shared = SharedResources(stack, "Shared", policy=policy, bus_name="governor")
    functions: dict[str, GovernorFunction] = {}
    IdleReclamation(stack, "Idle", shared=shared, policy=policy, settings=Settings(), functions=functions)
    template = Template.from_stack(stack).to_json()
    [function] = [
        f
        for f in template["Resources"].values()
        if f["Properties"].get("Handler") == "governor.idle.handler.lambda_handler"
    ]
    role = role_policy(template, function["Properties"]["Role"]["Fn::GetAtt"][0])
    snapshot = "arn:aws:ec2:us-east-1::snapshot/snap-0123456789abcdef0"
    volume = "arn:aws:ec2:us-east-1:123456789012:volume/vol-0123456789abcdef0"
    assert role.allows("ec2:CreateSnapshots", INSTANCE, **{"ec2:InstanceType": "g5.xlarge"})
    assert not role.allows("ec2:CreateSnapshots", INSTANCE, **{"ec2:InstanceType": "m5.large"})
    assert role.allows("ec2:CreateSnapshots", volume) and role.allows("ec2:CreateSnapshots", snapshot)
    assert role.allows("ec2:CreateTags", snapshot, **{"ec2:CreateAction": "CreateSnapshots"})
    assert not role.allows("ec2:CreateTags", snapshot)  # not on an existing snapshot
    assert not role.allows("ec2:DeleteSnapshot", snapshot)


def test_stop_and_terminate_only_gpu_instance_types(synth: Synth) -> None:
    role = _role(synth)
    for action in ("ec2:StopInstances", "ec2:TerminateInstances"):
        for instance_type in ("g5.xlarge", "p4d.24xlarge", "trn1.32xlarge", "inf2.xlarge", "dl1.24xlarge"):
            assert role.allows(action, INSTANCE, **{"ec2:InstanceType": instance_type}), (action, instance_type)
        for instance_type in ("m5.large", "c6i.xlarge", "t3.micro", "r7g.2xlarge"):
            assert not role.allows(action, INSTANCE, **{"ec2:InstanceType": instance_type}), (action, instance_type)
        assert not role.allows(action, INSTANCE)  # no instance type in the request context: denied


def test_tag_writes_only_governor_keys_on_gpu_instances(synth: Synth) -> None:
    role = _role(synth)
    gpu = {"ec2:InstanceType": "g5.xlarge"}
    for action in ("ec2:CreateTags", "ec2:DeleteTags"):
        assert role.allows(action, INSTANCE, **gpu, **{"aws:TagKeys": ["governor:idle-since"]})
        assert not role.allows(action, INSTANCE, **gpu, **{"aws:TagKeys": ["owner"]})
        assert not role.allows(action, INSTANCE, **gpu, **{"aws:TagKeys": ["governor:idle-since", "team"]})
    assert not role.allows(
        "ec2:CreateTags", INSTANCE, **{"ec2:InstanceType": "m5.large", "aws:TagKeys": ["governor:x"]}
    )
    # DeleteTags: AWS puts no ec2:InstanceType in its request context (SAR), so the mark is cleared by key alone
    assert role.allows("ec2:DeleteTags", INSTANCE, **{"aws:TagKeys": ["governor:idle-since"]})


def test_run_command_only_with_the_shell_script_document(synth: Synth) -> None:
    role = _role(synth)
    fleet = {"ssm:resourceTag/gpu-fleet": "true"}
    assert role.allows("ssm:SendCommand", DOCUMENT) and role.allows("ssm:SendCommand", INSTANCE, **fleet)
    assert not role.allows("ssm:SendCommand", INSTANCE)  # an instance without the fleet's tags
    assert not role.allows("ssm:SendCommand", "arn:aws:ssm:us-east-1::document/AWS-RunPowerShellScript")


def test_agent_configuration_is_stored_as_an_ssm_parameter(synth: Synth) -> None:
    [parameter] = [
        p["Properties"]
        for p in synth.resources("AWS::SSM::Parameter").values()
        if p["Properties"].get("Name", "").startswith("AmazonCloudWatch-")
    ]
    config = json.loads(parameter["Value"])
    assert config == json.loads(AGENT_CONFIG_FILE.read_text())
    metrics = config["metrics"]
    assert metrics["namespace"] == "CWAgent" and metrics["aggregation_dimensions"] == [["InstanceId"]]
    assert metrics["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    # Issue 50.2: only what the sweep and the dashboard read, once per instance (CloudWatch bills every published
    # series a month: the per-GPU originals were 5 fields x (GPUs + 1) metrics per instance, none of them read).
    gpu = metrics["metrics_collected"]["nvidia_gpu"]
    read = {name for specs in METRICS.values() for namespace, name, _ in specs if namespace == "CWAgent"}
    shown = {metric for metric, _, _ in GPU_METRICS}
    assert {f"nvidia_smi_{field}" for field in gpu["measurement"]} == read | shown
    assert set(gpu.get("drop_original_metrics", [])) == set(gpu["measurement"])
    assert not synth.resources("AWS::SSM::Association")  # opt-in, off by default


def test_held_back_actions_raise_an_alarm(synth: Synth) -> None:
    alarms = [a["Properties"] for a in synth.resources("AWS::CloudWatch::Alarm").values()]
    held = [a for a in alarms if a.get("MetricName") == "IdleActionsHeldBack"]
    assert held and held[0]["AlarmActions"]


def test_opt_in_association_installs_and_configures_the_agent_by_tag() -> None:
    """A bare stack with only this construct (no cdk-nag, no second app synth), to see the opt-in resources."""
    policy = parse_policy({"idle": {"cloudwatch_agent_association": True, "association_tag": {"gpu": "yes"}}})
    stack = Stack(App(), "IdleOnly")
    shared = SharedResources(stack, "Shared", policy=policy, bus_name="governor")
    functions: dict[str, GovernorFunction] = {}
    IdleReclamation(stack, "Idle", shared=shared, policy=policy, settings=Settings(), functions=functions)
    template = Template.from_stack(stack)
    associations = template.find_resources("AWS::SSM::Association")
    by_document = {a["Properties"]["Name"]: a["Properties"] for a in associations.values()}
    assert set(by_document) == {"AWS-ConfigureAWSPackage", "AmazonCloudWatch-ManageAgent"}
    configure = by_document["AmazonCloudWatch-ManageAgent"]
    assert configure["Targets"] == [{"Key": "tag:gpu", "Values": ["yes"]}]
    assert configure["Parameters"]["optionalConfigurationSource"] == ["ssm"]
    assert configure["Parameters"]["optionalConfigurationLocation"][0]["Ref"]
    assert by_document["AWS-ConfigureAWSPackage"]["Parameters"]["name"] == ["AmazonCloudWatchAgent"]
    assert set(functions) == {"idle"}
