"""What the network policy reads: the six EC2 calls' CloudTrail records and the API's rule and address shapes.

Pure. It reads CloudTrail requests in both shapes EC2 writes (nested ``ipPermissions.items[]`` and the flat legacy
``cidrIp`` / ``fromPort`` / ``toPort``), the ``responseElements`` rule ids, the rule records of
DescribeSecurityGroupRules and an instance's network interfaces, into :class:`IngressRule`, :class:`NetworkCall`
and :class:`PublicAddress`. Any CIDR of prefix length 0 is the whole world, whatever its address bits
(``203.0.113.9/0`` is as open as ``0.0.0.0/0``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from governor.domain.fleet import Instance
from governor.events.envelopes import CloudTrailRecord

SECURITY_GROUP_EVENTS = ("AuthorizeSecurityGroupIngress", "ModifySecurityGroupRules", "CreateSecurityGroup")
ADDRESS_EVENTS = ("RunInstances", "AssociateAddress", "ModifyNetworkInterfaceAttribute")
EVENT_NAMES = SECURITY_GROUP_EVENTS + ADDRESS_EVENTS
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
