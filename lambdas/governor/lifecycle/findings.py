"""How the lifecycle capability's findings read in the report: an untagged instance is spend nobody is charged for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.domain.problems import Problem, default_problems, first_reason, severity_of
from governor.policy import Policy


def remediation(rule: str, policy: Policy) -> str:
    """Untagged spend is fixed by tagging; the governor's own tag records are explained in the ledger."""
    fleet = policy.fleet
    if rule not in ("lifecycle.no-team", "lifecycle.launch"):
        return "Read the decision's reasons in the ledger (governor ledger export)."
    return f"Tag the instance with {fleet.owner_tag} and {fleet.team_tag} so its cost is charged to a team."


def problems(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """One problem per rule; a missing owner or team keeps the instance's spend unattributed, so it costs money."""
    rule = str(decision.get("rule") or "")
    if rule in ("lifecycle.no-team", "lifecycle.launch"):
        return [Problem(rule, severity_of(decision), first_reason(decision), remediation(rule, policy), True)]
    return default_problems(decision, remediation(rule, policy))
