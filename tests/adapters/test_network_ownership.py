"""Issue 33's network attack, through the real handler on moto: a website taken down by a tag.

On the main branch of the time, with ``network.enforce: true``, tagging a web load balancer's security group
``gpu-fleet=true``, or launching one GPU instance into it, made the drift sweep revoke its 0.0.0.0/0 rules (2 -> 0).
Now a group is changed only when every network interface using it is a GPU instance's; anything shared is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.network.handler import handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_network_aws import IMAGE, REGION, aws, cloudtrail, scheduled

WEB = [
    {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]} for port in (22, 443)
]


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _runtime() -> Runtime:
    """Enforcing, default scope (fleet), nothing allowed to face the world: every world rule is an offence."""
    return Runtime(
        policy=parse_policy({"network": {"enforce": True, "world_open_allowed_ports": []}}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


class Vpc:
    def __init__(self, ec2: Any) -> None:
        self.ec2 = ec2
        self.id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.subnet = ec2.create_subnet(VpcId=self.id, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]

    def group(self, name: str, tags: dict[str, str] | None = None) -> str:
        spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
        group = self.ec2.create_security_group(
            GroupName=name, Description=name, VpcId=self.id, **({"TagSpecifications": spec} if tags else {})
        )["GroupId"]
        self.ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=WEB)
        return str(group)

    def load_balancer_interface(self, group: str) -> None:
        """What an Application Load Balancer puts into its group: a requester-managed interface, no instance."""
        self.ec2.create_network_interface(SubnetId=self.subnet, Groups=[group], Description="ELB app/website/50dc6c49")

    def instance(self, group: str, instance_type: str = "g5.xlarge") -> str:
        found = self.ec2.run_instances(
            ImageId=IMAGE,
            InstanceType=instance_type,
            MinCount=1,
            MaxCount=1,
            SubnetId=self.subnet,
            SecurityGroupIds=[group],
        )
        return str(found["Instances"][0]["InstanceId"])


def _world(ec2: Any, group: str) -> int:
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroupRules"]
    return sum(1 for r in rules if not r["IsEgress"] and r.get("CidrIpv4") == "0.0.0.0/0")


@pytest.mark.parametrize(
    "attack",
    ["tag", "gpu-instance", "tag-and-gpu-instance"],
)
def test_the_drift_sweep_never_takes_a_website_down(ec2: Any, attack: str) -> None:
    vpc = Vpc(ec2)
    website = vpc.group("website", {"gpu-fleet": "true"} if "tag" in attack else None)
    vpc.load_balancer_interface(website)
    if "gpu-instance" in attack:
        vpc.instance(website)
    runtime = _runtime()
    result = handle(scheduled(), runtime, aws())
    assert _world(ec2, website) == 2 and result["done"] == []
    (finding,) = [f for f in runtime.sink.findings if f.resource == website]  # type: ignore[attr-defined]
    assert (
        "shared with 1 interface(s) that are not GPU instances'" in finding.detail
        and "ELB app/website" in finding.detail
    )


def test_a_group_shared_with_a_cpu_instance_is_reported_not_changed(ec2: Any) -> None:
    vpc = Vpc(ec2)
    group = vpc.group("mixed")
    vpc.instance(group)
    cpu = vpc.instance(group, "m5.large")
    runtime = _runtime()
    handle(scheduled(), runtime, aws())
    assert _world(ec2, group) == 2
    (finding,) = [f for f in runtime.sink.findings if f.resource == group]  # type: ignore[attr-defined]
    assert cpu in finding.detail


def test_a_group_only_gpu_instances_use_is_still_held_to_the_policy(ec2: Any) -> None:
    vpc = Vpc(ec2)
    group = vpc.group("trainers")
    vpc.instance(group)
    vpc.instance(group, "p4d.24xlarge")
    handle(scheduled(), _runtime(), aws())
    assert _world(ec2, group) == 0


def test_an_authorize_call_on_the_websites_group_changes_nothing(ec2: Any) -> None:
    """The CloudTrail path: a GPU instance launched into the website's group does not make it the fleet's."""
    vpc = Vpc(ec2)
    website = vpc.group("website")
    vpc.load_balancer_interface(website)
    vpc.instance(website)
    event = cloudtrail(
        "AuthorizeSecurityGroupIngress",
        {
            "groupId": website,
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
        },
        {"_return": True},
    )
    runtime = _runtime()
    handle(event, runtime, aws())
    assert _world(ec2, website) == 2
    decisions = [d for _, d in runtime.ledger.decisions if d.resource == website]  # type: ignore[attr-defined]
    assert decisions and not decisions[-1].enforced_actions()


def test_a_gpu_launch_judges_its_groups_at_once(ec2: Any) -> None:
    """A group opened before any instance used it is nobody's proven group; the GPU launch makes it one."""
    vpc = Vpc(ec2)
    group = vpc.group("new-training-group")
    instance = vpc.instance(group)
    event = cloudtrail(
        "RunInstances",
        {"instanceType": "g5.xlarge"},
        {"instancesSet": {"items": [{"instanceId": instance, "instanceType": "g5.xlarge"}]}},
    )
    handle(event, _runtime(), aws())
    assert _world(ec2, group) == 0
