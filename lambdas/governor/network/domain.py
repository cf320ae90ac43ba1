"""Network policy: security-group ingress rules and public IPv4 addresses of GPU instances.

Pure. It reads CloudTrail requests in both shapes EC2 writes (nested ``ipPermissions.items[]`` and the flat legacy
``cidrIp`` / ``fromPort`` / ``toPort``), the ``responseElements`` rule ids, and the rule records of
DescribeSecurityGroupRules, and judges each rule on its own so only offending rules are ever revoked. Any CIDR of
prefix length 0 is the whole world, whatever its address bits (``203.0.113.9/0`` is as open as ``0.0.0.0/0``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from governor.domain.actions import AnyAction, Notify, RemovePublicIp, RevokeIngress
from governor.domain.decision import Decision, Severity
from governor.domain.explain import Assumed, cloudtrail_call, explainer
from governor.domain.fleet import Instance, exemption
from governor.events.envelopes import CloudTrailRecord, InboundEvent
from governor.policy import Exemptions, Policy, PortRange

POLICY = "network"
SECURITY_GROUP_EVENTS = ("AuthorizeSecurityGroupIngress", "ModifySecurityGroupRules", "CreateSecurityGroup")
ADDRESS_EVENTS = ("RunInstances", "AssociateAddress", "ModifyNetworkInterfaceAttribute")
EVENT_NAMES = SECURITY_GROUP_EVENTS + ADDRESS_EVENTS
RULE_GROUP = "network.security-group"
RULE_PUBLIC_IP = "network.public-ip"
ALL_PORTS = (0, 65535)
_PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6", "all": "-1", "": "-1"}
_PORTED = ("tcp", "udp")

SourceKind = Literal["cidr", "group", "prefix_list"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# --- reading loosely-typed CloudTrail / API dictionaries -------------------------------------------------------------


def _get(data: Any, *names: str) -> Any:
    """Case-insensitive lookup: CloudTrail writes ``groupId``, the EC2 API ``GroupId``; the first non-None wins."""
    if not isinstance(data, Mapping):
        return None
    lowered = {str(key).lower(): value for key, value in data.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None:
            return value
    return None


def _items(value: Any) -> list[Mapping[str, Any]]:
    """CloudTrail wraps lists as ``{"items": [...]}``; the API uses plain lists; a lone object is a list of one."""
    if isinstance(value, Mapping):
        inner = _get(value, "items", "item")
        if inner is not None:
            return _items(inner)
        return [value] if value else []
    if isinstance(value, list):
        return [item for item in value if isinstance(item, Mapping)]
    return []


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _bool(value: Any) -> bool | None:
    """``true``, ``"true"`` or ``{"value": true}`` (the attribute-value shape of Modify* calls)."""
    if isinstance(value, Mapping):
        return _bool(_get(value, "value"))
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _tags(value: Any) -> dict[str, str]:
    return {
        str(_get(tag, "key")): str(_get(tag, "value") or "") for tag in _items(value) if _get(tag, "key") is not None
    }


def _spec_tags(request: Any, resource_type: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    for spec in _items(_get(request, "tagSpecificationSet", "tagSpecifications")):
        if _get(spec, "resourceType") == resource_type:
            tags.update(_tags(_get(spec, "tags", "tag")))
    return tags


def normalise_protocol(value: Any) -> str:
    """``6`` is ``tcp``, ``17`` ``udp``, ``-1`` / ``all`` / missing is all traffic."""
    text = "" if value is None else str(value).strip().lower()
    return _PROTOCOL_NAMES.get(text, text)


# --- rules ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where a rule lets traffic in from: a CIDR, a security group (id or legacy name) or a managed prefix list."""

    kind: SourceKind
    value: str

    def network(self) -> Network | None:
        if self.kind != "cidr":
            return None
        try:
            return ipaddress.ip_network(self.value, strict=False)
        except ValueError:
            return None

    @property
    def is_world(self) -> bool:
        """Prefix length 0 is every address, whatever the address bits say."""
        network = self.network()
        return network is not None and network.prefixlen == 0

    def canonical(self) -> str:
        network = self.network()
        return str(network) if network is not None else self.value


