"""Network's scenarios: SSH opened to the world on a security group (revoked), and on a protected group (spared)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from governor.domain.decision import Finding
from governor_cli.testing.scenarios import PROTECTED_TAG, Case, cloudtrail_call

if TYPE_CHECKING:
    from governor_cli.testing.scenarios import Scenarios

# The scenarios' security groups carry no GPU instance: judging them all keeps every network case meaningful.
SOAK: dict[str, Any] = {"enforce": True, "scope": "all", "protected_groups": {"tags": {PROTECTED_TAG: "true"}}}


def _open_group(scenarios: Scenarios, index: int, tags: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    ec2 = scenarios.ec2
    spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
    group = ec2.create_security_group(
        GroupName=f"training-{index}-{uuid.uuid4().hex[:6]}",
        Description="gpu nodes",
        VpcId=scenarios.vpc,
        **({"TagSpecifications": spec} if tags else {}),
    )["GroupId"]
    permission = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[permission])
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
    items = [
        {
            "securityGroupRuleId": r["SecurityGroupRuleId"],
            "groupId": group,
            "isEgress": False,
            "ipProtocol": r["IpProtocol"],
            "fromPort": r["FromPort"],
            "toPort": r["ToPort"],
            "cidrIpv4": r.get("CidrIpv4", ""),
        }
        for r in rules["SecurityGroupRules"]
        if not r["IsEgress"]
    ]
    request = {
        "groupId": group,
        "ipPermissions": {
            "items": [
                {
                    "ipProtocol": "tcp",
                    "fromPort": 22,
                    "toPort": 22,
                    "ipRanges": {"items": [{"cidrIp": "0.0.0.0/0"}]},
                }
            ]
        },
    }
    event = cloudtrail_call(
        "aws.ec2",
        "AuthorizeSecurityGroupIngress",
        request,
        {"_return": True, "securityGroupRuleSet": {"items": items}},
    )
    return group, event


def network_world_open_ssh(scenarios: Scenarios, index: int) -> Case:
    group, event = _open_group(scenarios, index, {"team": "vision"})
    return Case(f"ssh open to the world #{index}", "network", event, group)


def network_protected_group(scenarios: Scenarios, index: int) -> Case:
    group, event = _open_group(scenarios, index, {PROTECTED_TAG: "true"})
    return Case(f"ssh open on a protected group #{index}", "network", event, group, forbidden=True)


CASES = ((4, network_world_open_ssh), (1, network_protected_group))


def critical_finding() -> Finding:
    """A critical finding about a group of its own (SSH open to the world): what the notifier posts and emails."""
    resource = f"sg-{uuid.uuid4().hex[:17]}"
    return Finding(
        policy="network",
        rule="network.world-open",
        severity="critical",
        resource=resource,
        title=f"SSH open to the world on {resource}",
        team="vision",
        owner="alice@example.com",
        event_id=str(uuid.uuid4()),
        id=uuid.uuid4().hex,
    )
