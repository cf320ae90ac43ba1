"""The network policy's decisions (pure): a group's rules as they are now, a GPU instance's public address, a
failed or address-only call, and the sweep's blast radius. The handler calls these on live state; ``explain`` on the
state an event implies (``governor.network.explain``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from governor.domain.actions import AnyAction, Notify
from governor.domain.decision import Decision, Severity
from governor.domain.fleet import exemption
from governor.network.actions import RemovePublicIp, RevokeIngress
from governor.network.events import (
    SECURITY_GROUP_EVENTS,
    IngressRule,
    NetworkCall,
    PublicAddress,
    match_live,
)
from governor.network.rules import out_of_scope, rule_violations
from governor.policy import Exemptions, Policy

POLICY = "network"
RULE_GROUP = "network.security-group"
RULE_PUBLIC_IP = "network.public-ip"


def _notify(enforce: bool) -> Notify:
    return Notify(enforced=enforce, target="governor bus")


#: One ingress rule and what it breaks (empty when it complies).
_Judged = tuple[IngressRule, list[str]]


def _group_reasons(judged: Sequence[_Judged], notes: Sequence[str]) -> list[str]:
    """Each offending rule with what it breaks, the caller's notes, then the rules that comply and stay."""
    reasons = [
        f"rule {rule.rule_id or rule.describe()} ({rule.describe()}): {'; '.join(why)}" for rule, why in judged if why
    ]
    reasons.extend(notes)
    compliant = [rule for rule, why in judged if not why]
    if compliant:
        reasons.append(f"{len(compliant)} rule(s) comply and stay: " + ", ".join(r.describe() for r in compliant))
    return reasons


def _protected(group_id: str, group_name: str | None, tags: Mapping[str, str], policy: Policy) -> bool:
    """``network.protected_groups`` names the group by id or name, or matches its tags."""
    protected = policy.network.protected_groups
    return protected.matches(group_id, dict(tags)) or (
        group_name is not None and protected.matches(group_name, dict(tags))
    )


def _revocation(
    group_id: str,
    offending: Sequence[_Judged],
    enforce: bool,
    shared: str | None,
    reasons: list[str],
    assumptions: list[str],
    evidence: dict[str, Any],
) -> Decision:
    """Revoke each offending rule (by id) and tell the bus; critical when a rule is open to the world."""
    actions: list[AnyAction] = [
        RevokeIngress(enforced=enforce, **rule.details(), reason="; ".join(why)) for rule, why in offending
    ]
    actions.append(_notify(enforce))
    if any(not rule.rule_id for rule, _ in offending):
        assumptions.append(
            "rule ids not in the event: the handler finds them by re-reading the group (DescribeSecurityGroupRules)"
        )
    if shared is not None:
        reasons.append(shared)
    elif not enforce:
        reasons.append("network.enforce is false: report only, nothing is revoked")
    severity: Severity = "critical" if any(rule.source.is_world for rule, _ in offending) else "warning"
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=group_id,
        actions=actions,
        reasons=reasons,
        assumptions=assumptions,
        evidence=evidence,
        severity=severity,
        rule=RULE_GROUP,
    )


def decide_group(
    group_id: str,
    rules: Sequence[IngressRule],
    policy: Policy,
    *,
    tags: Mapping[str, str] | None = None,
    group_name: str | None = None,
    assumptions: Sequence[str] = (),
    notes: Sequence[str] = (),
    shared: str | None = None,
) -> Decision:
    """Judge the given ingress rules of one group: revoke the offending ones (by rule id), leave the rest.

    A protected group is ``ignored``: its violations are reported, never changed. ``tags`` None means unknown.
    ``shared`` says why nothing proves the group is the fleet's (:func:`~governor.network.rules.not_the_fleets`): its
    violations are reported and nothing is revoked, whatever ``network.enforce`` says.
    """
    judged = [(rule, rule_violations(rule, policy, group_name)) for rule in rules]
    offending = [(rule, why) for rule, why in judged if why]
    evidence: dict[str, Any] = {
        "group_name": group_name,
        "rules": [{**rule.details(), "violations": why} for rule, why in judged],
    }
    reasons = _group_reasons(judged, notes)
    if _protected(group_id, group_name, tags or {}, policy):
        return Decision(
            policy=POLICY,
            verdict="ignored",
            resource=group_id,
            reasons=[f"{group_id} is a protected group: reported, never changed", *reasons],
            assumptions=list(assumptions),
            evidence=evidence,
            severity="warning" if offending else "info",
            rule=RULE_GROUP,
        )
    all_assumptions = list(assumptions)
    if tags is None and policy.network.protected_groups.tags:
        all_assumptions.append(
            f"the tags of {group_id} were not read; a group protected by tag would be reported and left unchanged"
        )
    if offending:
        enforce = policy.network.enforce and shared is None
        return _revocation(group_id, offending, enforce, shared, reasons, all_assumptions, evidence)
    if not rules and not notes:
        reasons.append("no ingress rules to judge")
    return Decision(
        policy=POLICY,
        verdict="ok",
        resource=group_id,
        reasons=reasons,
        assumptions=all_assumptions,
        evidence=evidence,
        rule=RULE_GROUP,
    )