@dataclass(frozen=True)
class IngressRule:
    """One ingress rule: a protocol, a port range and one source. ``rule_id`` is the ``sgr-`` id when known."""

    group_id: str
    protocol: str
    from_port: int | None
    to_port: int | None
    source: Source
    rule_id: str | None = None
    description: str | None = None

    @property
    def all_traffic(self) -> bool:
        return self.protocol == "-1"

    def port_range(self) -> tuple[int, int] | None:
        """The ports it opens: all of them for protocol -1, none (None) for protocols without ports (ICMP...)."""
        if self.all_traffic:
            return ALL_PORTS
        if self.protocol not in _PORTED:
            return None
        low = self.from_port if self.from_port is not None and self.from_port >= 0 else ALL_PORTS[0]
        high = self.to_port if self.to_port is not None and self.to_port >= 0 else ALL_PORTS[1]
        return (low, high)

    def ports_label(self) -> str:
        ports = self.port_range()
        if self.all_traffic or ports == ALL_PORTS:
            return "all"
        if ports is None:
            return "n/a"
        return str(ports[0]) if ports[0] == ports[1] else f"{ports[0]}-{ports[1]}"

    def protocol_label(self) -> str:
        return "all traffic" if self.all_traffic else self.protocol

    def key(self) -> tuple[str, tuple[int, int] | tuple[int | None, int | None], str, str]:
        """What makes two descriptions of a rule the same rule (used to find ids and live state)."""
        return (
            self.protocol,
            self.port_range() or (self.from_port, self.to_port),
            self.source.kind,
            self.source.canonical(),
        )

    def describe(self) -> str:
        ports = "" if self.all_traffic else f" port {self.ports_label()}"
        return f"{self.protocol_label()}{ports} from {self.source.value}"

    def details(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "rule_ids": [self.rule_id] if self.rule_id else [],
            "protocol": self.protocol,
            "ports": self.ports_label(),
            "source": self.source.value,
        }


def _rule(
    group_id: str, protocol: Any, low: Any, high: Any, source: Source, rule_id: Any = None, description: Any = None
) -> IngressRule:
    return IngressRule(
        group_id=group_id,
        protocol=normalise_protocol(protocol),
        from_port=_int(low),
        to_port=_int(high),
        source=source,
        rule_id=_str(rule_id),
        description=_str(description),
    )


def rules_from_permission(group_id: str, permission: Mapping[str, Any]) -> list[IngressRule]:
    """One rule per source of an IP permission (CloudTrail ``ipPermissions.items[]`` or the API's ``IpPermissions``)."""
    protocol, low, high = (_get(permission, n) for n in ("ipProtocol", "fromPort", "toPort"))
    found: list[IngressRule] = []
    for item in _items(_get(permission, "ipRanges")):
        if cidr := _str(_get(item, "cidrIp")):
            found.append(_rule(group_id, protocol, low, high, Source("cidr", cidr), None, _get(item, "description")))
    for item in _items(_get(permission, "ipv6Ranges")):
        if cidr := _str(_get(item, "cidrIpv6")):
            found.append(_rule(group_id, protocol, low, high, Source("cidr", cidr), None, _get(item, "description")))
    for item in _items(_get(permission, "groups", "userIdGroupPairs")):
        if group := _str(_get(item, "groupId", "groupName")):
            found.append(_rule(group_id, protocol, low, high, Source("group", group), None, _get(item, "description")))
    for item in _items(_get(permission, "prefixListIds")):
        if prefix := _str(_get(item, "prefixListId")):
            found.append(
                _rule(group_id, protocol, low, high, Source("prefix_list", prefix), None, _get(item, "description"))
            )
    return found


def rule_from_record(
    record: Mapping[str, Any], group_id: str | None = None, rule_id: str | None = None
) -> IngressRule | None:
    """A rule record: ``securityGroupRuleSet.items[]``, DescribeSecurityGroupRules, or a ModifySecurityGroupRules body.

    None for an egress rule or a record without a recognisable source.
    """
    if _bool(_get(record, "isEgress")):
        return None
    referenced = _get(record, "referencedGroupInfo")
    if cidr := _str(_get(record, "cidrIpv4", "cidrIp")):
        source = Source("cidr", cidr)
    elif cidr6 := _str(_get(record, "cidrIpv6")):
        source = Source("cidr", cidr6)
    elif prefix := _str(_get(record, "prefixListId")):
        source = Source("prefix_list", prefix)
    elif group := _str(_get(record, "referencedGroupId") or _get(referenced, "groupId", "groupName")):
        source = Source("group", group)
    else:
        return None
    return _rule(
        _str(_get(record, "groupId")) or group_id or "unknown",
        _get(record, "ipProtocol"),
        _get(record, "fromPort"),
        _get(record, "toPort"),
        source,
        rule_id or _get(record, "securityGroupRuleId"),
        _get(record, "description"),
    )


