"""What a finding is about, per capability: the problems one decision raises, each with its own reason and fix.

A decision can raise several problems about one resource (a security group call that opens SSH to the world and a
training port to a VPC range), and the same problem is raised again by later decisions (an idle instance warned,
then reported, then stopped). The report keys findings on (policy, resource, :attr:`Problem.key`), so each problem
keeps its own severity, reason and fix. A capability that says more than "one problem per rule" does so in its own
package (``governor.<capability>.findings``: ``problems(decision, policy)`` and optionally
``resolves(decision, key)``); :func:`default_problems` serves the rest.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType
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


@cache
def capability_findings(policy_name: str) -> ModuleType | None:
    """The capability's own findings module (``governor.<policy_name>.findings``) when it has one. Loaded by name:
    this shared module names no capability (callers pass only names that are policy sections)."""
    if not policy_name.isidentifier():
        return None
    package = f"governor.{policy_name}"
    if importlib.util.find_spec(package) is None or importlib.util.find_spec(f"{package}.findings") is None:
        return None
    return importlib.import_module(f"{package}.findings")


def own_findings(decision: Mapping[str, Any], policy: Any) -> ModuleType | None:
    """The findings module of the capability whose policy section ``decision`` names (a field of ``policy``)."""
    name = str(decision.get("policy"))
    return capability_findings(name) if name in type(policy).model_fields else None


def problems_of(decision: Mapping[str, Any], policy: Any, fallback: str = DEFAULT_FIX) -> list[Problem]:
    """The problems one warning or critical decision raises, in its capability's words (``fallback`` as the fix when
    the capability has no findings module)."""
    own = own_findings(decision, policy)
    if own is not None:
        return list(own.problems(decision, policy))
    return default_problems(decision, fallback)
