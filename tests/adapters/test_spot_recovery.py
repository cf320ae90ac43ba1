"""Spot recovery on moto: target-group deregistration, Auto Scaling lifecycle completion, relaunch with fallbacks."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.domain.fleet import Instance
from governor.spot.ports import Candidate
from governor.spot.recovery import REPLACES_TAG, SpotRecoveryActions

REGION = "us-east-1"
FLEET = {"gpu-fleet": "true"}


class Fleet:
    """A VPC with subnets in two zones, a GPU launch template and helpers to launch Spot instances from it."""

    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.subnets = {
            zone: self.ec2.create_subnet(VpcId=self.vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
            for zone, cidr in (("us-east-1a", "10.0.1.0/24"), ("us-east-1b", "10.0.2.0/24"))
        }
        image = self.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        self.template = self.ec2.create_launch_template(
            LaunchTemplateName="trainer", LaunchTemplateData={"ImageId": image, "InstanceType": "g5.xlarge"}
        )["LaunchTemplate"]["LaunchTemplateId"]

    def launch(self, count: int = 1, tags: dict[str, str] | None = None, instance_type: str = "g5.xlarge") -> list[str]:
        tags = {"owner": "ana", "team": "vision", "gpu-fleet": "true", **(tags or {})}
        launched = self.ec2.run_instances(
            LaunchTemplate={"LaunchTemplateId": self.template, "Version": "1"},
            InstanceType=instance_type,
            MinCount=count,
            MaxCount=count,
            SubnetId=self.subnets["us-east-1a"],
            InstanceMarketOptions={"MarketType": "spot"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )
        return [i["InstanceId"] for i in launched["Instances"]]

    def instance(self, instance_id: str) -> Instance:
        found = Ec2Reader(REGION).instance(instance_id)
        assert found is not None
        return found


class CapacityShortEc2:
    """moto's EC2 client, except that RunInstances for the listed types fails with a capacity error, as AWS does."""

    def __init__(self, real: Any, short: set[str], code: str = "InsufficientInstanceCapacity") -> None:
        self._real = real
        self._short = short
        self._code = code
        self.requests: list[dict[str, Any]] = []

    def run_instances(self, **request: Any) -> Any:
        self.requests.append(request)
        if request["InstanceType"] in self._short:
            raise ClientError(
                {"Error": {"Code": self._code, "Message": f"no {request['InstanceType']} capacity"}}, "RunInstances"
            )
        return self._real.run_instances(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@mock_aws
def test_deregisters_only_from_target_groups_that_list_the_instance() -> None:
    fleet = Fleet()
    interrupted, other = fleet.launch(2)
    elbv2 = boto3.client("elbv2", region_name=REGION)

    def group(name: str, kind: str = "instance") -> str:
        return elbv2.create_target_group(Name=name, Protocol="HTTP", Port=80, VpcId=fleet.vpc, TargetType=kind)[
            "TargetGroups"
        ][0]["TargetGroupArn"]

    serving, untouched, by_ip = group("serving"), group("untouched"), group("by-ip", "ip")
    elbv2.register_targets(TargetGroupArn=serving, Targets=[{"Id": interrupted, "Port": 8080}, {"Id": other}])
    elbv2.register_targets(TargetGroupArn=untouched, Targets=[{"Id": other}])
    instance = fleet.instance(interrupted)
    elbv2.register_targets(TargetGroupArn=by_ip, Targets=[{"Id": instance.private_ip, "Port": 80}])

    for arn in (serving, untouched, by_ip):
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": "gpu-fleet", "Value": "true"}])
    recovery = SpotRecoveryActions(REGION)
    assert sorted(recovery.deregister(instance, FLEET).groups) == sorted([serving, by_ip])

    def listed(arn: str) -> set[str]:
        health = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
        return {d["Target"]["Id"] for d in health}

    assert listed(serving) == {other} and listed(untouched) == {other} and listed(by_ip) == set()
    assert recovery.deregister(instance, FLEET).groups == []


@mock_aws
def test_lifecycle_action_is_a_no_op_when_nothing_is_pending() -> None:
    fleet = Fleet()
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="trainers",
        LaunchTemplate={"LaunchTemplateId": fleet.template, "Version": "1"},
        MinSize=1,
        MaxSize=1,
        VPCZoneIdentifier=fleet.subnets["us-east-1a"],
    )
    member = autoscaling.describe_auto_scaling_instances()["AutoScalingInstances"][0]["InstanceId"]
    recovery = SpotRecoveryActions(REGION)
    outcome = recovery.complete_lifecycle_action(member)
    assert outcome.auto_scaling_group == "trainers" and outcome.completed == ()
    assert "no lifecycle action pending" in outcome.note
    (loner,) = fleet.launch()
    assert recovery.complete_lifecycle_action(loner).note == "not in an Auto Scaling group"


