"""Idle GPU reclamation: the scheduled sweep, its bounded role, and the CloudWatch agent GPU configuration.

The role may stop or terminate only instances whose type is in a GPU family, may write only ``governor:*`` tags,
and may run only the AWS-RunShellScript document. The agent configuration lives in an SSM parameter; an opt-in
State Manager association installs the agent and applies it to instances carrying the policy's tag.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Unpack

from aws_cdk import Aws, CfnCondition, Duration, Fn, Stack
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from governor.domain.actions import Tag, Untag
from governor.idle.actions import Stop, Terminate
from governor.idle.kubernetes.api import KUBERNETES_GROUP
from governor.idle.policy import KubernetesCluster
from governor.policy import Policy
from governor.registry import REGISTRY
from infra.constructs.dashboard import governor_metric
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, GovernorFunction, alert
from infra.constructs.shared import send_command_grant

AGENT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "cloudwatch-agent-gpu.json"
RUN_COMMAND_DOCUMENT = "AWS-RunShellScript"


def agent_config() -> str:
    """The shipped agent configuration, compact (SSM standard parameters hold 4 KB)."""
    return json.dumps(json.loads(AGENT_CONFIG_FILE.read_text(encoding="utf-8")), separators=(",", ":"))


INSTANCES_REASON = (
    "GPU instances are launched at run time, so their ids are unknown at deploy time. Stop/Terminate and "
    "CreateTags carry an ec2:InstanceType condition limited to the GPU families; tag writes and deletions "
    "only governor:* keys (DeleteTags supports no ec2:InstanceType condition); "
    "SendCommand only with the AWS-RunShellScript document and only on instances carrying fleet.fleet_tags "
    "(ssm:resourceTag condition)."
)


SNAPSHOT_REASON = (
    "Stopped GPU instances past idle.stopped.snapshot_and_terminate_after_days have every volume snapshotted before "
    "their terminate: CreateSnapshots on GPU instance types only (ec2:InstanceType); the volumes and snapshots it "
    "creates are unknown at deploy time; CreateTags on snapshots only as part of CreateSnapshots (ec2:CreateAction)."
)


class IdleReclamation(CapabilityConstruct):
    """Sweeps the GPU fleet every ``idle.schedule`` and reclaims instances idle by every signal, warning first."""

    CAPABILITY = REGISTRY["idle"]
    FUNCTION_ID = "Idle"
    MEMORY_MB = 1024

    def _snapshot_grants(self, function: GovernorFunction, instances: str, gpu_types: dict[str, object]) -> None:
        """CreateSnapshots of a stopped GPU instance's volumes (its tags copied), and nothing else about snapshots:
        the instance must be a GPU type; the tags only as CreateSnapshots writes them."""
        stack = Stack.of(self)
        volumes = stack.format_arn(service="ec2", resource="volume", resource_name="*")
        snapshots = stack.format_arn(service="ec2", resource="snapshot", resource_name="*", account="")
        function.add_statement(["ec2:CreateSnapshots"], [instances], gpu_types, reason=SNAPSHOT_REASON)
        function.add_statement(["ec2:CreateSnapshots"], [volumes, snapshots], reason=SNAPSHOT_REASON)
        created: dict[str, object] = {"StringEquals": {"ec2:CreateAction": "CreateSnapshots"}}
        function.add_statement(["ec2:CreateTags"], [snapshots], created, reason=SNAPSHOT_REASON)

    @classmethod
    def in_member_account(cls, scope: Construct, policy: Policy, role: iam.IRole | None) -> None:
        """The agent configuration every governed account gets, and the member clusters this account's idle role
        drains (``idle.clusters[].account``)."""
        install_agent_config(scope, policy)
        if role is not None:
            member_cluster_access(scope, policy, role.role_arn)

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        stack = Stack.of(self)
        policy = self.policy
        function = self.function
        self.on_schedule("Sweep")
        self.add_adapter_reads(
            "DescribeInstances, DescribeInstanceTypes, DescribeCapacityReservations, DescribeVolumes, "
            "DescribeAddresses, GetMetricData, GetCommandInvocation and ListCommands support no resource-level "
            "permissions; they list GPU instances, their GPUs and the reservations they run in, the volumes and "
            "addresses stopped ones still bill, read their metrics, read the outcome of the function's own checkpoint "
            "commands and find a command by its intent id instead of sending it twice.",
        )
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        gpu_types: dict[str, object] = {"StringLike": {"ec2:InstanceType": policy.fleet.iam_instance_type_patterns()}}
        function.add_statement(Stop.IAM | Terminate.IAM, [instances], gpu_types, reason=INSTANCES_REASON)
        governor_keys: dict[str, object] = {
            "ForAllValues:StringLike": {"aws:TagKeys": ["governor:*"]},
            "Null": {"aws:TagKeys": "false"},
        }
        function.add_statement(Tag.IAM, [instances], {**governor_keys, **gpu_types})
        # DeleteTags does not support ec2:InstanceType (Service Authorization Reference): with it the condition is
        # false and every call is denied, so the idle-since mark could never be cleared. Keys alone bound it.
        function.add_statement(Untag.IAM, [instances], governor_keys)
        if policy.idle.stopped.snapshot_and_terminate_after_days is not None:
            self._snapshot_grants(function, instances, gpu_types)
        drained = [c for c in policy.idle.clusters if c.reclaim == "drain"]
        if policy.idle.asg_action == "scale_in" or drained:
            self._scale_in_grants(function)
        if drained:
            self._cluster_access(function, drained)
        send_command_grant(function, policy, RUN_COMMAND_DOCUMENT)
        self.agent_parameter = install_agent_config(self, policy)
        alert(
            self,
            "HeldBack",
            governor_metric("IdleActionsHeldBack", Duration.minutes(15)),
            "governor idle: the circuit breaker tripped, many GPU instances turned idle together and are held; "
            "check the CloudWatch agents and GPU drivers, then `governor idle rearm` if they really are idle",
            self.shared,
        )
        alert(
            self,
            "ActionFailures",
            governor_metric("IdleActionFailures", Duration.minutes(15)),
            "governor idle: an idle act (checkpoint, stop, terminate, tag) failed; the next sweep retries it. "
            "Runbook: docs/reliability.md, 'Runbook' (IdleActionFailures)",
            self.shared,
        )
        alert(
            self,
            "WarningsUnpublished",
            governor_metric("IdleWarningsUnpublished", Duration.minutes(15)),
            "governor idle: idle warnings were not accepted by the bus, so no warning period started. "
            "Runbook: docs/reliability.md, 'Runbook' (IdleWarningsUnpublished)",
            self.shared,
        )

    def _cluster_access(self, function: GovernorFunction, clusters: list[KubernetesCluster]) -> None:
        """Drain idle nodes of the clusters ``idle.clusters`` names with ``reclaim: drain``: DescribeCluster on those
        clusters only, and one EKS access entry each mapping the idle role to the Kubernetes group
        ``KUBERNETES_GROUP``, which the cluster's RBAC (deploy/kubernetes/governor-rbac.yaml) lets cordon nodes,
        list pods, create evictions and delete NodeClaims, and nothing else. No AWS-managed access policy is that
        narrow (AmazonEKSEditPolicy cannot patch nodes; the admin policies can do everything).

        A member account's cluster (``account`` and ``region``) is named by its own ARN: the statement goes to the
        spoke's idle role unchanged (``member_accounts``), where it allows DescribeCluster on that one cluster, and
        that account's spoke stack creates the access entry for its idle role (``member_cluster_access``)."""
        stack = Stack.of(self)
        arns = [
            stack.format_arn(service="eks", resource="cluster", resource_name=c.name)
            if c.account is None
            else f"arn:{stack.partition}:eks:{c.region}:{c.account}:cluster/{c.name}"
            for c in clusters
        ]
        function.add_statement(sorted(Terminate.DRAIN - Terminate.SCALE_IN), arns)
        for cluster in clusters:
            if cluster.account is None:
                access_entry(self, cluster.name, function.role.role_arn)

    def _scale_in_grants(self, function: GovernorFunction) -> None:
        """Reclaim Auto Scaling group members through their group (a stopped member would just be replaced).

        TerminateInstanceInAutoScalingGroup's resource is the group (Service Authorization Reference: resource type
        autoScalingGroup, no instance-type condition key); DescribeAutoScalingGroups has no resource-level scope.
        """
        stack = Stack.of(self)
        groups = (
            f"arn:{stack.partition}:autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*:"
            "autoScalingGroupName/*"
        )
        function.add_unscoped_statement(
            "GroupReads",
            [action for action in Terminate.SCALE_IN if action.startswith("autoscaling:Describe")],
            "DescribeAutoScalingGroups supports no resource-level permissions; it re-reads a group's minimum and "
            "desired capacity right before scaling it in.",
        )
        fleet = {f"autoscaling:ResourceTag/{key}": value for key, value in self.policy.fleet.fleet_tags.items()}
        function.add_statement(
            [action for action in Terminate.SCALE_IN if not action.startswith("autoscaling:Describe")],
            [groups],
            {"StringEquals": fleet},
            reason="GPU Auto Scaling groups are created after deploy; only groups carrying fleet.fleet_tags "
            "(autoscaling:ResourceTag, checked in code too) may be scaled in, only by an instance the sweep judged "
            "idle and re-read, always decrementing the desired capacity and never below the group's minimum.",
        )