def attach_rule_ids(requested: Sequence[IngressRule], recorded: Sequence[IngressRule]) -> list[IngressRule]:
    """Give each requested rule the id EC2 returned for it (matched on protocol, ports and source)."""
    pool = [rule for rule in recorded if rule.rule_id]
    result: list[IngressRule] = []
    for rule in requested:
        match = next((other for other in pool if other.key() == rule.key()), None)
        if match is not None:
            pool.remove(match)
            rule = replace(rule, rule_id=match.rule_id)
        result.append(rule)
    return result


def match_live(
    wanted: Sequence[IngressRule], live: Sequence[IngressRule]
) -> tuple[list[IngressRule], list[IngressRule]]:
    """The live version of each wanted rule (by id, else by content), and the wanted rules no longer present."""
    by_id = {rule.rule_id: rule for rule in live if rule.rule_id}
    pool = list(live)
    present: list[IngressRule] = []
    gone: list[IngressRule] = []
    for rule in wanted:
        found = by_id.get(rule.rule_id) if rule.rule_id else next((r for r in pool if r.key() == rule.key()), None)
        if found is None:
            gone.append(rule)
            continue
        if found in pool:
            pool.remove(found)
        if found not in present:
            present.append(found)
    return present, gone


# --- calls ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchedInstance:
    """An instance a RunInstances call asked for; ``public_ip_requested`` None means the subnet's default decides."""

    id: str | None
    type: str
    public_ip_requested: bool | None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkCall:
    """What one of the six EC2 calls changed, read from its CloudTrail record."""

    name: str
    error: str | None = None
    group_id: str | None = None
    group_name: str | None = None
    group_tags: dict[str, str] | None = None
    rules: tuple[IngressRule, ...] = ()
    rule_ids_from_response: bool = False
    instances: tuple[LaunchedInstance, ...] = ()
    instance_id: str | None = None
    network_interface_id: str | None = None
    public_ip: str | None = None
    association_id: str | None = None
    associate_public_ip: bool | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def group(self) -> str | None:
        return self.group_id or self.group_name


def _response_rules(response: Any, group_id: str) -> list[IngressRule]:
    records = _items(_get(response, "securityGroupRuleSet"))
    return [rule for rule in (rule_from_record(record, group_id) for record in records) if rule is not None]


def _authorize(record: CloudTrailRecord, request: Any, response: Any) -> NetworkCall:
    recorded_group = next((_str(_get(r, "groupId")) for r in _items(_get(response, "securityGroupRuleSet"))), None)
    group_id = _str(_get(request, "groupId")) or recorded_group
    group_name = _str(_get(request, "groupName"))
    owner = group_id or group_name or "unknown"
    requested: list[IngressRule] = []
    for permission in _items(_get(request, "ipPermissions")):
        requested.extend(rules_from_permission(owner, permission))
    protocol, low, high = (_get(request, n) for n in ("ipProtocol", "fromPort", "toPort"))
    if cidr := _str(_get(request, "cidrIp")):
        requested.append(_rule(owner, protocol, low, high, Source("cidr", cidr)))
    if cidr6 := _str(_get(request, "cidrIpv6")):
        requested.append(_rule(owner, protocol, low, high, Source("cidr", cidr6)))
    if legacy_group := _str(_get(request, "sourceSecurityGroupName", "sourceSecurityGroupId")):
        requested.append(_rule(owner, protocol, low, high, Source("group", legacy_group)))
    recorded = _response_rules(response, owner)
    rules = attach_rule_ids(requested, recorded) if requested else recorded
    return NetworkCall(
        name=record.event_name,
        group_id=group_id,
        group_name=group_name,
        rules=tuple(rules),
        rule_ids_from_response=bool(recorded),
    )


