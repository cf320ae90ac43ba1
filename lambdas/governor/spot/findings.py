"""How the spot capability's findings read in the report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.domain.problems import Problem, default_problems
from governor.policy import Policy


def remediation(rule: str, policy: Policy) -> str:
    """An interrupted job is resumed by a person (or its scheduler) from the checkpoint the governor asked for."""
    return "Check that the job's checkpoint finished and resume it on a new instance."


def problems(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """One problem per rule."""
    return default_problems(decision, remediation(str(decision.get("rule") or ""), policy))