def access_entry(scope: Construct, name: str, principal: str) -> eks.CfnAccessEntry:
    """The EKS access entry mapping ``principal`` to ``KUBERNETES_GROUP`` on cluster ``name`` (no access policy)."""
    return eks.CfnAccessEntry(
        scope,
        f"AccessEntry{''.join(part.capitalize() for part in name.replace('_', '-').split('-'))}",
        cluster_name=name,
        principal_arn=principal,
        kubernetes_groups=[KUBERNETES_GROUP],
        type="STANDARD",
    )


def member_cluster_access(scope: Construct, policy: Policy, principal: str) -> list[eks.CfnAccessEntry]:
    """In the spoke template (deployed to every member account and region): the access entry of each member cluster
    that drains, created only in that cluster's own account and region (a CloudFormation condition), so the StackSet
    does not fail where the cluster does not exist."""
    entries = []
    for cluster in policy.idle.clusters:
        if cluster.account is None or cluster.reclaim != "drain":
            continue
        entry = access_entry(scope, cluster.name, principal)
        entry.cfn_options.condition = CfnCondition(
            scope,
            f"{entry.node.id}Here",
            expression=Fn.condition_and(
                Fn.condition_equals(Aws.ACCOUNT_ID, cluster.account), Fn.condition_equals(Aws.REGION, cluster.region)
            ),
        )
        entries.append(entry)
    return entries


