"""How the idle capability's findings read in the report: which problem a decision raises, and its fix.

Warned, reported and stopped are stages of one problem (the instance is idle); "no GPU data" and "busy GPU at idle
power" are problems of their own, and neither is ever answered with a stop: missing data is never idle, and a stall
is a job to look at, not an idle machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.domain.problems import Problem, first_reason, severity_of
from governor.idle.costs import IDLE_STATUSES
from governor.policy import Policy, policy_field

#: The problem each idle outcome is a stage of.
_KEYS = dict.fromkeys(IDLE_STATUSES, "idle") | {"unmonitored": "unmonitored", "stalled": "stalled"}


def _key(decision: Mapping[str, Any]) -> str:
    status = (decision.get("evidence") or {}).get("status")
    if status in _KEYS:
        return _KEYS[str(status)]
    return str(decision.get("rule") or "idle")


def remediation(key: str, policy: Policy) -> str:
    """What a person does about an idle problem; never a stop unless the GPUs were measured idle."""
    fleet = policy.fleet
    keep = (
        f"to keep it, tag it {fleet.keep_until_tag}=<ISO 8601 time> (snooze, at most "
        f"{policy_field('fleet.max_snooze_days')} = {fleet.max_snooze_days} days) or {fleet.exempt_tag}=true"
    )
    if key == "idle":
        return f"Stop the instance if nobody needs it; {keep}."
    if key == "unmonitored":
        return (
            "Do not stop it on this finding (missing data is never idle): get GPU metrics flowing again "
            f"({policy_field('idle.metric_source')}: {policy.idle.metric_source}; check the agent on the instance "
            f"and its IAM permission to publish), or tag it {fleet.exempt_tag}=true if it is not meant to be watched."
        )
    if key == "stalled":
        return (
            "Look at the job, do not just stop the machine: its GPUs read busy at idle power (a hung NCCL job looks "
            "like this); restart the job from its last checkpoint."
        )
    if key.startswith("idle.circuit-breaker") or key.startswith("idle.breaker"):
        return (
            "Check the metric source: many instances changed together, which looks like a measurement failure; the "
            f"breaker re-arms by itself after {policy_field('idle.breaker_hold_minutes')} "
            f"({policy.idle.breaker_hold_minutes} min)."
        )
    return "Read the decision's reasons in the ledger (governor ledger export)."


def problems(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """One problem per decision: the stage's problem (idle, no data, stalled) with its fix."""
    key = _key(decision)
    money = key in ("idle", "unmonitored", "stalled")
    return [Problem(key, severity_of(decision), first_reason(decision), remediation(key, policy), costs_money=money)]


def resolves(decision: Mapping[str, Any], key: str) -> bool:
    """A later info decision still seeing the instance idle does not resolve "idle"; it does resolve "no data"."""
    status = (decision.get("evidence") or {}).get("status")
    return not (key == "idle" and status in IDLE_STATUSES)
