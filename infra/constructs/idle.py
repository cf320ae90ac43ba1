"""Idle GPU reclamation: the scheduled sweep, its bounded role, and the CloudWatch agent GPU configuration.

The role may stop or terminate only instances whose type is in a GPU family, may write only ``governor:*`` tags,
and may run only the AWS-RunShellScript document. The agent configuration lives in an SSM parameter; an opt-in
State Manager association installs the agent and applies it to instances carrying the policy's tag.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from governor.observability import NAMESPACE, SERVICE
from governor.policy import Policy
from infra.constructs.function import GovernorFunction
from infra.constructs.shared import SharedResources, send_command_grant
from infra.nag import acknowledge
from infra.settings import Settings

AGENT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "cloudwatch-agent-gpu.json"
RUN_COMMAND_DOCUMENT = "AWS-RunShellScript"


def agent_config() -> str:
    """The shipped agent configuration, compact (SSM standard parameters hold 4 KB)."""
    return json.dumps(json.loads(AGENT_CONFIG_FILE.read_text(encoding="utf-8")), separators=(",", ":"))


class IdleReclamation(Construct):
    """Sweeps the GPU fleet every ``idle.schedule`` and reclaims instances idle by every signal, warning first."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shared: SharedResources,
        policy: Policy,
        settings: Settings,
        functions: dict[str, GovernorFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        function = GovernorFunction(
            self,
            "Idle",
            name="idle",
            description="Warns about, then stops or terminates, GPU instances idle by every signal (idle policy)",
            shared=shared,
            policy=policy,
            settings=settings,
            sections=["idle"],
            timeout=Duration.minutes(5),
            memory_mb=1024,
        )
        function.on_schedule(
            "Sweep",
            policy.idle.schedule,
            "idle sweep: GPU metrics of every running GPU instance, then warn, act or hold back",
        )
        function.add_unscoped_statement(
            "Reads",
            ["ec2:DescribeInstances", "cloudwatch:GetMetricData", "ssm:GetCommandInvocation"],
            "DescribeInstances, GetMetricData and GetCommandInvocation support no resource-level permissions; they "
            "list GPU instances, read their metrics and read the outcome of the function's own checkpoint commands.",
        )
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        gpu_types: dict[str, object] = {"StringLike": {"ec2:InstanceType": policy.fleet.iam_instance_type_patterns()}}
        function.add_statement(["ec2:StopInstances", "ec2:TerminateInstances"], [instances], gpu_types)
        function.add_statement(
            ["ec2:CreateTags", "ec2:DeleteTags"],
            [instances],
            {
                "ForAllValues:StringLike": {"aws:TagKeys": ["governor:*"]},
                "Null": {"aws:TagKeys": "false"},
                **gpu_types,
            },
        )
        send_command_grant(function, policy, RUN_COMMAND_DOCUMENT)
        acknowledge(
            function.role,
            "AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:"
            "instance/*]",
            "GPU instances are launched at run time, so their ids are unknown at deploy time. Stop/Terminate and tag "
            "writes carry an ec2:InstanceType condition limited to the GPU families; tags only governor:* keys; "
            "SendCommand only with the AWS-RunShellScript document and only on instances carrying fleet.fleet_tags "
            "(ssm:resourceTag condition).",
        )
        self.agent_parameter = ssm.StringParameter(
            self,
            "AgentConfig",
            parameter_name=f"AmazonCloudWatch-{stack.stack_name}-gpu",
            description="CloudWatch agent configuration: nvidia_gpu metrics every minute, aggregated by InstanceId",
            string_value=agent_config(),
            tier=ssm.ParameterTier.STANDARD,
        )
        if policy.idle.cloudwatch_agent_association:
            self._associations(policy)
        held = cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name="IdleActionsHeldBack",
            dimensions_map={"service": SERVICE},
            statistic="Sum",
            period=Duration.minutes(15),
        ).create_alarm(
            self,
            "HeldBack",
            alarm_description="governor idle: a sweep would have acted on more instances than the blast radius allows "
            "and acted on none; check for a metrics outage before raising idle.max_actions_per_sweep",
            threshold=1,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        held.add_alarm_action(cw_actions.SnsAction(shared.alerts))
        functions["idle"] = function
        self.function = function

    def _associations(self, policy: Policy) -> None:
        """Install the agent, then configure it from the parameter, on every instance with the association tag."""
        targets = [
            ssm.CfnAssociation.TargetProperty(key=f"tag:{key}", values=[value])
            for key, value in policy.idle.association_tag.items()
        ]
        install = ssm.CfnAssociation(
            self,
            "InstallAgent",
            name="AWS-ConfigureAWSPackage",
            targets=targets,
            parameters={"action": ["Install"], "name": ["AmazonCloudWatchAgent"]},
            schedule_expression="rate(30 days)",
        )
        configure = ssm.CfnAssociation(
            self,
            "ConfigureAgent",
            name="AmazonCloudWatch-ManageAgent",
            targets=targets,
            parameters={
                "action": ["configure"],
                "mode": ["ec2"],
                "optionalConfigurationSource": ["ssm"],
                "optionalConfigurationLocation": [self.agent_parameter.parameter_name],
                "optionalRestart": ["yes"],
            },
            schedule_expression="rate(1 day)",
        )
        configure.add_dependency(install)
