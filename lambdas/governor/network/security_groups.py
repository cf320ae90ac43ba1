"""Security groups for the network policy: paginated reads of groups and rules, and revocation by rule id.

Revoking by ``sgr-`` id removes exactly the offending rule; compliant rules added by the same call stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.network.events import IngressRule, rule_from_record

# Reads only: what carrying out an action calls is declared by its class in governor.domain.actions.
IAM_ACTIONS = frozenset({"ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules"})
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
