"""``governor explain`` for the network policy: the group a call changed as the handler would re-read it, handed to
the handler's own decisions (``decide_group_call``, ``decide_call``). States no rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.domain.decision import Decision
from governor.domain.explain import Assumed, cloudtrail_call, explainer
from governor.events.envelopes import InboundEvent
from governor.network import domain
from governor.network.events import EVENT_NAMES, SECURITY_GROUP_EVENTS, IngressRule, NetworkCall, parse_call
from governor.policy import Policy


@dataclass(frozen=True)
class AssumedGroup:
    """A security group as ``explain`` assumes it is now: as the call left it (see :func:`assumed_group`)."""

    group_id: str
    name: str | None
    tags: dict[str, str]
    rules: tuple[IngressRule, ...]


def assumed_group(call: NetworkCall) -> Assumed[AssumedGroup]:
    """The group a security-group call changed, as the handler would re-read it: still there, attached to a GPU
    instance of the fleet, holding the rules the call added (a new group: none), tagged as the event says."""
    group = call.group or "unknown"
    rules = () if call.name == "CreateSecurityGroup" else call.rules
    assumptions = [
        f"{group} still exists and only GPU instances' interfaces use it (within network.scope 'fleet', and proven "
        "the fleet's; explain reads nothing from AWS: a group also used by a load balancer, another instance or "
        "nothing at all is reported, never changed)",
        "each rule is still in the group as the call added it; the handler re-reads the group before revoking, and "
        "a rule already gone is left alone",
    ]
    if call.name == "CreateSecurityGroup":
        assumptions[1] = "a new group has no ingress rules yet; each rule is judged when it is added"
    if call.group_tags is None:
        assumptions.append(f"{group} carries no tags (a group protected by tag would be reported and left unchanged)")
    return Assumed(AssumedGroup(group, call.group_name, dict(call.group_tags or {}), rules), tuple(assumptions))


@explainer(
    domain.POLICY, cloudtrail_call("aws.ec2", *EVENT_NAMES), decides=(domain.decide_group_call, domain.decide_call)
)
def explain_network(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Security-group and public-address calls: the handler's decisions on the state the event implies."""
    assert event.cloudtrail is not None  # guaranteed by the matcher
    call = parse_call(event.cloudtrail)
    if not call.failed and call.name in SECURITY_GROUP_EVENTS:
        assumed = assumed_group(call)
        group = assumed.state
        return [assumed.on(domain.decide_group_call(call, group, {group.group_id}, policy))]
    return domain.decide_call(call, policy, event.time or event.cloudtrail.event_time)
