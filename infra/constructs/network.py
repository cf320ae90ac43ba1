"""The network enforcer: one function fed by six EC2 CloudTrail calls within seconds and by a daily drift sweep.

Its role may describe, revoke ingress rules of this account's security groups and remove public addresses, and
nothing else: it cannot add rules, swap an interface's security groups, or touch instances otherwise.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from constructs import Construct

from governor.adapters import ec2, network_addresses, security_groups
from governor.domain.network import EVENT_NAMES
from governor.events.envelopes import CLOUDTRAIL_DETAIL_TYPE
from governor.policy import Policy
from infra.constructs.function import GovernorFunction
from infra.constructs.shared import SharedResources
from infra.nag import acknowledge
from infra.settings import Settings

DECLARED = ec2.IAM_ACTIONS | security_groups.IAM_ACTIONS | network_addresses.IAM_ACTIONS
DESCRIBE = sorted(action for action in DECLARED if action.startswith("ec2:Describe"))
# action -> the EC2 resource types (in this account and region) it may touch
# (the resource types the Service Authorization Reference lists for each action; tests/infra/sar.py checks them)
SCOPED = {
    "ec2:RevokeSecurityGroupIngress": ("security-group",),
    "ec2:DisassociateAddress": ("elastic-ip", "network-interface"),
    "ec2:ModifyNetworkInterfaceAttribute": ("network-interface", "instance"),
}


class NetworkEnforcer(Construct):
    """Holds security groups and public IPv4 addresses of GPU instances to the ``network`` policy."""

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
            "Network",
            name="network",
            description="Revokes offending security-group rules and public IPs on GPU instances (network policy)",
            shared=shared,
            policy=policy,
            settings=settings,
            sections=["network"],
            timeout=Duration.minutes(5),
        )
        function.on_events(
            "CloudTrailCalls",
            events.EventPattern(
                source=["aws.ec2"],
                detail_type=[CLOUDTRAIL_DETAIL_TYPE],
                # A call with an errorCode changed nothing: it must not invoke (and bill) the function.
                detail={
                    "eventSource": ["ec2.amazonaws.com"],
                    "eventName": sorted(EVENT_NAMES),
                    "errorCode": [{"exists": False}],
                },
            ),
            "EC2 calls that open ingress rules or give instances public addresses: " + ", ".join(EVENT_NAMES),
        )
        function.on_schedule(
            "DriftSweep",
            policy.network.sweep_schedule,
            "drift sweep: every security group's ingress rules and every GPU instance's public address",
        )
        function.add_unscoped_statement(
            "Describe",
            DESCRIBE,
            "EC2 Describe* calls (security groups, rules, instances, addresses, interfaces) support no resource-level "
            "permissions; they read only.",
        )
        reasons = {
            "security-group": "Any security group in this account and region may be opened after deploy; the only "
            "action on it is RevokeSecurityGroupIngress (never Authorize or Delete).",
            "elastic-ip": "Any Elastic IP in this account and region may be attached to a GPU instance; the only "
            "action is DisassociateAddress (the allocation is never released).",
            "network-interface": "Interfaces of GPU instances are created at run time; only DisassociateAddress and "
            "ModifyNetworkInterfaceAttribute (AssociatePublicIpAddress=false; no security-group resource is granted, "
            "so groups cannot be swapped).",
            "instance": "Instances are launched at run time; the instance ARN is in the request context of "
            "ModifyNetworkInterfaceAttribute only; no instance action is granted.",
        }
        for action, types in SCOPED.items():
            function.add_statement(
                [action], [stack.format_arn(service="ec2", resource=kind, resource_name="*") for kind in types]
            )
        for kind, reason in reasons.items():
            acknowledge(
                function.role,
                f"AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:"
                f"{kind}/*]",
                reason,
            )
        functions["network"] = function
        self.function = function
