"""Slack interactivity: the ``interactions`` function behind a Lambda Function URL, its bounded role and its alarms.

A Function URL rather than an API Gateway HTTP API: Slack authenticates with its own HMAC signature, which neither
offers to check (IAM auth cannot be used by Slack), so the function verifies it either way; an HTTP API would add a
stage, a route, an integration, access logs and a per-request charge, and its only extra here, throttling, is
covered by reserved concurrency (``interactions.reserved_concurrency``, on by default, counted by the deploy's
preflight). No Function URL is deployed while ``interactions.buttons`` is off. The role may write only the snooze
tag, only on GPU instances carrying ``fleet.fleet_tags``, read only the two Slack secrets, and invoke only itself (the
click's worker) and the idle function (Stop now).
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from governor.domain.actions import Tag
from governor.interactions.slack_calls import AsyncInvoker
from governor.registry import REGISTRY
from infra.constructs.dashboard import governor_metric
from infra.constructs.delivery import grant_secret_reads
from infra.constructs.function import (
    CapabilityArgs,
    CapabilityConstruct,
    FunctionOptions,
    GovernorFunction,
    alert,
)
from infra.constructs.shared import SharedResources
from infra.nag import acknowledge, acknowledge_wildcard


class SlackInteractions(CapabilityConstruct):
    """Slack's Request URL for button clicks: verified, authorised, recorded, bounded; Stop now goes to idle."""

    CAPABILITY = REGISTRY["interactions"]
    FUNCTION_ID = "Interactions"
    # The worker's calls use the shared clients, one of which can take 105 s when every attempt times out
    # (bench/soak.py, worst_single_call); the Function URL path answers Slack within 3 s on its own quick
    # clients (interactions/slack_calls.py, ENDPOINT_*), whatever this limit is.
    TIMEOUT = Duration.seconds(120)

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        stack = Stack.of(self)
        policy = self.policy
        stopper = args["functions"][REGISTRY.carrying_out("stop").name]
        function = self.function
        # The public endpoint exists only while the policy puts buttons on messages: with buttons off there is
        # nothing to click, so nothing is exposed (the function stays, unreachable from outside, so switching
        # buttons on is a policy change, not a new capability).
        self.url = (
            function.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.NONE)
            if policy.interactions.buttons
            else None
        )
        if self.url is not None:
            function.triggers.append(self.capability.trigger("FunctionUrl").line(policy))
            acknowledge(
                function.function,
                "NIST.800.53.R5::NIST.800.53.R5-LambdaFunctionPublicAccessProhibited",
                "Slack's interactivity Request URL must be reachable from Slack, which cannot sign with IAM: the two "
                "permissions CDK adds allow invoking only through the Function URL (lambda:FunctionUrlAuthType NONE, "
                "lambda:InvokedViaFunctionUrl), and the function refuses every request whose Slack v0 signature "
                "(signing secret in Secrets Manager) is wrong or older than five minutes before reading anything "
                "else.",
            )
        grant_secret_reads(function, self.capability.secret_names(policy))
        function.add_unscoped_statement(
            "Reads",
            ["ec2:DescribeInstances"],
            "DescribeInstances supports no resource-level permissions; it re-reads the one instance a click's "
            "button stands for (its state, owner and team tags) before anything is decided.",
        )
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        fleet_tags = {f"aws:ResourceTag/{key}": value for key, value in policy.fleet.fleet_tags.items()}
        function.add_statement(
            Tag.IAM,
            [instances],
            {
                "StringLike": {"ec2:InstanceType": policy.fleet.iam_instance_type_patterns()},
                "StringEquals": fleet_tags,
                "ForAllValues:StringEquals": {"aws:TagKeys": [policy.fleet.keep_until_tag]},
                "Null": {"aws:TagKeys": "false"},
            },
        )
        acknowledge_wildcard(
            function.role,
            instances,
            "GPU instances are launched at run time, so their ids are unknown at deploy time. CreateTags is held to "
            "the snooze tag key, GPU instance types and instances carrying fleet.fleet_tags.",
        )
        # A policy of its own: on the role's default policy, a grant on the function itself would make the function
        # depend on its own ARN (a CloudFormation circular dependency).
        invoke = iam.Policy(
            self,
            "Invoke",
            statements=[
                iam.PolicyStatement(
                    actions=function.declared(AsyncInvoker.IAM_ACTIONS),
                    resources=[function.function.function_arn, stopper.function.function_arn],
                )
            ],
        )
        function.role.attach_inline_policy(invoke)
        self._alarms(self.shared, function)
        if self.url is not None:
            CfnOutput(
                stack,
                "SlackInteractivityUrl",
                value=self.url.url,
                description="Paste into the Slack app's Interactivity Request URL (docs/slack.md)",
            )

    def function_options(self, functions: dict[str, GovernorFunction]) -> FunctionOptions:
        """Opt-in reserved concurrency, and the function that carries out Stop now (registry: the one returning
        ``stop`` without delegating it; its construct is built earlier)."""
        stopper = functions[REGISTRY.carrying_out("stop").name]
        return {
            "reserved_concurrency": self.policy.interactions.endpoint_concurrency() or None,
            "environment": {"IDLE_FUNCTION": stopper.function.function_name},
        }

    def _alarms(self, shared: SharedResources, function: GovernorFunction) -> None:
        """Forged or stale requests, and a signing secret the function cannot read, reach the alarm topic."""
        for metric, threshold, what in (
            ("InteractionsForged", 10, "requests with a bad, stale or missing Slack signature (forged or replayed?)"),
            ("InteractionsRefused", 20, "clicks refused (not yours, unknown buttons, a missing signing secret)"),
        ):
            alert(
                self,
                metric,
                governor_metric(metric, Duration.minutes(5)),
                f"governor interactions: {what}",
                shared,
                threshold=threshold,
            )
        alert(
            self,
            "Throttles",
            function.function.metric_throttles(period=Duration.minutes(5), statistic="Sum"),
            "governor interactions: Slack requests throttled (reserved concurrency reached)",
            shared,
        )
