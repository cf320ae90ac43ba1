"""EC2 reads shared by every capability: paginated DescribeInstances with server-side filters.

AWS matches wildcard filter values (``g5.*``); moto does not. The adapter sends the wildcards AWS expects and
also re-checks the family in code, so results are right on both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.core_policy import FleetPolicy
from governor.domain.fleet import LIFECYCLES, Instance, Lifecycle
from governor.domain.times import utc

IAM_ACTIONS = frozenset({"ec2:DescribeInstances"})


def to_instance(raw: dict[str, Any]) -> Instance:
    tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
    template = raw.get("LaunchTemplate") or {}
    if not template:
        template_id = tags.get("aws:ec2launchtemplate:id")
        template = {"LaunchTemplateId": template_id, "Version": tags.get("aws:ec2launchtemplate:version")}
    launch = raw.get("LaunchTime") or dt.datetime.now(dt.UTC)
    if isinstance(launch, str):
        launch = dt.datetime.fromisoformat(launch.replace("Z", "+00:00"))
    return Instance(
        id=raw["InstanceId"],
        type=raw.get("InstanceType", ""),
        state=(raw.get("State") or {}).get("Name", "unknown"),
        launch_time=utc(launch),
        tags=tags,
        lifecycle=_lifecycle(raw.get("InstanceLifecycle")),
        zone=(raw.get("Placement") or {}).get("AvailabilityZone"),
        root_device_type=raw.get("RootDeviceType", "ebs"),
        public_ip=raw.get("PublicIpAddress"),
        private_ip=raw.get("PrivateIpAddress"),
        subnet_id=raw.get("SubnetId"),
        vpc_id=raw.get("VpcId"),
        security_groups=tuple(g["GroupId"] for g in raw.get("SecurityGroups", [])),
        network_interfaces=tuple(raw.get("NetworkInterfaces", [])),
        launch_template_id=template.get("LaunchTemplateId"),
        launch_template_version=str(template["Version"]) if template.get("Version") else None,
        iam_instance_profile=(raw.get("IamInstanceProfile") or {}).get("Arn"),
        capacity_reservation_id=raw.get("CapacityReservationId"),
        capacity_reservation_preference=(raw.get("CapacityReservationSpecification") or {}).get(
            "CapacityReservationPreference"
        ),
        capacity_block_id=raw.get("CapacityBlockId"),
        platform=raw.get("PlatformDetails"),
        tenancy=(raw.get("Placement") or {}).get("Tenancy"),
        volume_ids=tuple(
            str(m["Ebs"]["VolumeId"])
            for m in raw.get("BlockDeviceMappings", [])
            if (m.get("Ebs") or {}).get("VolumeId")
        ),
        state_reason=raw.get("StateTransitionReason") or None,
    )


def _lifecycle(value: Any) -> Lifecycle:
    """EC2's ``InstanceLifecycle`` as reported. A value this code does not know is ``unknown``, never On-Demand:
    reading it as On-Demand would price it wrongly and let the idle policy stop capacity it cannot get back."""
    if value is None or value == "":
        return "on-demand"
    return next((known for known in LIFECYCLES if value == known), "unknown")


class Ec2Reader:
    """Counts its API calls so the benchmarks can report them."""

    def __init__(
        self,
        region: str | None = None,
        ec2: Any = None,
        *,
        wildcard_type_filter: bool = True,
        account: str | None = None,
        event_id: str | None = None,
    ) -> None:
        self._ec2 = ec2 or client("ec2", region, account=account, event_id=event_id)
        self._wildcards = wildcard_type_filter
        self.calls = 0

    def _pages(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        paginator = self._ec2.get_paginator("describe_instances")
        config = {} if "InstanceIds" in kwargs else {"PageSize": 1000}
        for page in paginator.paginate(**kwargs, PaginationConfig=config):
            self.calls += 1
            for reservation in page.get("Reservations", []):
                yield from reservation.get("Instances", [])

    def gpu_instances(self, fleet: FleetPolicy, states: Iterable[str] = ("running",)) -> list[Instance]:
        """Every GPU instance in the given states: one paginated listing with server-side filters.

        The family is re-checked in code, so an emulator without wildcard support (``wildcard_type_filter=False``)
        still gets the right answer, only with a larger listing.
        """
        filters = [{"Name": "instance-state-name", "Values": list(states)}]
        if self._wildcards:
            filters.append({"Name": "instance-type", "Values": [f"{family}*" for family in fleet.gpu_families]})
        return [i for i in (to_instance(raw) for raw in self._pages(Filters=filters)) if fleet.is_gpu_type(i.type)]

    def in_reservation(self, reservation_id: str) -> list[Instance]:
        """The running instances in one capacity reservation (a Capacity Block about to end): a server-side filter."""
        filters = [
            {"Name": "instance-state-name", "Values": ["running"]},
            {"Name": "capacity-reservation-id", "Values": [reservation_id]},
        ]
        found = [to_instance(raw) for raw in self._pages(Filters=filters)]
        return [i for i in found if i.capacity_reservation_id == reservation_id]

    def instance(self, instance_id: str) -> Instance | None:
        """Re-read one instance; None when it no longer exists."""
        try:
            found = list(self._pages(InstanceIds=[instance_id]))
        except ClientError as error:
            if error.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                return None
            raise
        return to_instance(found[0]) if found else None

    def instances(self, instance_ids: list[str]) -> list[Instance]:
        found: list[Instance] = []
        for start in range(0, len(instance_ids), 1000):
            try:
                found.extend(to_instance(raw) for raw in self._pages(InstanceIds=instance_ids[start : start + 1000]))
            except ClientError as error:
                if error.response["Error"]["Code"] != "InvalidInstanceID.NotFound":
                    raise
                found.extend(i for i in (self.instance(x) for x in instance_ids[start : start + 1000]) if i)
        return found


class Ec2Actions:
    """EC2 changes the governor makes; callers re-read the instance first and record the decision before acting."""

    def __init__(
        self, region: str | None = None, ec2: Any = None, *, account: str | None = None, event_id: str | None = None
    ) -> None:
        self._ec2 = ec2 or client("ec2", region, account=account, event_id=event_id)
        self.calls = 0

    def stop(self, instance_id: str) -> None:
        self.calls += 1
        self._ec2.stop_instances(InstanceIds=[instance_id])

    def terminate(self, instance_id: str) -> None:
        self.calls += 1
        self._ec2.terminate_instances(InstanceIds=[instance_id])

    def tag(self, resource_id: str, tags: dict[str, str]) -> None:
        if tags:
            self.calls += 1
            self._ec2.create_tags(Resources=[resource_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])

    def untag(self, resource_id: str, keys: Iterable[str]) -> None:
        names = list(keys)
        if names:
            self.calls += 1
            self._ec2.delete_tags(Resources=[resource_id], Tags=[{"Key": k} for k in names])
