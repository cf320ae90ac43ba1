"""The shared EC2 reader on moto: GPU instances only, paging, and re-reads of gone instances."""

from __future__ import annotations

import boto3
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.policy import parse_policy


@mock_aws
def test_lists_running_gpu_instances_only_and_rereads() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    gpu = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=3,
        MaxCount=3,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "vision"}]}],
    )
    ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=2, MaxCount=2)
    stopped = gpu["Instances"][0]["InstanceId"]
    ec2.stop_instances(InstanceIds=[stopped])
    reader = Ec2Reader("us-east-1", wildcard_type_filter=False)  # moto does not match wildcard filters
    found = reader.gpu_instances(parse_policy({}).fleet)
    assert sorted(i.id for i in found) == sorted(i["InstanceId"] for i in gpu["Instances"][1:])
    assert all(i.type == "g5.xlarge" and i.tags["team"] == "vision" and i.state == "running" for i in found)
    again = reader.instance(found[0].id)
    assert again is not None and again.id == found[0].id
    assert reader.instance("i-0123456789abcdef0") is None
