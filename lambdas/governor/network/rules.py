"""The network policy's rules, each judged on its own so only offending rules are ever revoked: world-open ports,
training ports only from the group itself, all-traffic rules only from the group or a trusted source; and the scope
(which groups the policy judges at all). Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from governor.domain.fleet import Instance
from governor.network.events import IngressRule, Source
from governor.policy import Policy, PortRange

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


# --- ownership: what proves a group is the fleet's --------------------------------------------------------------------


@dataclass(frozen=True)
class Attached:
    """A network interface using a security group, as DescribeNetworkInterfaces shows it."""

    interface_id: str
    instance_id: str | None
    kind: str = "interface"
    requester_managed: bool = False
    description: str = ""

    def describe(self) -> str:
        if self.instance_id:
            return f"{self.interface_id} of {self.instance_id}"
        what = self.description or self.kind
        return f"{self.interface_id} ({what[:60]})"


def not_the_fleets(group_id: str, attached: Sequence[Attached], gpu_instances: set[str]) -> str | None:
    """Why nothing an ordinary account user cannot fake proves ``group_id`` is the fleet's, or None when it is proven:
    at least one interface uses it and every one of them is an instance interface of a GPU instance.

    A tag (``gpu-fleet=true``) or one GPU instance launched into a web load balancer's group proves nothing: the load
    balancer's interfaces use the group too. A group nothing uses may be about to be used by anything. Either way the
    group is judged and reported, never changed.
    """
    if not attached:
        return (
            f"{group_id} is used by no network interface: nothing proves it is the fleet's, so its rules are reported, "
            "never changed (they are revoked once only GPU instances use it)"
        )
    others = [
        a
        for a in attached
        if a.instance_id not in gpu_instances or a.requester_managed or a.kind not in ("interface", "")
    ]
    if not others:
        return None
    shown = ", ".join(a.describe() for a in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (
        f"{group_id} is shared with {len(others)} interface(s) that are not GPU instances' ({shown}): reported, never "
        "changed"
    )