class LiveGroup(Protocol):
    """A security group as it is now (the adapter's ``GroupState``, or ``explain``'s assumed one)."""

    @property
    def group_id(self) -> str: ...

    @property
    def name(self) -> str | None: ...

    @property
    def tags(self) -> dict[str, str]: ...

    @property
    def rules(self) -> tuple[IngressRule, ...]: ...


def decide_group_call(
    call: NetworkCall,
    live: LiveGroup | None,
    fleet_groups: set[str],
    policy: Policy,
    *,
    assumptions: Sequence[str] = (),
    shared: str | None = None,
) -> Decision:
    """Judge the rules a call added or changed as they are now (re-read), never the event's copy alone.

    A group gone since is ``ignored``; one outside ``network.scope`` (``fleet_groups``: the groups attached to GPU
    instances) is recorded and left alone; a rule no longer in the group is noted, not revoked; a group nothing
    proves is the fleet's (``shared``) is reported, never changed.
    """
    if live is None:
        return Decision(
            policy=POLICY,
            verdict="ignored",
            resource=call.group or "unknown",
            reasons=[f"{call.group} no longer exists; nothing to revoke"],
            rule=RULE_GROUP,
        )
    why = out_of_scope(live.group_id, live.tags, fleet_groups, policy)
    if why:
        return scoped_out(live.group_id, why)
    gone: list[IngressRule] = []
    if call.name == "CreateSecurityGroup":
        wanted = list(live.rules)
    else:
        wanted, gone = match_live(call.rules, live.rules)
    notes = [f"{rule.describe()} is no longer in the group; nothing to revoke" for rule in gone]
    return decide_group(
        live.group_id,
        wanted,
        policy,
        tags=live.tags,
        group_name=live.name,
        notes=notes,
        assumptions=assumptions,
        shared=shared,
    )


def decide_public_ip(
    instance_id: str,
    instance_type: str | None,
    tags: Mapping[str, str],
    address: PublicAddress | None,
    policy: Policy,
    now: dt.datetime,
    *,
    assumptions: Sequence[str] = (),
) -> Decision:
    """A GPU instance with a public IPv4 address under ``public_ip_on_gpu: deny`` loses that address when enforcing.

    ``instance_type`` None means not known yet (``explain`` of an address call): the instance is taken to be a GPU one.
    """
    network = policy.network
    type_label = instance_type or "type read at run time"

    def decision(verdict: Literal["ok", "ignored"], *reasons: str) -> Decision:
        return Decision(
            policy=POLICY,
            verdict=verdict,
            resource=instance_id,
            reasons=list(reasons),
            assumptions=list(assumptions),
            evidence={"instance_type": type_label, "public_ip": address.public_ip if address else None},
            rule=RULE_PUBLIC_IP,
        )

    if instance_type is not None and not policy.fleet.is_gpu_type(instance_type):
        return decision("ignored", f"{instance_type or 'unknown type'} is not a GPU instance type")
    exempt = exemption(instance_id, dict(tags), policy.fleet, Exemptions(), now)
    if exempt:
        return decision("ignored", f"{instance_id} is exempt: {exempt}")
    if address is None:
        return decision("ok", f"GPU instance {instance_id} ({type_label}) has no public IPv4 address")
    if network.public_ip_on_gpu == "allow":
        return decision("ok", f"public_ip_on_gpu is allow; {instance_id} may keep {address.public_ip or 'its address'}")
    kind = "an Elastic IP" if address.elastic else "an auto-assigned public IPv4 address"
    reasons = [
        f"GPU instance {instance_id} ({type_label}) has {kind} ({address.public_ip or 'assigned at launch'}) "
        "and public_ip_on_gpu is deny"
    ]
    if not network.enforce:
        reasons.append("network.enforce is false: report only, the address stays")
    action = RemovePublicIp(
        enforced=network.enforce,
        instance_id=instance_id,
        public_ip=address.public_ip,
        **address.removal(),
    )
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance_id,
        actions=[action, _notify(network.enforce)],
        reasons=reasons,
        assumptions=list(assumptions),
        evidence={"instance_type": type_label, "public_ip": address.public_ip, "elastic": address.elastic},
        severity="warning",
        rule=RULE_PUBLIC_IP,
    )


