"""Organisation mode, hub side: the intake bus, the spoke StackSet, and the hub roles' way into member accounts.

Built only when the ``organization`` context is set, and last, so it sees every function the capability constructs
registered. The spoke template is synthesized here from the hub's own triggers and grants, in its own App (with
cdk-nag), and embedded in a service-managed StackSet: the spoke has no assets, so the body needs no bucket and
deploys from any hub, and a change to the hub's rules or grants changes the StackSet in the same deploy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Fn, Stack
from aws_cdk import aws_cloudformation as cfn
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_organizations as organizations
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from governor.adapters.organization import ACCOUNT_ACTIONS, QUEUE_ACTIONS
from governor.policy import Policy
from infra.constructs.function import ENVIRONMENT_LIMIT, ENVIRONMENT_OTHERS, GovernorFunction, policy_subset
from infra.constructs.hub_regions import hub_region_groups
from infra.constructs.member_accounts import ForwardedPattern, MemberGrant, member_account_grants
from infra.constructs.reserved_tags import reserved_tag_document
from infra.constructs.shared import dead_letter_queue
from infra.nag import acknowledge, nag_name
from infra.settings import OrganizationSettings, SettingsError

#: CloudFormation's limit for a TemplateBody passed inline (a larger template must go through S3).
TEMPLATE_BODY_LIMIT = 51_200


def fanout_environment_bytes(policy: Policy, organization: OrganizationSettings, function: str, sections: Any) -> int:
    """About how large a fanned-out function's environment gets: its policy section, the fan-out settings (with the
    longest queue URL and account id they can hold) and the rest. Lambda refuses a deploy past 4 KB."""
    settings = {
        "queue_url": "https://sqs.ap-southeast-1.amazonaws.com/123456789012/" + "q" * 80,
        "regions": list(organization.regions),
        "home_account": "123456789012",
        "accounts": list(organization.sweep_accounts),
        "ou_ids": list(organization.ou_ids),
        "attempts": organization.sweep_attempts,
        "breaker_targets": organization.breaker_targets,
    }
    return len(policy_subset(policy, sections, function)) + len(json.dumps(settings)) + ENVIRONMENT_OTHERS


#: Synthesizes the spoke's template from the hub's triggers and grants (``infra.stacks.spoke.synthesize_spoke``,
#: handed over by the stack: a construct does not import a stack).
SpokeSynthesizer = Callable[
    [Policy, OrganizationSettings, list[ForwardedPattern], list[MemberGrant], dict[str, Any]], dict[str, Any]
]


class OrganizationHub(Construct):
    """The hub half of organisation mode: accept the organisation's events, deploy the spokes, act through them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        policy: Policy,
        organization: OrganizationSettings,
        functions: dict[str, GovernorFunction],
        bus_name: str,
        context: dict[str, Any],
        key: kms.IKey,
        spoke: SpokeSynthesizer,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        patterns = [
            ForwardedPattern(name, rule, pattern, description)
            for name, function in sorted(functions.items())
            for rule, pattern, description in function.event_patterns
        ]
        grants = member_account_grants(stack, {name: f.role for name, f in functions.items()})
        acting = sorted({grant.function for grant in grants})
        self.intake = self._intake(organization, functions, patterns, bus_name)
        self.spoke_template = spoke(policy, organization, patterns, grants, context)
        body = json.dumps(self.spoke_template, separators=(",", ":"), sort_keys=True)
        if len(body.encode()) > TEMPLATE_BODY_LIMIT:
            raise SettingsError(
                f"context organization: the spoke template takes {len(body.encode())} bytes, more than the "
                f"{TEMPLATE_BODY_LIMIT} a StackSet TemplateBody holds"
            )
        for name in acting:
            self._assume_spoke_role(functions[name], organization)
        # After the spoke's grants were taken from the hub roles: listing accounts and the queues stay hub-only.
        for name, function in sorted(functions.items()):
            size = fanout_environment_bytes(policy, organization, name, function.capability.environment_sections)
            if function.capability.fans_out and size > ENVIRONMENT_LIMIT:
                raise SettingsError(
                    f"context organization.sweep_accounts: the {name} function's environment would take about {size} "
                    f"bytes, more than Lambda's {ENVIRONMENT_LIMIT}; list fewer accounts (ou_ids lists them at run "
                    "time instead)"
                )
        self.target_queues = {
            name: self._fan_out(function, organization, key)
            for name, function in sorted(functions.items())
            if function.capability.fans_out
        }
        self.stack_set = cfn.CfnStackSet(
            self,
            "Spokes",
            stack_set_name=f"{stack.stack_name}-spokes",
            description="GPU Fleet Governor spokes: event forwarding, the execution role, CloudWatch agent config",
            permission_model="SERVICE_MANAGED",
            call_as=organization.call_as,
            auto_deployment=cfn.CfnStackSet.AutoDeploymentProperty(
                enabled=True, retain_stacks_on_account_removal=False
            ),
            capabilities=["CAPABILITY_NAMED_IAM"],
            managed_execution={"Active": True},
            operation_preferences=cfn.CfnStackSet.OperationPreferencesProperty(
                max_concurrent_percentage=organization.max_concurrent_percentage,
                failure_tolerance_percentage=organization.failure_tolerance_percentage,
                region_concurrency_type="PARALLEL",
            ),
            parameters=[
                cfn.CfnStackSet.ParameterProperty(parameter_key="HubAccountId", parameter_value=Aws.ACCOUNT_ID),
                cfn.CfnStackSet.ParameterProperty(parameter_key="HubBusArn", parameter_value=self.intake.event_bus_arn),
                cfn.CfnStackSet.ParameterProperty(
                    parameter_key="HubFunctionRoleArns",
                    parameter_value=Fn.join(",", [functions[name].role.role_arn for name in acting]),
                ),
            ],
            stack_instances_group=[
                cfn.CfnStackSet.StackInstancesProperty(
                    # The hub's own account is governed by the hub's own default-bus rules: a spoke there would
                    # deliver every event twice.
                    deployment_targets=cfn.CfnStackSet.DeploymentTargetsProperty(
                        organizational_unit_ids=list(organization.ou_ids),
                        account_filter_type="DIFFERENCE",
                        accounts=[Aws.ACCOUNT_ID],
                    ),
                    regions=list(organization.regions),
                ),
                *hub_region_groups(self, organization, stack.region),
            ],
            template_body=body,
        )
        self.reserved_tags = self._reserved_tags(policy, organization, functions) if organization.reserve_tags else None
        CfnOutput(
            stack,
            "OrganizationIntakeBusArn",
            value=self.intake.event_bus_arn,
            description="Event bus the spokes forward to (PutEvents from the organisation only)",
        )

    def _intake(
        self,
        organization: OrganizationSettings,
        functions: dict[str, GovernorFunction],
        patterns: list[ForwardedPattern],
        bus_name: str,
    ) -> events.EventBus:
        """A bus of its own for the organisation's events: the account's default bus and its policy stay untouched.

        The same patterns as the default-bus rules route to the same functions; forwarded events keep the member
        account and region they happened in (EventBridge sets both; no sender can choose them).
        """
        intake = events.EventBus(self, "Intake", event_bus_name=f"{bus_name}-org")
        intake.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OrganizationMembersOnly",
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[intake.event_bus_arn],
                conditions={"StringEquals": {"aws:PrincipalOrgID": organization.id}},
            )
        )
        for forwarded in patterns:
            function = functions[forwarded.function]
            rule = events.Rule(
                self,
                f"{forwarded.function.capitalize()}{forwarded.rule}",
                event_bus=intake,
                event_pattern=forwarded.pattern,
                description=f"organisation: {forwarded.description}"[:512],
            )
            rule.add_target(function.rule_target())
            function.triggers.append(f"EventBridge rule (organisation intake bus): {forwarded.description}")
        return intake

    def _fan_out(self, function: GovernorFunction, organization: OrganizationSettings, key: kms.IKey) -> sqs.Queue:
        """The function's scheduled sweep runs once per (account, region): its schedule plans, its queue delivers.

        Bounded concurrency is the event source mapping's ``maximum_concurrency``; per-target retries are SQS
        redeliveries after the visibility timeout (the function's timeout plus a margin, so every attempt fits in a
        sweep interval); the handler turns a target's last failed attempt into a finding, and the DLQ keeps only
        what could not even be reported.
        """
        timeout = function.function.timeout or Duration.minutes(5)
        dlq = dead_letter_queue(
            self,
            f"{function.name.capitalize()}TargetsDlq",
            key,
            "This queue is the sweep targets queue's dead-letter queue; a DLQ for it would only move the same messages "
            "one hop.",
        )
        queue = sqs.Queue(
            self,
            f"{function.name.capitalize()}Targets",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(timeout.to_seconds() + 30),
            retention_period=Duration.hours(1),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=organization.sweep_attempts),
        )
        # Here, not through ``add_event_source``: everything organisation mode adds stays under this construct.
        lambda_.EventSourceMapping(
            self,
            f"{function.name.capitalize()}TargetsMapping",
            target=function.function,
            event_source_arn=queue.queue_arn,
            batch_size=1,
            max_concurrency=organization.sweep_concurrency,
            report_batch_item_failures=True,
        )
        queue.grant_consume_messages(function.role)
        function.add_statement(QUEUE_ACTIONS, [queue.queue_arn])
        if not organization.sweep_accounts:
            stack = Stack.of(self)
            parents = [
                f"arn:{stack.partition}:organizations::*:ou/{organization.id}/ou-*",
                f"arn:{stack.partition}:organizations::*:root/{organization.id}/r-*",
            ]
            function.add_statement(
                ACCOUNT_ACTIONS,
                parents,
                reason="The OUs are named by id in the organisation's ARNs, which hold the management account's id; "
                "the grant lists only the parents (OUs, root) of this organisation.",
            )
        function.function.add_environment(
            "GOVERNOR_FANOUT",
            Stack.of(self).to_json_string(
                {
                    "queue_url": queue.queue_url,
                    "regions": list(organization.regions),
                    "home_account": Aws.ACCOUNT_ID,
                    "accounts": list(organization.sweep_accounts),
                    "ou_ids": list(organization.ou_ids),
                    "attempts": organization.sweep_attempts,
                    "breaker_targets": organization.breaker_targets,
                }
            ),
        )
        function.triggers.append(
            f"SQS sweep targets (organisation fan-out, at most {organization.sweep_concurrency} at once, "
            f"{organization.sweep_attempts} attempts each)"
        )
        return queue

    def _reserved_tags(
        self, policy: Policy, organization: OrganizationSettings, functions: dict[str, GovernorFunction]
    ) -> organizations.CfnPolicy:
        """A service control policy on the organisation's OUs: only the governor's roles (hub and spokes) and
        ``organization.tag_admins`` write the fleet tag keys and ``governor:*`` (``infra.constructs.reserved_tags``)."""
        stack = Stack.of(self)
        allowed: list[Any] = [
            *(function.role.role_arn for _, function in sorted(functions.items())),
            f"arn:{stack.partition}:iam::*:role/{organization.spoke_role_name}-*",
            *organization.tag_admins,
        ]
        return organizations.CfnPolicy(
            self,
            "ReservedTagKeys",
            name=f"{stack.stack_name}-reserved-tag-keys",
            type="SERVICE_CONTROL_POLICY",
            description="GPU Fleet Governor: only the governor and named admins write the fleet and governor:* tags",
            content=reserved_tag_document(policy, allowed),
            target_ids=list(organization.ou_ids),
        )

    def _assume_spoke_role(self, function: GovernorFunction, organization: OrganizationSettings) -> None:
        """The function may assume its own capability's spoke role (no other's), in any account of the organisation,
        in the spoke regions only."""
        stack = Stack.of(self)
        resources = [
            f"arn:{stack.partition}:iam::*:role/{organization.spoke_role(region, function.name)}"
            for region in organization.regions
        ]
        function.add_statement(["sts:AssumeRole"], resources, {"StringEquals": {"aws:ResourceOrgID": organization.id}})
        function.function.add_environment("GOVERNOR_SPOKE_ROLE", organization.spoke_role_name)
        function.function.add_environment("GOVERNOR_HOME_ACCOUNT", Aws.ACCOUNT_ID)
        for resource in resources:
            acknowledge(
                function.role,
                f"AwsSolutions::AwsSolutions-IAM5[Resource::{nag_name(function.role, resource)}]",
                "The capability's spoke role has the same name in every member account (one per region); which "
                "accounts exist is known only at run time. aws:ResourceOrgID limits it to the organisation's accounts, "
                "and that spoke role's trust policy admits only this function role.",
            )
