"""Issue 33's attack on the Spot function, through its real handler and adapters on moto.

On the main branch of the time a crafted interruption warning, sent to the function directly, took an On-Demand
inference server out of its target group and sent it SIGUSR1: the function never checked that the instance was Spot,
nor that the event was about the account and region it reads, nor which target groups it drained.
"""

from __future__ import annotations

import boto3
import pytest

from governor_cli.demo.bootstrap import LocalStack
from tests.adapters.test_spot_moto import Deployed, aws, commands_sent, event  # noqa: F401 - the aws fixture
from tests.adapters.test_spot_recovery import REGION, Fleet


def _on_demand_server(fleet: Fleet) -> str:
    """An inference server: GPU, fleet-tagged (anyone may tag), On-Demand."""
    launched = fleet.ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": fleet.template, "Version": "1"},
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=fleet.subnets["us-east-1a"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "gpu-fleet", "Value": "true"}]}],
    )
    return str(launched["Instances"][0]["InstanceId"])


def _target_group(fleet: Fleet, name: str, instance: str, tags: dict[str, str] | None = None) -> str:
    elbv2 = boto3.client("elbv2", region_name=REGION)
    arn = elbv2.create_target_group(Name=name, Protocol="HTTP", Port=80, VpcId=fleet.vpc)["TargetGroups"][0][
        "TargetGroupArn"
    ]
    if tags:
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": instance}])
    return str(arn)


def _targets(arn: str) -> set[str]:
    health = boto3.client("elbv2", region_name=REGION).describe_target_health(TargetGroupArn=arn)
    return {d["Target"]["Id"] for d in health["TargetHealthDescriptions"]}


def test_a_crafted_warning_about_an_on_demand_server_touches_nothing(aws: LocalStack) -> None:  # noqa: F811
    fleet = Fleet()
    server = _on_demand_server(fleet)
    web = _target_group(fleet, "inference", server, {"gpu-fleet": "true"})
    deployed = Deployed(aws, enforce=True, deregister_from_target_groups=True)
    result = deployed.run(event("interruption-warning.json", server))
    assert result["status"] == "ignored" and "not a Spot instance" in result["reason"]
    assert commands_sent() == [] and _targets(web) == {server}


@pytest.mark.parametrize(
    "where",
    [{"region": "eu-west-1"}, {"account": "999999999999"}],
    ids=["another-region", "another-account"],
)
def test_a_warning_about_another_account_or_region_is_not_resolved_here(
    aws: LocalStack,  # noqa: F811
    where: dict[str, str],
) -> None:
    fleet = Fleet()
    (spot,) = fleet.launch()
    deployed = Deployed(aws, enforce=True)
    result = deployed.run(event("interruption-warning.json", spot, **where))
    assert result["status"] == "ignored" and "the function reads" in result["reason"]
    assert commands_sent() == []


def test_a_spot_instance_leaves_only_the_fleets_target_groups(aws: LocalStack) -> None:  # noqa: F811
    fleet = Fleet()
    (spot,) = fleet.launch()
    trainers = _target_group(fleet, "trainers", spot, {"gpu-fleet": "true"})
    website = _target_group(fleet, "website", spot)  # someone registered a Spot GPU box behind the website
    deployed = Deployed(aws, enforce=True, deregister_from_target_groups=True)
    result = deployed.run(event("interruption-warning.json", spot))
    assert result["target_groups"] == [trainers] and _targets(trainers) == set() and _targets(website) == {spot}
    assert any("without fleet.fleet_tags" in error and website in error for error in result["errors"])
    assert len(commands_sent()) == 1  # the checkpoint still goes out
