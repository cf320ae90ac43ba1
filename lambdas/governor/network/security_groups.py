"""Security groups for the network policy: paginated reads of groups and rules, and revocation by rule id.

Revoking by ``sgr-`` id removes exactly the offending rule; compliant rules added by the same call stay.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.network.events import IngressRule, rule_from_record
from governor.network.rules import Attached

# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset(
    {"ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules", "ec2:DescribeNetworkInterfaces"}
)
#: DescribeNetworkInterfaces takes at most 200 values in one filter.
_FILTER_VALUES = 200
_GONE = (
    "InvalidGroup.NotFound",
    "InvalidGroupId.NotFound",
    "InvalidSecurityGroupRuleId.NotFound",
    "InvalidPermission.NotFound",
)


@dataclass(frozen=True)
class GroupState:
    """A security group as it is now: its tags (for protection) and its ingress rules with their ids."""

    group_id: str
    name: str | None = None
    vpc_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    rules: tuple[IngressRule, ...] = ()


def _tags(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}


def to_attached(raw: dict[str, Any]) -> Attached:
    attachment = raw.get("Attachment") or {}
    return Attached(
        interface_id=str(raw.get("NetworkInterfaceId", "")),
        instance_id=attachment.get("InstanceId") or None,
        kind=str(raw.get("InterfaceType") or "interface"),
        requester_managed=bool(raw.get("RequesterManaged")),
        description=str(raw.get("Description") or ""),
    )


class SecurityGroups:
    """Counts its API calls so the benchmark can report them."""

    def __init__(self, region: str | None = None, ec2: Any = None) -> None:
        self._ec2 = ec2 or client("ec2", region)
        self.calls = 0

    def _paginate(self, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for page in self._ec2.get_paginator(operation).paginate(**kwargs):
            self.calls += 1
            yield from page.get(key, [])

    def _rules(self, group_ids: list[str] | None) -> dict[str, list[IngressRule]]:
        kwargs: dict[str, Any] = {"PaginationConfig": {"PageSize": 1000}}
        if group_ids is not None:
            kwargs["Filters"] = [{"Name": "group-id", "Values": group_ids}]
        found: dict[str, list[IngressRule]] = {}
        for raw in self._paginate("describe_security_group_rules", "SecurityGroupRules", **kwargs):
            rule = rule_from_record(raw)
            if rule is not None:
                found.setdefault(rule.group_id, []).append(rule)
        return found

    def group(self, group_id: str | None = None, group_name: str | None = None) -> GroupState | None:
        """Re-read one group (by id, or by name in the default VPC); None when it no longer exists."""
        kwargs: dict[str, Any] = (
            {"GroupIds": [group_id]} if group_id else {"Filters": [{"Name": "group-name", "Values": [group_name]}]}
        )
        try:
            self.calls += 1
            groups = self._ec2.describe_security_groups(**kwargs).get("SecurityGroups", [])
        except ClientError as error:
            if error.response["Error"]["Code"] in _GONE:
                return None
            raise
        if not groups:
            return None
        raw = groups[0]
        rules = self._rules([raw["GroupId"]]).get(raw["GroupId"], [])
        return GroupState(raw["GroupId"], raw.get("GroupName"), raw.get("VpcId"), _tags(raw), tuple(rules))

    def all_groups(self) -> list[GroupState]:
        """Every group in the region with its ingress rules: two paginated listings, whatever the number of groups."""
        rules = self._rules(None)
        return [
            GroupState(
                raw["GroupId"], raw.get("GroupName"), raw.get("VpcId"), _tags(raw), tuple(rules.get(raw["GroupId"], []))
            )
            for raw in self._paginate("describe_security_groups", "SecurityGroups", PaginationConfig={"PageSize": 1000})
        ]

    def attachments(self, group_ids: Sequence[str]) -> dict[str, list[Attached]]:
        """Every network interface using each group (paginated, 200 groups a filter): what proves, or disproves, that
        a group is the fleet's. A group no interface uses maps to an empty list."""
        found: dict[str, list[Attached]] = {group: [] for group in group_ids}
        for start in range(0, len(group_ids), _FILTER_VALUES):
            chunk = list(group_ids[start : start + _FILTER_VALUES])
            filters = [{"Name": "group-id", "Values": chunk}]
            for raw in self._paginate("describe_network_interfaces", "NetworkInterfaces", Filters=filters):
                attached = to_attached(raw)
                for group in raw.get("Groups", []):
                    if group.get("GroupId") in found:
                        found[group["GroupId"]].append(attached)
        return found

    def revoke(self, group_id: str, rule_id: str) -> bool:
        """Revoke one ingress rule by id; False when the rule or group is already gone (nothing left to do)."""
        self.calls += 1
        try:
            self._ec2.revoke_security_group_ingress(GroupId=group_id, SecurityGroupRuleIds=[rule_id])
        except ClientError as error:
            if error.response["Error"]["Code"] in _GONE:
                return False
            raise
        return True