def _modify_rules(record: CloudTrailRecord, request: Any) -> NetworkCall:
    body = _get(request, "ModifySecurityGroupRulesRequest") or request
    group_id = _str(_get(body, "groupId")) or "unknown"
    rules: list[IngressRule] = []
    updates = _items(_get(body, "securityGroupRule", "securityGroupRules", "securityGroupRuleSet"))
    for update in updates:
        rule_id = _str(_get(update, "securityGroupRuleId"))
        inner = _get(update, "securityGroupRule")
        rule = rule_from_record(inner if isinstance(inner, Mapping) else update, group_id, rule_id)
        if rule is not None:
            rules.append(rule)
    return NetworkCall(name=record.event_name, group_id=group_id, rules=tuple(rules), rule_ids_from_response=True)


def _create_group(record: CloudTrailRecord, request: Any, response: Any) -> NetworkCall:
    tags = _spec_tags(request, "security-group") | _tags(_get(response, "tagSet"))
    return NetworkCall(
        name=record.event_name,
        group_id=_str(_get(response, "groupId")),
        group_name=_str(_get(request, "groupName")),
        group_tags=tags,
    )


def _run_instances(record: CloudTrailRecord, request: Any, response: Any) -> NetworkCall:
    requested: bool | None = None
    for interface in _items(_get(request, "networkInterfaceSet", "networkInterfaces")):
        wanted = _bool(_get(interface, "associatePublicIpAddress"))
        if wanted is not None and _int(_get(interface, "deviceIndex")) in (0, None):
            requested = wanted
    tags = _spec_tags(request, "instance")
    default_type = _str(_get(request, "instanceType")) or ""
    launched = [
        LaunchedInstance(
            id=_str(_get(item, "instanceId")),
            type=_str(_get(item, "instanceType")) or default_type,
            public_ip_requested=requested,
            tags=tags | _tags(_get(item, "tagSet")),
        )
        for item in _items(_get(response, "instancesSet"))
    ]
    if not launched:
        launched = [LaunchedInstance(id=None, type=default_type, public_ip_requested=requested, tags=tags)]
    return NetworkCall(name=record.event_name, instances=tuple(launched))


def parse_call(record: CloudTrailRecord) -> NetworkCall:
    """Read what a network-relevant EC2 call changed; any other EC2 record yields an empty call, never an error."""
    request = record.request_parameters or {}
    response = record.response_elements or {}
    name = record.event_name
    if record.failed:
        return NetworkCall(
            name=name,
            error=f"{record.error_code}: {record.error_message}" if record.error_message else record.error_code,
            group_id=_str(_get(request, "groupId")),
            instance_id=_str(_get(request, "instanceId")),
        )
    if name == "AuthorizeSecurityGroupIngress":
        return _authorize(record, request, response)
    if name == "ModifySecurityGroupRules":
        return _modify_rules(record, request)
    if name == "CreateSecurityGroup":
        return _create_group(record, request, response)
    if name == "RunInstances":
        return _run_instances(record, request, response)
    if name == "AssociateAddress":
        return NetworkCall(
            name=name,
            instance_id=_str(_get(request, "instanceId")),
            network_interface_id=_str(_get(request, "networkInterfaceId")),
            public_ip=_str(_get(request, "publicIp")),
            association_id=_str(_get(response, "associationId")),
        )
    if name == "ModifyNetworkInterfaceAttribute":
        return NetworkCall(
            name=name,
            network_interface_id=_str(_get(request, "networkInterfaceId")),
            associate_public_ip=_bool(_get(request, "associatePublicIpAddress")),
        )
    return NetworkCall(name=name)


# --- judging ----------------------------------------------------------------------------------------------------------


