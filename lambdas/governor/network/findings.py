"""How the network capability's findings read in the report: one problem per offending ingress rule, each with the
fix its own violation needs (a world-open port is not fixed the way a training port opened to a VPC range is)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from governor.domain.problems import Problem, default_problems
from governor.network.domain import RULE_PUBLIC_IP
from governor.policy import Policy, policy_field


def _world(source: str) -> bool:
    try:
        return ipaddress.ip_network(source, strict=False).prefixlen == 0
    except ValueError:
        return False


def _key(rule: Mapping[str, Any]) -> str:
    """The rule a problem is about, in the words of ``describe()``: ``tcp 22 from 0.0.0.0/0``."""
    return f"{rule.get('protocol') or 'all'} {rule.get('ports') or 'all'} from {rule.get('source') or ''}".strip()


def _fix(violation: str, policy: Policy) -> str:
    protected = policy_field("network.protected_groups")
    if "to the world" in violation:
        return (
            f"Remove the world-open rule (or narrow its source); if the port must face the internet, add it to "
            f"{policy_field('network.world_open_allowed_ports')}, or list the group under {protected} to keep it as "
            "it is (reported, never changed)."
        )
    if "training port" in violation:
        return (
            "Change the rule's source to the security group itself (training traffic stays inside the group), or list "
            f"the group under {protected}."
        )
    return (
        f"Narrow the rule to the group itself, or add the source to {policy_field('network.trusted_cidrs')} / "
        f"{policy_field('network.trusted_prefix_lists')}."
    )


def remediation(rule: str, policy: Policy) -> str:
    """The fix for a finding that names no ingress rule (a public IP, or a group decision without rule details)."""
    if rule == RULE_PUBLIC_IP:
        return (
            "Launch it without a public IP (or put it behind a load balancer), or tag it "
            f"{policy.fleet.exempt_tag}=true; {policy_field('network.public_ip_on_gpu')} allows them fleet-wide."
        )
    return (
        "Remove or narrow the offending ingress rule named in the reason, or list the group under "
        f"{policy_field('network.protected_groups')} to keep it as it is (reported, never changed)."
    )


def problems(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """One problem per ingress rule the decision found offending: "tcp 22 from 0.0.0.0/0" and "tcp 2222-2223 from
    10.20.0.0/16" are two findings about one group, each with its own severity, reason and fix."""
    judged = (decision.get("evidence") or {}).get("rules") or []
    found: list[Problem] = []
    for rule in judged:
        violations = [str(v) for v in rule.get("violations") or []] if isinstance(rule, Mapping) else []
        if not violations:
            continue
        source = str(rule.get("source") or "")
        key = _key(rule)
        found.append(
            Problem(
                key,
                "critical" if _world(source) else "warning",
                "; ".join(violations),
                " ".join(dict.fromkeys(_fix(v, policy) for v in violations)),
            )
        )
    if found:
        return found
    return default_problems(decision, remediation(str(decision.get("rule") or ""), policy))


def resolves(decision: Mapping[str, Any], key: str) -> bool:
    """A later compliant decision about some rules of the group resolves only those rules' findings; one that judged
    no rule (the group is gone, or out of scope now) resolves them all."""
    judged = (decision.get("evidence") or {}).get("rules") or []
    if not judged:
        return True
    return key in {_key(r) for r in judged if isinstance(r, Mapping) and not r.get("violations")}
