"""Spokes for the hub account's own other regions, so its events there reach the governor too.

The hub's default-bus rules exist only in the hub's own region. The StackSet's organisation-wide group leaves the hub
account out (``AccountFilterType: DIFFERENCE``) because a spoke in the hub's region would deliver every event twice;
without a second group, Spot warnings, state changes and CloudTrail calls of the hub account in its other regions
were never seen. This group deploys the spoke to the hub account only (``INTERSECTION`` of the OUs with the hub's
account id: the hub must sit in one of ``ou_ids``, as a delegated administrator does), in every organisation region
but the hub's own.

With a known region (``-c region=...``) the list is computed at synth time. Environment-agnostic, each region is
kept out by a CloudFormation condition on ``AWS::Region``, so the same template is right in whichever region it is
deployed. Service-managed StackSets never deploy to the organisation's management account, so with
``call_as: SELF`` the hub's other regions stay uncovered: the synth warns (docs/organization.md).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Aws, CfnCondition, Fn, Stack, Token
from aws_cdk import aws_cloudformation as cfn
from constructs import Construct

from infra.settings import OrganizationSettings


def hub_region_groups(scope: Construct, organization: OrganizationSettings, hub_region: str | None) -> list[Any]:
    """The StackSet instance groups that cover the hub account outside its own region (none when there is none)."""
    stack = Stack.of(scope)
    if organization.call_as == "SELF":
        Annotations.of(scope).add_warning_v2(
            "governor:hub-regions",
            "organization.call_as is SELF: service-managed StackSets never deploy to the management account, so the "
            "hub account's regions other than its own are not governed (see docs/organization.md)",
        )
        return []
    targets = cfn.CfnStackSet.DeploymentTargetsProperty(
        organizational_unit_ids=list(organization.ou_ids), account_filter_type="INTERSECTION", accounts=[Aws.ACCOUNT_ID]
    )
    if hub_region is not None and not Token.is_unresolved(hub_region):
        others = [region for region in organization.regions if region != hub_region]
        return [cfn.CfnStackSet.StackInstancesProperty(deployment_targets=targets, regions=others)] if others else []
    conditions = {
        region: CfnCondition(
            stack, f"HubRegionIs{region.replace('-', '').title()}", expression=Fn.condition_equals(Aws.REGION, region)
        )
        for region in organization.regions
    }
    if len(organization.regions) == 1:
        (region,) = organization.regions
        group = {
            "DeploymentTargets": {
                "OrganizationalUnitIds": list(organization.ou_ids),
                "AccountFilterType": "INTERSECTION",
                "Accounts": [Aws.ACCOUNT_ID],
            },
            "Regions": [region],
        }
        return [Fn.condition_if(conditions[region].logical_id, Aws.NO_VALUE, group)]
    regions = [
        Token.as_string(Fn.condition_if(condition.logical_id, Aws.NO_VALUE, region))
        for region, condition in conditions.items()
    ]
    return [cfn.CfnStackSet.StackInstancesProperty(deployment_targets=targets, regions=regions)]
