"""What happens around an interrupted Spot instance: leave the load balancers, release Auto Scaling, relaunch.

Implements ``domain.spot.SpotRecovery``. Capacity errors from RunInstances are outcomes (the next candidate is
tried and the attempt is kept), never exceptions: an interruption usually means the pool is short of capacity.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.domain.fleet import Instance
from governor.spot.ports import Candidate, Deregistration, LaunchAttempt, LifecycleOutcome, Replacement

CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
    }
)
WAITING_STATES = ("Terminating:Wait", "Warmed:Terminating:Wait")
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
REPLACES_TAG = "governor:replaces"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", "Unknown"))


def _message(error: ClientError) -> str:
    detail = error.response.get("Error", {})
    return f"{detail.get('Code', 'Unknown')}: {detail.get('Message', '')}".strip()


class SpotRecoveryActions:
    """ELBv2, Auto Scaling and EC2 calls for one region; counts its API calls for the benchmarks."""

    def __init__(
        self,
        region: str | None = None,
        *,
        ec2: Any = None,
        elbv2: Any = None,
        autoscaling: Any = None,
        account: str | None = None,
        event_id: str | None = None,
    ) -> None:
        self._region = region
        self._where: dict[str, Any] = {"account": account, "event_id": event_id}
        self._ec2 = ec2
        self._elbv2 = elbv2
        self._autoscaling = autoscaling
        self.calls = 0

    @property
    def ec2(self) -> Any:
        if self._ec2 is None:
            self._ec2 = client("ec2", self._region, **self._where)
        return self._ec2

    @property
    def elbv2(self) -> Any:
        if self._elbv2 is None:
            self._elbv2 = client("elbv2", self._region, **self._where)
        return self._elbv2

    @property
    def autoscaling(self) -> Any:
        if self._autoscaling is None:
            self._autoscaling = client("autoscaling", self._region, **self._where)
        return self._autoscaling

    # --- load balancers ----------------------------------------------------------------------------------------

    def registrations(self, instance: Instance) -> list[tuple[str, list[dict[str, Any]]]]:
        """Target groups (in the instance's VPC) that list the instance, by id or by its private IP."""
        found: list[tuple[str, list[dict[str, Any]]]] = []
        for page in self.elbv2.get_paginator("describe_target_groups").paginate():
            self.calls += 1
            for group in page.get("TargetGroups", []):
                if group.get("TargetType", "instance") not in ("instance", "ip"):
                    continue
                if instance.vpc_id and group.get("VpcId") and group["VpcId"] != instance.vpc_id:
                    continue
                wanted = {instance.id} if group.get("TargetType", "instance") == "instance" else {instance.private_ip}
                self.calls += 1
                health = self.elbv2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
                targets = [
                    {k: v for k, v in d["Target"].items() if k in ("Id", "Port", "AvailabilityZone")}
                    for d in health.get("TargetHealthDescriptions", [])
                    if d.get("Target", {}).get("Id") in wanted
                ]
                if targets:
                    found.append((group["TargetGroupArn"], targets))
        return found

    def group_tags(self, arns: Sequence[str]) -> dict[str, dict[str, str]]:
        """Each target group's tags (DescribeTags takes 20 ARNs a call)."""
        found: dict[str, dict[str, str]] = {}
        for start in range(0, len(arns), 20):
            self.calls += 1
            answer = self.elbv2.describe_tags(ResourceArns=list(arns[start : start + 20]))
            for description in answer.get("TagDescriptions", []):
                tags = {t["Key"]: t.get("Value", "") for t in description.get("Tags", [])}
                found[description["ResourceArn"]] = tags
        return found

    def deregister(self, instance: Instance, fleet_tags: Mapping[str, str]) -> Deregistration:
        """Deregister the instance from every target group listing it that carries ``fleet_tags`` (connection
        draining then applies); a group without them is left as it is and named, never changed."""
        registered = self.registrations(instance)
        tags = self.group_tags([arn for arn, _ in registered]) if registered else {}
        groups: list[str] = []
        left: list[str] = []
        for arn, targets in registered:
            have = tags.get(arn, {})
            if any(have.get(key) != value for key, value in fleet_tags.items()):
                left.append(arn)
                continue
            self.calls += 1
            self.elbv2.deregister_targets(TargetGroupArn=arn, Targets=targets)
            groups.append(arn)
        return Deregistration(groups, left)

    # --- Auto Scaling --------------------------------------------------------------------------------------------

    def complete_lifecycle_action(self, instance_id: str) -> LifecycleOutcome:
        """Continue every termination hook holding the instance; a group with nothing pending is a no-op."""
        self.calls += 1
        described = self.autoscaling.describe_auto_scaling_instances(InstanceIds=[instance_id])
        members = described.get("AutoScalingInstances", [])
        if not members:
            return LifecycleOutcome(None, None, note="not in an Auto Scaling group")
        group = members[0]["AutoScalingGroupName"]
        state = members[0].get("LifecycleState")
        if state not in WAITING_STATES:
            return LifecycleOutcome(group, state, note=f"no lifecycle action pending (state {state})")
        self.calls += 1
        hooks = self.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=group).get("LifecycleHooks", [])
        completed = []
        for hook in hooks:
            if hook.get("LifecycleTransition") != TERMINATING:
                continue
            self.calls += 1
            try:
                self.autoscaling.complete_lifecycle_action(
                    LifecycleHookName=hook["LifecycleHookName"],
                    AutoScalingGroupName=group,
                    LifecycleActionResult="CONTINUE",
                    InstanceId=instance_id,
                )
            except ClientError as error:
                if _code(error) != "ValidationError":  # "No active Lifecycle Action found": already released
                    raise
                continue
            completed.append(hook["LifecycleHookName"])
        note = f"continued {', '.join(completed)}" if completed else "no termination hook was waiting"
        return LifecycleOutcome(group, state, tuple(completed), note)

    # --- relaunch ------------------------------------------------------------------------------------------------

    def _subnet_in(self, vpc_id: str | None, zone: str) -> str | None:
        filters = [{"Name": "availability-zone", "Values": [zone]}]
        if vpc_id:
            filters.append({"Name": "vpc-id", "Values": [vpc_id]})
        self.calls += 1
        subnets = self.ec2.describe_subnets(Filters=filters).get("Subnets", [])
        subnets.sort(key=lambda s: -int(s.get("AvailableIpAddressCount", 0)))
        return subnets[0]["SubnetId"] if subnets else None

    def replace(
        self, instance: Instance, candidates: Sequence[Candidate], market: Literal["spot", "on-demand"]
    ) -> Replacement:
        """Relaunch from the instance's launch template (same version), trying each candidate in order.

        A zone is honoured by launching into a subnet of the instance's VPC in that zone. Capacity and other
        request errors move on to the next candidate; when none works the reason lists every attempt.
        """
        if not instance.launch_template_id:
            return Replacement(None, (), "not launched from a launch template")
        tags = [{"Key": k, "Value": v} for k, v in instance.tags.items() if not k.startswith("aws:")]
        tags.append({"Key": REPLACES_TAG, "Value": instance.id})
        attempts: list[LaunchAttempt] = []
        for candidate in candidates:
            request: dict[str, Any] = {
                "LaunchTemplate": {
                    "LaunchTemplateId": instance.launch_template_id,
                    "Version": instance.launch_template_version or "$Default",
                },
                "InstanceType": candidate.instance_type,
                "MinCount": 1,
                "MaxCount": 1,
                "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            }
            if market == "spot":
                request["InstanceMarketOptions"] = {
                    "MarketType": "spot",
                    "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
                }
            if candidate.zone:
                subnet = self._subnet_in(instance.vpc_id, candidate.zone)
                if subnet is None:
                    attempts.append(LaunchAttempt(candidate.instance_type, candidate.zone, "no subnet in that zone"))
                    continue
                request["SubnetId"] = subnet
            # RunInstances is idempotent on ClientToken: a retry for the same interruption (same instance, same
            # start, same candidate) gets the instance the first attempt launched instead of a second one.
            request["ClientToken"] = str(
                uuid.uuid5(
                    uuid.NAMESPACE_URL,
                    f"governor-replace|{instance.id}|{instance.launch_time.isoformat()}|"
                    f"{candidate.instance_type}|{candidate.zone}|{market}",
                )
            )
            self.calls += 1
            try:
                launched = self.ec2.run_instances(**request)
            except ClientError as error:
                code = _code(error)
                if code in ("RequestLimitExceeded", "Throttling"):
                    raise
                kind = "capacity" if code in CAPACITY_ERRORS else "request"
                attempts.append(
                    LaunchAttempt(candidate.instance_type, candidate.zone, f"{kind}: {_message(error)}"[:300])
                )
                continue
            new_id = launched["Instances"][0]["InstanceId"]
            attempts.append(LaunchAttempt(candidate.instance_type, candidate.zone, None, new_id))
            return Replacement(new_id, tuple(attempts))
        summary = "; ".join(f"{a.instance_type}@{a.zone or 'any'}: {a.error}" for a in attempts)
        return Replacement(None, tuple(attempts), f"no candidate could be launched ({summary})")
