"""What a finding is about, per capability: the problems one decision raises, each with its own reason and fix.

A decision can raise several problems about one resource (a security group call that opens SSH to the world and a
training port to a VPC range), and the same problem is raised again by later decisions (an idle instance warned,
then reported, then stopped). The report keys findings on (policy, resource, :attr:`Problem.key`), so each problem
keeps its own severity, reason and fix. A capability that says more than "one problem per rule" does so in its own
package, in the findings module its declaration names (``findings``: ``problems(decision, policy)`` and optionally
``resolves(decision, key)``; :meth:`governor.capability.Registry.problems_of` asks it); :func:`default_problems`
serves the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["warning", "critical"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one resource: what it is (stable across decisions), how bad, why and what to do."""

    key: str
    severity: Severity
    summary: str
    remediation: str
    #: The problem keeps spending money while open (an idle or unmonitored GPU instance, untagged spend): the report
    #: puts the instance's daily price beside it and orders its to-do list by it.
    costs_money: bool = False
    #: What it costs a day, when the decision knows it better than its instance's hourly price does (a stopped
    #: instance's volumes and addresses, On-Demand instances paying twice beside a reservation).
    usd_per_day: float | None = None


def severity_of(decision: Mapping[str, Any]) -> Severity:
    return "critical" if decision.get("severity") == "critical" else "warning"


def first_reason(decision: Mapping[str, Any]) -> str:
    reasons = [str(r) for r in decision.get("reasons") or [] if str(r).strip()]
    return reasons[0] if reasons else str(decision.get("rule") or decision.get("policy") or "flagged")


def default_problems(decision: Mapping[str, Any], remediation: str) -> list[Problem]:
    """One problem per rule: the decision's first reason and the given fix."""
    rule = str(decision.get("rule") or decision.get("policy") or "")
    return [Problem(rule, severity_of(decision), first_reason(decision), remediation)]


#: The fix for a finding whose capability says nothing more.
DEFAULT_FIX = "See the decision's reasons in the ledger (governor ledger export)."