def test_lifecycle_action_continues_every_termination_hook_holding_the_instance() -> None:
    """moto has no CompleteLifecycleAction; a botocore Stubber checks the exact calls AWS would receive."""
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    with Stubber(autoscaling) as stub:
        stub.add_response(
            "describe_auto_scaling_instances",
            {
                "AutoScalingInstances": [
                    {
                        "InstanceId": "i-0abc12345678",
                        "AutoScalingGroupName": "trainers",
                        "AvailabilityZone": "us-east-1a",
                        "LifecycleState": "Terminating:Wait",
                        "HealthStatus": "HEALTHY",
                        "ProtectedFromScaleIn": False,
                    }
                ]
            },
            {"InstanceIds": ["i-0abc12345678"]},
        )
        stub.add_response(
            "describe_lifecycle_hooks",
            {
                "LifecycleHooks": [
                    {"LifecycleHookName": "launch", "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"},
                    {"LifecycleHookName": "drain", "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"},
                    {"LifecycleHookName": "gone", "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"},
                ]
            },
            {"AutoScalingGroupName": "trainers"},
        )
        stub.add_response(
            "complete_lifecycle_action",
            {},
            {
                "LifecycleHookName": "drain",
                "AutoScalingGroupName": "trainers",
                "LifecycleActionResult": "CONTINUE",
                "InstanceId": "i-0abc12345678",
            },
        )
        stub.add_client_error(
            "complete_lifecycle_action", "ValidationError", "No active Lifecycle Action found with instance ID"
        )
        outcome = SpotRecoveryActions(REGION, autoscaling=autoscaling).complete_lifecycle_action("i-0abc12345678")
        stub.assert_no_pending_responses()
    assert outcome.completed == ("drain",) and outcome.note == "continued drain"


@mock_aws
def test_relaunches_from_the_same_template_version_as_spot_with_owner_tags() -> None:
    fleet = Fleet()
    (interrupted,) = fleet.launch(tags={"governor:checkpoint-command": "pkill -USR1 python"})
    replacement = SpotRecoveryActions(REGION).replace(fleet.instance(interrupted), [Candidate("g5.xlarge")], "spot")
    assert replacement.instance_id and replacement.reason is None
    new = fleet.instance(replacement.instance_id)
    assert new.lifecycle == "spot" and new.launch_template_id == fleet.template and new.type == "g5.xlarge"
    assert new.tags[REPLACES_TAG] == interrupted and new.tags["team"] == "vision"
    assert new.tags["governor:checkpoint-command"] == "pkill -USR1 python"


@mock_aws
def test_capacity_errors_fall_back_to_the_next_type_and_zone() -> None:
    fleet = Fleet()
    (interrupted,) = fleet.launch()
    ec2 = CapacityShortEc2(fleet.ec2, short={"g5.xlarge"})
    recovery = SpotRecoveryActions(REGION, ec2=ec2)
    wanted = [Candidate("g5.xlarge", "us-east-1a"), Candidate("g6.xlarge", "us-east-1b")]
    replacement = recovery.replace(fleet.instance(interrupted), wanted, "on-demand")
    assert replacement.instance_id is not None
    first, second = replacement.attempts
    assert first.error and first.error.startswith("capacity: InsufficientInstanceCapacity")
    assert (second.instance_type, second.zone, second.error) == ("g6.xlarge", "us-east-1b", None)
    assert [r["SubnetId"] for r in ec2.requests] == [fleet.subnets["us-east-1a"], fleet.subnets["us-east-1b"]]
    assert all("InstanceMarketOptions" not in r for r in ec2.requests)
    new = fleet.instance(replacement.instance_id)
    assert new.zone == "us-east-1b" and new.type == "g6.xlarge" and new.lifecycle == "on-demand"


@mock_aws
def test_no_capacity_anywhere_is_an_outcome_with_every_attempt() -> None:
    fleet = Fleet()
    (interrupted,) = fleet.launch()
    recovery = SpotRecoveryActions(REGION, ec2=CapacityShortEc2(fleet.ec2, short={"g5.xlarge", "g6.xlarge"}))
    wanted = [Candidate("g5.xlarge"), Candidate("g6.xlarge"), Candidate("g5.xlarge", "us-west-2a")]
    replacement = recovery.replace(fleet.instance(interrupted), wanted, "spot")
    assert replacement.instance_id is None and len(replacement.attempts) == 3
    assert replacement.reason and "g6.xlarge@any: capacity: InsufficientInstanceCapacity" in replacement.reason
    assert "g5.xlarge@us-west-2a: no subnet in that zone" in replacement.reason


@mock_aws
def test_throttling_propagates_so_the_invocation_retries() -> None:
    fleet = Fleet()
    (interrupted,) = fleet.launch()
    recovery = SpotRecoveryActions(REGION, ec2=CapacityShortEc2(fleet.ec2, {"g5.xlarge"}, "RequestLimitExceeded"))
    with pytest.raises(ClientError):
        recovery.replace(fleet.instance(interrupted), [Candidate("g5.xlarge")], "spot")