def failed_call(call: NetworkCall) -> Decision:
    """A call with an ``errorCode`` changed nothing."""
    resource = call.group or call.instance_id or next((i.id for i in call.instances if i.id), None) or call.name
    return Decision(
        policy=POLICY,
        verdict="ignored",
        resource=resource,
        reasons=[f"{call.name} failed ({call.error}); a failed call changed nothing"],
        rule=RULE_GROUP if call.name in SECURITY_GROUP_EVENTS else RULE_PUBLIC_IP,
    )


def _interface_public_ip(call: NetworkCall, policy: Policy, now: dt.datetime) -> Decision:
    resource = call.network_interface_id or "unknown"
    if call.associate_public_ip:
        assumptions = [
            f"the instance attached to {resource} is read at run time; the decision assumes a GPU instance "
            "(a non-GPU instance is ignored)"
        ]
        address = PublicAddress(public_ip=None, elastic=False, network_interface_id=call.network_interface_id)
        return decide_public_ip(resource, None, {}, address, policy, now, assumptions=assumptions)
    if call.associate_public_ip is False:
        reason = f"{resource}: public IPv4 address removed (associatePublicIpAddress=false)"
        verdict: Literal["ok", "ignored"] = "ok"
    else:
        reason = f"{resource}: the change does not add a public address or touch ingress rules"
        verdict = "ignored"
    return Decision(policy=POLICY, verdict=verdict, resource=resource, reasons=[reason], rule=RULE_PUBLIC_IP)


def decide_call(call: NetworkCall, policy: Policy, now: dt.datetime) -> list[Decision]:
    """Failed calls, and public-address calls decided on the address the call gave (the handler: for a failed call or
    a removed address; ``explain``: for every address call, the instance assumed a GPU one, as its assumptions say)."""
    if call.failed:
        return [failed_call(call)]
    if call.name == "RunInstances":
        decisions = []
        for launched in call.instances:
            instance = launched.id or "(not launched)"
            assumptions: list[str] = []
            address: PublicAddress | None = None
            if launched.public_ip_requested:
                address = PublicAddress(public_ip=None, elastic=False)
                assumptions.append(
                    "the address and the primary network interface are read from the instance at run time"
                )
            elif launched.public_ip_requested is None:
                assumptions.append(
                    "no associatePublicIpAddress in the request: the subnet's auto-assign setting decides; the handler "
                    "re-reads the instance"
                )
            decisions.append(
                decide_public_ip(instance, launched.type, launched.tags, address, policy, now, assumptions=assumptions)
            )
        return decisions
    if call.name == "AssociateAddress":
        target = call.instance_id or call.network_interface_id or "unknown"
        address = PublicAddress(
            public_ip=call.public_ip,
            elastic=True,
            association_id=call.association_id,
            network_interface_id=call.network_interface_id,
        )
        assumptions = [
            f"the instance type and tags of {target} are read at run time; the decision assumes a GPU instance "
            "(a non-GPU instance is ignored)"
        ]
        return [decide_public_ip(target, None, {}, address, policy, now, assumptions=assumptions)]
    if call.name == "ModifyNetworkInterfaceAttribute":
        return [_interface_public_ip(call, policy, now)]
    return []


def scoped_out(group_id: str, why: str) -> Decision:
    """The record of a group the policy does not judge: nothing read beyond its tags, nothing changed."""
    return Decision(policy=POLICY, verdict="ignored", resource=group_id, reasons=[why], rule=RULE_GROUP)


def revocations(decision: Decision) -> int:
    """How many rules the decision's enforced actions would revoke."""
    return sum(max(1, len(a.rule_ids)) for a in decision.enforced_actions() if isinstance(a, RevokeIngress))


def limit_revocations(decisions: Sequence[Decision], limit: int) -> tuple[list[Decision], int]:
    """Keep the sweep within ``network.max_revocations_per_sweep``: whole groups in order until the budget is spent.

    The groups past the budget are reported with their revocations deferred (not enforced) to the next sweep, so a
    wrong policy or a mass change breaks at most ``limit`` rules before a person looks. Returns the decisions and how
    many revocations were deferred.
    """
    spent = 0
    deferred = 0
    limited: list[Decision] = []
    for decision in decisions:
        count = revocations(decision)
        if count == 0 or spent + count <= limit:
            spent += count
            limited.append(decision)
            continue
        deferred += count
        limited.append(
            decision.model_copy(
                update={
                    "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
                    "reasons": [
                        *decision.reasons,
                        f"blast radius: {count} revocation(s) deferred to the next sweep "
                        f"(network.max_revocations_per_sweep {limit} already spent)",
                    ],
                    "evidence": {**decision.evidence, "deferred": count},
                }
            )
        )
    return limited, deferred
