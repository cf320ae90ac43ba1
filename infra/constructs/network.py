"""The network enforcer: one function fed by six EC2 CloudTrail calls within seconds and by a daily drift sweep.

Its role may describe, revoke ingress rules of this account's security groups and remove public addresses, and
nothing else: it cannot add rules, swap an interface's security groups, or touch instances otherwise.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Stack
from constructs import Construct

from governor.network.events import EVENT_NAMES
from governor.registry import REGISTRY
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, successful_calls

# Every registered action that is not a Describe* read -> the EC2 resource types (in this account and region) it may
# touch (the types the Service Authorization Reference lists for it; tests/infra/sar.py checks them). A registered
# action missing here stops the synth: it must be scoped before it is granted.
SCOPED = {
    "ec2:RevokeSecurityGroupIngress": ("security-group",),
    "ec2:DisassociateAddress": ("elastic-ip", "network-interface"),
    "ec2:ModifyNetworkInterfaceAttribute": ("network-interface", "instance"),
}


class NetworkEnforcer(CapabilityConstruct):
    """Holds security groups and public IPv4 addresses of GPU instances to the ``network`` policy."""

    CAPABILITY = REGISTRY["network"]
    FUNCTION_ID = "Network"

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        stack = Stack.of(self)
        function = self.function
        permissions = self.capability.permissions(self.policy)
        self.on_rule(
            "CloudTrailCalls",
            successful_calls(["aws.ec2"], sorted(EVENT_NAMES), event_source="ec2.amazonaws.com"),
        )
        self.on_schedule("DriftSweep")
        function.add_unscoped_statement(
            "Describe",
            [action for action in permissions if action.startswith("ec2:Describe")],
            "EC2 Describe* calls (security groups, rules, instances, addresses, interfaces) support no resource-level "
            "permissions; they read only.",
        )
        reasons = {
            "security-group": "Any security group in this account and region may be opened after deploy; the only "
            "action on it is RevokeSecurityGroupIngress (never Authorize or Delete). IAM has no condition key for the "
            "interfaces using a group, so ownership is proven in code: rules are revoked only in groups every network "
            "interface of which is a GPU instance's (DescribeNetworkInterfaces, re-read right before revoking); a "
            "group shared with a load balancer or any other interface is reported, never changed.",
            "elastic-ip": "Any Elastic IP in this account and region may be attached to a GPU instance; the only "
            "action is DisassociateAddress (the allocation is never released).",
            "network-interface": "Interfaces of GPU instances are created at run time; only DisassociateAddress and "
            "ModifyNetworkInterfaceAttribute (AssociatePublicIpAddress=false; no security-group resource is granted, "
            "so groups cannot be swapped).",
            "instance": "Instances are launched at run time; the instance ARN is in the request context of "
            "ModifyNetworkInterfaceAttribute only; no instance action is granted.",
        }
        unscoped = sorted(a for a in permissions if not a.startswith("ec2:Describe") and a not in SCOPED)
        if unscoped:
            raise ValueError(f"network: no resource scope for registered actions {unscoped} (SCOPED)")
        for action, types in SCOPED.items():
            if action not in permissions:
                continue
            function.add_statement(
                [action], [stack.format_arn(service="ec2", resource=kind, resource_name="*") for kind in types]
            )
        for kind, reason in reasons.items():
            function.acknowledge_wildcard(stack.format_arn(service="ec2", resource=kind, resource_name="*"), reason)
