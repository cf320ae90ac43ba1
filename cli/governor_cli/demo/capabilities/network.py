"""Network's scenarios: SSH opened to the world on a security group (revoked), and on a protected group (spared); in
the demo, the day's two ingress rules and its closing drift sweep."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from governor.domain.decision import Finding
from governor_cli.demo.trail import Principal
from governor_cli.testing.scenarios import PROTECTED_TAG, Case, cloudtrail_call

if TYPE_CHECKING:
    from governor_cli.demo.run import Simulation
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


# --- the demo ---------------------------------------------------------------------------------------------------

#: The CloudTrail calls its rule receives in the demo (``Simulation.api_call`` delivers them).
CLOUDTRAIL_CALLS = frozenset({"AuthorizeSecurityGroupIngress"})


def target_ports(target: dict[str, Any], runtime: Any) -> Any:
    """Organisation mode: its adapters in a member account and region (its handler's fan-out target builder)."""
    from governor.network.handler import target_aws

    return target_aws(target, runtime)


def _authorize(sim: Simulation, who: Principal, group: str, protocol: str, low: int, high: int, cidr: str) -> None:
    granted = sim.ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[{"IpProtocol": protocol, "FromPort": low, "ToPort": high, "IpRanges": [{"CidrIp": cidr}]}],
    )
    rules = [
        {
            "groupOwnerId": sim.trail.account,
            "groupId": group,
            "securityGroupRuleId": rule["SecurityGroupRuleId"],
            "isEgress": False,
            "ipProtocol": protocol,
            "fromPort": low,
            "toPort": high,
            "cidrIpv4": cidr,
        }
        for rule in granted.get("SecurityGroupRules", [])
    ]
    sim.api_call(
        who,
        "ec2.amazonaws.com",
        "AuthorizeSecurityGroupIngress",
        request={
            "groupId": group,
            "ipPermissions": {
                "items": [
                    {
                        "ipProtocol": protocol,
                        "fromPort": low,
                        "toPort": high,
                        "groups": {},
                        "ipRanges": {"items": [{"cidrIp": cidr}]},
                        "ipv6Ranges": {},
                        "prefixListIds": {},
                    }
                ]
            },
        },
        response={"_return": True, "securityGroupRuleSet": {"items": rules}},
    )


def incidents(sim: Simulation) -> dict[int, Callable[[], None]]:
    """SSH opened to the world on the training group by an administrator, then a training port to a private range."""
    admin = Principal("ops-admin")

    def world_open_ssh() -> None:
        _authorize(sim, admin, sim.training_group, "tcp", 22, 22, "0.0.0.0/0")

    def training_port_to_cidr() -> None:
        _authorize(sim, Principal("bo"), sim.training_group, "tcp", 2222, 2223, "10.20.0.0/16")

    return {60: world_open_ssh, 70: training_port_to_cidr}


def close(sim: Simulation) -> None:
    """The day ends with a drift sweep: every group's ingress rules and every GPU instance's public address."""
    sim.invoke("network", sim.scheduled({"sweep": "drift"}))