def _merged(ranges: Iterable[PortRange]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted((r.from_port, r.to_port) for r in ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _world_allowed(rule: IngressRule, allowed: Sequence[PortRange]) -> bool:
    """Only TCP/UDP ports wholly inside ``world_open_allowed_ports`` may face the world; all traffic or ICMP never."""
    ports = rule.port_range()
    if rule.all_traffic or ports is None:
        return False
    return any(low <= ports[0] and ports[1] <= high for low, high in _merged(allowed))


def _trusted(source: Source, policy: Policy) -> bool:
    if source.kind == "prefix_list":
        return source.value in policy.network.trusted_prefix_lists
    network = source.network()
    if network is None or network.prefixlen == 0:
        return False
    for value in policy.network.trusted_cidrs:
        trusted = ipaddress.ip_network(value, strict=False)
        if trusted.version == network.version and network.subnet_of(trusted):  # type: ignore[arg-type]
            return True
    return False


def _label(ranges: Iterable[PortRange]) -> str:
    return ", ".join(str(r.from_port) if r.from_port == r.to_port else f"{r.from_port}-{r.to_port}" for r in ranges)


def rule_violations(rule: IngressRule, policy: Policy, group_name: str | None = None) -> list[str]:
    """Why ``rule`` breaks the network policy; empty when it complies.

    World-open ports must be allowed; training ports may face only the group itself; all-traffic rules only the group
    itself or a trusted CIDR / prefix list (which is also how an all-traffic rule may reach the training ports).
    """
    network = policy.network
    reasons: list[str] = []
    is_self = rule.source.kind == "group" and rule.source.value in {rule.group_id, group_name}
    ports = rule.port_range()
    if rule.source.is_world and not _world_allowed(rule, network.world_open_allowed_ports):
        what = "all traffic" if rule.all_traffic else f"{rule.protocol} port {rule.ports_label()}"
        allowed = _label(network.world_open_allowed_ports) or "none"
        reasons.append(f"opens {what} to the world ({rule.source.value}); ports allowed to the world: {allowed}")
    if not rule.all_traffic and ports is not None and not is_self:
        hit = [r for r in network.training_ports if r.overlaps(*ports)]
        if hit:
            reasons.append(
                f"opens training port {_label(hit)} to {rule.source.value}; training ports may be opened only to the "
                "security group itself"
            )
    if rule.all_traffic and not is_self and not rule.source.is_world and not _trusted(rule.source, policy):
        reasons.append(
            f"opens all traffic to {rule.source.value}, which is neither the group itself nor a trusted CIDR or "
            "prefix list"
        )
    return reasons


def _notify(enforce: bool) -> Notify:
    return Notify(enforced=enforce, target="governor bus")


def decide_group(
    group_id: str,
    rules: Sequence[IngressRule],
    policy: Policy,
    *,
    tags: Mapping[str, str] | None = None,
    group_name: str | None = None,
    assumptions: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> Decision:
    """Judge the given ingress rules of one group: revoke the offending ones (by rule id), leave the rest.

    A protected group is ``ignored``: its violations are reported, never changed. ``tags`` None means unknown.
    """
    network = policy.network
    enforce = network.enforce
    judged = [(rule, rule_violations(rule, policy, group_name)) for rule in rules]
    offending = [(rule, why) for rule, why in judged if why]
    compliant = [rule for rule, why in judged if not why]
    evidence: dict[str, Any] = {
        "group_name": group_name,
        "rules": [{**rule.details(), "violations": why} for rule, why in judged],
    }
    reasons = [
        f"rule {rule.rule_id or rule.describe()} ({rule.describe()}): {'; '.join(why)}" for rule, why in offending
    ]
    reasons.extend(notes)
    if compliant:
        reasons.append(f"{len(compliant)} rule(s) comply and stay: " + ", ".join(r.describe() for r in compliant))
    protected_tags = dict(tags or {})
    severity: Severity = "critical" if any(rule.source.is_world for rule, _ in offending) else "warning"
    if network.protected_groups.matches(group_id, protected_tags) or (
        group_name is not None and network.protected_groups.matches(group_name, protected_tags)
    ):
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
    if tags is None and network.protected_groups.tags:
        all_assumptions.append(
            f"the tags of {group_id} were not read; a group protected by tag would be reported and left unchanged"
        )
    if not offending:
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
    actions: list[AnyAction] = [
        RevokeIngress(enforced=enforce, **rule.details(), reason="; ".join(why)) for rule, why in offending
    ]
    actions.append(_notify(enforce))
    if any(not rule.rule_id for rule, _ in offending):
        all_assumptions.append(
            "rule ids not in the event: the handler finds them by re-reading the group (DescribeSecurityGroupRules)"
        )
    if not enforce:
        reasons.append("network.enforce is false: report only, nothing is revoked")
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=group_id,
        actions=actions,
        reasons=reasons,
        assumptions=all_assumptions,
        evidence=evidence,
        severity=severity,
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
) -> Decision:
    """Judge the rules a call added or changed as they are now (re-read), never the event's copy alone.

    A group gone since is ``ignored``; one outside ``network.scope`` (``fleet_groups``: the groups attached to GPU
    instances) is recorded and left alone; a rule no longer in the group is noted, not revoked.
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
        live.group_id, wanted, policy, tags=live.tags, group_name=live.name, notes=notes, assumptions=assumptions
    )


@dataclass(frozen=True)
class PublicAddress:
    """A public IPv4 address on an instance: an Elastic IP (disassociated) or auto-assigned (dropped via its ENI)."""

    public_ip: str | None
    elastic: bool
    association_id: str | None = None
    allocation_id: str | None = None
    network_interface_id: str | None = None

    def removal(self) -> dict[str, Any]:
        """How AWS lets the address go: DisassociateAddress, or the primary ENI's AssociatePublicIpAddress=false."""
        if self.elastic:
            return {
                "method": "disassociate_address",
                "address": "elastic",
                "association_id": self.association_id,
                "allocation_id": self.allocation_id,
            }
        return {
            "method": "modify_network_interface_attribute",
            "address": "auto-assigned",
            "network_interface_id": self.network_interface_id,
        }


def public_address(instance: Instance, elastic: Mapping[str, PublicAddress]) -> PublicAddress | None:
    """The instance's public IPv4 address: the Elastic IP record when DescribeAddresses knows it, else auto-assigned."""
    if not instance.public_ip:
        return None
    if instance.public_ip in elastic:
        return elastic[instance.public_ip]
    primary = None
    for interface in instance.network_interfaces:
        association = _get(interface, "association")
        if (
            _get(association, "publicIp") == instance.public_ip
            or _int(_get(_get(interface, "attachment"), "deviceIndex")) == 0
        ):
            primary = _str(_get(interface, "networkInterfaceId"))
            if _get(association, "publicIp") == instance.public_ip:
                break
    return PublicAddress(public_ip=instance.public_ip, elastic=False, network_interface_id=primary)


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
        f"{group} still exists and is attached to a GPU instance of the fleet (within network.scope 'fleet'; "
        "explain reads nothing from AWS)",
        "each rule is still in the group as the call added it; the handler re-reads the group before revoking, and "
        "a rule already gone is left alone",
    ]
    if call.name == "CreateSecurityGroup":
        assumptions[1] = "a new group has no ingress rules yet; each rule is judged when it is added"
    if call.group_tags is None:
        assumptions.append(f"{group} carries no tags (a group protected by tag would be reported and left unchanged)")
    return Assumed(AssumedGroup(group, call.group_name, dict(call.group_tags or {}), rules), tuple(assumptions))


@explainer(POLICY, cloudtrail_call("aws.ec2", *EVENT_NAMES), decides=(decide_group_call, decide_call))
def explain_network(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Security-group and public-address calls: the handler's decisions on the state the event implies."""
    assert event.cloudtrail is not None  # guaranteed by the matcher
    call = parse_call(event.cloudtrail)
    if not call.failed and call.name in SECURITY_GROUP_EVENTS:
        assumed = assumed_group(call)
        group = assumed.state
        return [assumed.on(decide_group_call(call, group, {group.group_id}, policy))]
    return decide_call(call, policy, event.time or event.cloudtrail.event_time)


# --- scope and blast radius ------------------------------------------------------------------------------------------


def fleet_group_ids(instances: Iterable[Instance], policy: Policy) -> set[str]:
    """The security groups attached to GPU instances of the fleet: what ``scope: fleet`` judges, with tagged groups."""
    return {group for i in instances if policy.fleet.is_gpu_type(i.type) for group in i.security_groups}


def out_of_scope(group_id: str, tags: Mapping[str, str] | None, fleet_groups: set[str], policy: Policy) -> str | None:
    """Why a group is outside the network policy's scope, or None when the governor judges it.

    A GPU governor must not break a company's websites: by default only groups attached to GPU instances, or carrying
    ``fleet.fleet_tags``, are judged; ``network.scope: all`` opts in to every group in the region.
    """
    if policy.network.scope == "all":
        return None
    if group_id in fleet_groups or policy.fleet.carries_fleet_tags(dict(tags or {})):
        return None
    wanted = ", ".join(f"{k}={v}" for k, v in policy.fleet.fleet_tags.items())
    return (
        f"{group_id} is attached to no GPU instance and lacks fleet.fleet_tags ({wanted}); outside network.scope "
        "'fleet' (set scope: all to judge every group)"
    )


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
