"""Organisation mode's shared parts: the hub triggers the spoke forwards, and the hub grants it re-creates.

The hub construct (``organization``) builds them from the hub's functions; the spoke stack (``infra.stacks.spoke``)
deploys them into every member account. Both import them from here, so no construct imports a stack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam

from governor.registry import REGISTRY

#: The functions whose work concerns resources of the account an event (or a sweep) is about; the notifier, the
#: report and the Slack interactions work on the hub's own resources only.
#: The functions that act in member accounts (the registry says which).
MEMBER_ACCOUNT_FUNCTIONS = frozenset(name for name, capability in REGISTRY.items() if capability.member_accounts)

#: Services whose calls in the hub concern the hub's own bookkeeping (traces, logs), never a member account.
HUB_ONLY_SERVICES = frozenset({"xray", "logs"})


@dataclass(frozen=True)
class ForwardedPattern:
    """One hub trigger: the function it invokes, the hub rule's id, its pattern and why it exists."""

    function: str
    rule: str
    pattern: events.EventPattern
    description: str


@dataclass(frozen=True)
class MemberGrant:
    """One statement a hub function role holds that concerns resources in whatever account it runs against."""

    function: str
    statement: dict[str, Any]


def _references_hub_resources(value: Any) -> bool:
    """A resolved statement naming one of the hub's own resources (a Ref or GetAtt other than a pseudo parameter)."""
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            return True
        ref = value.get("Ref")
        if isinstance(ref, str) and not ref.startswith("AWS::"):
            return True
        return any(_references_hub_resources(v) for v in value.values())
    if isinstance(value, list):
        return any(_references_hub_resources(v) for v in value)
    return False


def _localise(value: Any, account: str | None, region: str | None) -> Any:
    """The hub's literal account and region (a hub synthesized with ``-c account/region``) become the spoke's own."""
    if isinstance(value, dict):
        return {k: _localise(v, account, region) for k, v in value.items()}
    if isinstance(value, list):
        return [_localise(v, account, region) for v in value]
    if isinstance(value, str) and value.startswith("arn:"):
        text = value
        if account:
            text = text.replace(f":{account}:", ":${AWS::AccountId}:")
        if region:
            text = text.replace(f":{region}:", ":${AWS::Region}:")
        if text != value:
            return {"Fn::Sub": text.replace("${aws:", "${!aws:")}
    return value


def member_account_grants(hub: Stack, roles: dict[str, iam.IRole]) -> list[MemberGrant]:
    """What the hub's functions need in a member account: every statement of their roles that names no hub resource.

    The one place the spoke's permissions come from: the hub roles' own statements, which the capability constructs
    build only from actions their registry entry lists (``governor.registry``; a construct granting anything else
    stops the synth), with their resource scopes and conditions; statements on the ledger, the bus, the queues, the
    key and the log groups name hub resources and stay out.
    """
    by_role = {
        hub.resolve(role.role_name)["Ref"]: name for name, role in roles.items() if name in MEMBER_ACCOUNT_FUNCTIONS
    }
    grants: list[MemberGrant] = []
    seen: set[str] = set()
    for node in hub.node.find_all():
        if not isinstance(node, iam.CfnPolicy):
            continue
        attached = [r.get("Ref") for r in hub.resolve(node.roles) or [] if isinstance(r, dict)]
        functions = [by_role[r] for r in attached if r in by_role]
        if not functions:
            continue
        document = hub.resolve(node.policy_document)
        for statement in document.get("Statement", []):
            actions = statement.get("Action", [])
            actions = [actions] if isinstance(actions, str) else actions
            if _references_hub_resources(statement) or all(a.split(":")[0] in HUB_ONLY_SERVICES for a in actions):
                continue
            local = _localise(statement, _literal(hub.account), _literal(hub.region))
            local = {k: v for k, v in local.items() if k != "Sid"}
            key = json.dumps(local, sort_keys=True)
            if key not in seen:
                seen.add(key)
                grants.append(MemberGrant(functions[0], local))
    return grants


def _literal(value: str) -> str | None:
    return None if Token.is_unresolved(value) else value