def install_agent_config(scope: Construct, policy: Policy) -> ssm.StringParameter:
    """The agent configuration parameter and, when the policy opts in, the State Manager associations applying it.

    Shared by the hub's idle construct and the organisation spoke, so every governed account configures the agent
    the same way (same parameter name pattern, same associations).
    """
    parameter = ssm.StringParameter(
        scope,
        "AgentConfig",
        parameter_name=f"AmazonCloudWatch-{Stack.of(scope).stack_name}-gpu",
        description="CloudWatch agent configuration: nvidia_gpu metrics every minute, aggregated by InstanceId",
        string_value=agent_config(),
        tier=ssm.ParameterTier.STANDARD,
    )
    if policy.idle.cloudwatch_agent_association:
        _associations(scope, policy, parameter)
    return parameter


def _associations(scope: Construct, policy: Policy, parameter: ssm.StringParameter) -> None:
    """Install the agent, then configure it from the parameter, on every instance with the association tag."""
    targets = [
        ssm.CfnAssociation.TargetProperty(key=f"tag:{key}", values=[value])
        for key, value in policy.idle.association_tag.items()
    ]
    install = ssm.CfnAssociation(
        scope,
        "InstallAgent",
        name="AWS-ConfigureAWSPackage",
        targets=targets,
        parameters={"action": ["Install"], "name": ["AmazonCloudWatchAgent"]},
        schedule_expression="rate(30 days)",
    )
    configure = ssm.CfnAssociation(
        scope,
        "ConfigureAgent",
        name="AmazonCloudWatch-ManageAgent",
        targets=targets,
        parameters={
            "action": ["configure"],
            "mode": ["ec2"],
            "optionalConfigurationSource": ["ssm"],
            "optionalConfigurationLocation": [parameter.parameter_name],
            "optionalRestart": ["yes"],
        },
        schedule_expression="rate(1 day)",
    )
    configure.add_dependency(install)
