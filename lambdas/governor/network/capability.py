"""The ``network`` capability, declared: offending security-group rules and public IPs on GPU instances."""

from __future__ import annotations

from governor.capability import Capability, Trigger, Uses
from governor.domain.actions import Notify
from governor.network.actions import RemovePublicIp, RevokeIngress
from governor.network.policy import NetworkPolicy

CAPABILITY = Capability(
    name="network",
    stale_outbox="own",
    demo="governor_cli.demo.capabilities.network",
    construct="infra.constructs.network:NetworkEnforcer",
    construct_id="Network",
    acknowledgeable=True,
    member_accounts=True,
    fans_out=True,
    findings="governor.network.findings",
    section="network",
    section_model=NetworkPolicy,
    description="Revokes offending security-group rules and public IPs on GPU instances (network policy)",
    triggers=(
        Trigger(
            "CloudTrailCalls",
            "rule",
            "EC2 calls that open ingress rules or give instances public addresses: ",
            lists="governor.network.events:EVENT_NAMES",
        ),
        Trigger(
            "DriftSweep",
            "schedule",
            "drift sweep: every security group's ingress rules and every GPU instance's public address",
            schedule="network.sweep_schedule",
        ),
    ),
    uses=(
        Uses("governor.adapters.ec2"),
        Uses("governor.network.security_groups"),
        Uses("governor.network.addresses"),
    ),
    actions=(RevokeIngress, RemovePublicIp, Notify),
)
