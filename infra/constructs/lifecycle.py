"""The lifecycle capability: who launched each GPU instance, and its usage sessions for cost attribution."""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Stack
from aws_cdk import aws_events as events
from constructs import Construct

from governor.adapters import ec2 as ec2_adapter
from governor.domain.actions import Tag
from governor.domain.tagging import KUBERNETES_TAG_PREFIX, watched_tag_keys
from governor.lifecycle import pricing as pricing_adapter
from governor.lifecycle.domain import CLOSING_STATES, RUNNING, STATE_CHANGE
from governor.registry import REGISTRY
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, successful_calls
from infra.nag import acknowledge_wildcard


class Lifecycle(CapabilityConstruct):
    """One function on three triggers: GPU RunInstances calls, instance state changes, and the daily reconciliation.

    Its role may tag only GPU-family instances, and only with the creator and launch-time keys; everything else
    it does is reading EC2 and writing the ledger.
    """

    CAPABILITY = REGISTRY["lifecycle"]

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        policy = self.policy
        lifecycle = policy.lifecycle
        families = policy.fleet.gpu_families
        self.on_rule(
            "RunInstances",
            successful_calls(
                ["aws.ec2"],
                ["RunInstances"],
                event_source="ec2.amazonaws.com",
                responseElements={
                    "instancesSet": {"items": {"instanceType": [{"prefix": family} for family in families]}}
                },
            ),
        )
        self.on_rule(
            "GovernorTags",
            successful_calls(
                ["aws.ec2"],
                ["CreateTags"],
                event_source="ec2.amazonaws.com",
                # Exemptions, snoozes, command names, marks, ownership (owner, team, fleet tags) and Kubernetes claims:
                # every setting is recorded with its author (governor.domain.tagging).
                requestParameters={
                    "tagSet": {"items": {"key": [*watched_tag_keys(policy), {"prefix": KUBERNETES_TAG_PREFIX}]}}
                },
            ),
        )
        self.on_rule(
            "StateChange",
            events.EventPattern(
                source=["aws.ec2"],
                detail_type=[STATE_CHANGE],
                detail={"state": [RUNNING, *sorted(CLOSING_STATES)]},
            ),
        )
        self.on_schedule("Reconcile")
        self.function.add_unscoped_statement(
            "DescribeInstances",
            sorted(ec2_adapter.IAM_ACTIONS),
            "ec2:DescribeInstances supports no resource-level permissions; the function re-reads the launched or "
            "changed instance and lists running GPU instances for the reconciliation.",
        )
        stack = Stack.of(self)
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        self.function.add_statement(
            Tag.IAM,
            [instances],
            conditions={
                "StringLike": {"ec2:InstanceType": policy.fleet.iam_instance_type_patterns()},
                "ForAllValues:StringEquals": {"aws:TagKeys": [lifecycle.creator_tag, lifecycle.launched_at_tag]},
            },
        )
        acknowledge_wildcard(
            self.function.role,
            instances,
            "New instances are unknown at deploy time; CreateTags is limited to GPU-family instance types by the "
            "ec2:InstanceType condition and to the creator and launch-time tag keys by aws:TagKeys.",
        )
        if policy.pricing.use_price_list_api:
            self.function.add_unscoped_statement(
                "PriceList",
                sorted(pricing_adapter.IAM_ACTIONS),
                "pricing:GetProducts reads public list prices and supports no resource-level permissions.",
            )
