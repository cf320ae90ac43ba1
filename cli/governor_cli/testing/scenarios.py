"""Mixed, independent events for the reliability runs: each case creates its own resource on the emulator, so its
expected outcome does not depend on any other event (the fault run can be compared case by case with a clean run).

Cases exist only for capabilities whose handler is present. ``forbidden`` names resources the policy must never
touch (non-GPU instances, protected groups): any action on them is an action outside the policy.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.policy import Policy, parse_policy
from governor_cli.testing.deployment import REGION, handler_names

ACCOUNT = "123456789012"
PROTECTED_TAG = "governor:protected"
SOAK_POLICY: dict[str, Any] = {
    "fleet": {"checkpoint_commands": {"train": "pkill -USR1 train"}},
    "spot": {"enforce": True},
    # The scenarios' security groups carry no GPU instance: judging them all keeps every network case meaningful.
    "network": {"enforce": True, "scope": "all", "protected_groups": {"tags": {PROTECTED_TAG: "true"}}},
    "keys": {"enforce": True},
    "lifecycle": {"enforce": True},
}


def soak_policy() -> Policy:
    """Enforcement on for the event-driven capabilities, so a case either acts or the policy says why not."""
    return parse_policy(SOAK_POLICY, source="reliability policy")


@dataclass
class Case:
    """One event for one function, about one resource; ``acts`` is what a clean run is expected to do with it."""

    name: str
    function: str
    event: dict[str, Any]
    resource: str
    forbidden: bool = False
    kind: str = ""

    @property
    def event_id(self) -> str:
        return str(self.event["id"])


def _envelope(detail_type: str, source: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT,
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [],
        "detail": detail,
    }


def _cloudtrail(source: str, name: str, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
    service = source.split(".", 1)[1]
    return _envelope(
        "AWS API Call via CloudTrail",
        source,
        {
            "eventVersion": "1.09",
            "userIdentity": {
                "type": "IAMUser",
                "arn": f"arn:aws:iam::{ACCOUNT}:user/alice",
                "accountId": ACCOUNT,
                "userName": "alice",
            },
            "eventTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "eventSource": f"{service}.amazonaws.com",
            "eventName": name,
            "awsRegion": REGION,
            "sourceIPAddress": "198.51.100.7",
            "requestParameters": request,
            "responseElements": response,
            "eventID": str(uuid.uuid4()),
            "recipientAccountId": ACCOUNT,
        },
    )


def _kinded(builder: Callable[[int], Case]) -> Callable[[int], Case]:
    def build(index: int) -> Case:
        case = builder(index)
        case.kind = builder.__name__
        return case

    build.__name__ = builder.__name__
    return build


class Scenarios:
    """Builds cases on the emulator; ``make(n)`` returns ``n`` cases mixed over the capabilities present."""

    def __init__(self, seed: int = 7) -> None:
        from governor.adapters.aws import client

        self._random = random.Random(seed)
        self._ec2 = client("ec2", REGION)
        self._kms = client("kms", REGION)
        self._image = self._ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        self._vpc = self._ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        present = set(handler_names())
        builders: dict[str, list[tuple[int, Callable[[int], Case]]]] = {
            "spot": [(4, self.spot_warning), (1, self.spot_warning_not_gpu)],
            "network": [(4, self.network_world_open_ssh), (1, self.network_protected_group)],
            "keys": [(3, self.keys_rotation_disabled)],
            "lifecycle": [(3, self.lifecycle_gpu_launch), (1, self.lifecycle_not_gpu_launch)],
        }
        self.builders = [
            (w, _kinded(b)) for function, items in builders.items() if function in present for w, b in items
        ]
        self.invalid_functions = sorted(present & set(builders))

    def make(self, count: int, invalid_share: float = 0.05) -> list[Case]:
        weights = [w for w, _ in self.builders]
        cases = []
        for index in range(count):
            if self.invalid_functions and self._random.random() < invalid_share:
                cases.append(self.invalid(index))
                continue
            (builder,) = self._random.choices([b for _, b in self.builders], weights)
            cases.append(builder(index))
        return cases

    def one_of_each(self) -> list[Case]:
        """A case of every kind the present handlers accept: the clean reference each mixed case is compared with."""
        return [builder(-1 - number) for number, (_, builder) in enumerate(self.builders)]

    def _instance(self, instance_type: str, *, spot: bool = False, tags: dict[str, str] | None = None) -> str:
        extra: dict[str, Any] = {}
        if spot:
            extra["InstanceMarketOptions"] = {"MarketType": "spot"}
        all_tags = {"team": "vision", "owner": "alice@example.com", "gpu-fleet": "true", **(tags or {})}
        return str(
            self._ec2.run_instances(
                ImageId=self._image,
                InstanceType=instance_type,
                MinCount=1,
                MaxCount=1,
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()]}
                ],
                **extra,
            )["Instances"][0]["InstanceId"]
        )

    def spot_warning(self, index: int) -> Case:
        instance = self._instance("g5.xlarge", spot=True, tags={"governor:checkpoint-command": "train"})
        event = _envelope(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            {"instance-id": instance, "instance-action": "terminate"},
        )
        return Case(f"spot warning #{index}", "spot", event, instance)

    def spot_warning_not_gpu(self, index: int) -> Case:
        instance = self._instance("m5.large", spot=True)
        event = _envelope(
            "EC2 Spot Instance Interruption Warning", "aws.ec2", {"instance-id": instance, "instance-action": "stop"}
        )
        return Case(f"spot warning, not GPU #{index}", "spot", event, instance, forbidden=True)

    def _open_group(self, index: int, tags: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
        spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
        group = self._ec2.create_security_group(
            GroupName=f"training-{index}-{uuid.uuid4().hex[:6]}",
            Description="gpu nodes",
            VpcId=self._vpc,
            **({"TagSpecifications": spec} if tags else {}),
        )["GroupId"]
        permission = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        self._ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[permission])
        rules = self._ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
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
        event = _cloudtrail(
            "aws.ec2",
            "AuthorizeSecurityGroupIngress",
            request,
            {"_return": True, "securityGroupRuleSet": {"items": items}},
        )
        return group, event

    def network_world_open_ssh(self, index: int) -> Case:
        group, event = self._open_group(index, {"team": "vision"})
        return Case(f"ssh open to the world #{index}", "network", event, group)

    def network_protected_group(self, index: int) -> Case:
        group, event = self._open_group(index, {PROTECTED_TAG: "true"})
        return Case(f"ssh open on a protected group #{index}", "network", event, group, forbidden=True)

    def keys_rotation_disabled(self, index: int) -> Case:
        key = self._kms.create_key(Description=f"training data key {index}")["KeyMetadata"]
        event = _cloudtrail("aws.kms", "DisableKeyRotation", {"keyId": key["KeyId"]}, {"keyId": key["Arn"]})
        return Case(f"key rotation disabled #{index}", "keys", event, key["KeyId"])

    def _launch(self, index: int, instance_type: str) -> tuple[str, dict[str, Any]]:
        instance = self._instance(instance_type)
        response = {"instancesSet": {"items": [{"instanceId": instance, "instanceType": instance_type}]}}
        event = _cloudtrail("aws.ec2", "RunInstances", {"instanceType": instance_type}, response)
        return instance, event

    def lifecycle_gpu_launch(self, index: int) -> Case:
        instance, event = self._launch(index, "g5.xlarge")
        return Case(f"GPU launch #{index}", "lifecycle", event, instance)

    def lifecycle_not_gpu_launch(self, index: int) -> Case:
        instance, event = self._launch(index, "m5.large")
        return Case(f"non-GPU launch #{index}", "lifecycle", event, instance, forbidden=True)

    def invalid(self, index: int) -> Case:
        """Malformed events for a present function: the clean outcome is a rejection to its DLQ, no action."""
        function = self._random.choice(self.invalid_functions)
        broken: list[dict[str, Any]] = [
            {"id": str(uuid.uuid4()), "detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"},
            {"id": str(uuid.uuid4()), "source": "aws.ec2", "detail-type": 42, "detail": {}},
            {**_envelope("AWS API Call via CloudTrail", "aws.ec2", {"eventName": None}), "time": "yesterday"},
        ]
        return Case(f"invalid event #{index}", function, self._random.choice(broken), "-", kind="invalid")
