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


def _cluster(decision: Mapping[str, Any]) -> str | None:
    """The EKS cluster whose node the decision is about: its warning or reclaim goes through the Kubernetes API
    (``via: kubernetes``), or its metrics were judged by the cluster's source (``judged_by: cluster X``)."""
    for action in decision.get("actions") or ():
        if isinstance(action, Mapping) and action.get("via") == "kubernetes":
            return str(action.get("group") or "its cluster")
    judged = ((decision.get("evidence") or {}).get("metric_sources") or {}).get("judged_by") or ()
    found = next((str(j) for j in judged if str(j).startswith("cluster ")), None)
    return found.removeprefix("cluster ") if found else None


def remediation(key: str, policy: Policy, cluster: str | None = None) -> str:
    """What a person does about an idle problem; never a stop unless the GPUs were measured idle. An EKS node
    (``cluster``) is told the path that would really run and where its metrics come from (issue 48: one story)."""
    fleet = policy.fleet
    keep = (
        f"to keep it, tag it {fleet.keep_until_tag}=<ISO 8601 time> (snooze, at most "
        f"{policy_field('fleet.max_snooze_days')} = {fleet.max_snooze_days} days) or {fleet.exempt_tag}=true"
    )
    if key == "idle" and cluster is not None:
        return (
            f"Let its node be cordoned and drained (PodDisruptionBudgets respected) and removed through its Karpenter "
            f"NodeClaim or managed node group in cluster {cluster}, never stopped behind the cluster's back; "
            f"{keep} on the node's instance."
        )
    if key == "idle":
        return f"Stop the instance if nobody needs it; {keep}."
    if key == "unmonitored" and cluster is not None:
        return (
            "Do not stop it on this finding (missing data is never idle): get GPU metrics flowing again from cluster "
            f"{cluster}'s source (the DCGM exporter on the node and the Prometheus scrape of it, or Container "
            f"Insights: {policy_field('idle.clusters')}), or tag it {fleet.exempt_tag}=true if it is not meant to be "
            "watched."
        )
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
    if key == "idle.paying-twice":
        return (
            "Launch the On-Demand work into the reservation (CapacityReservationSpecification on the launch template; "
            "a stopped instance is moved with modify-instance-capacity-reservation-attributes), release the "
            "reservation, or lend its unused part as an interruptible Capacity Reservation (the decision's reasons "
            "give the commands)."
        )
    if key == "idle.stopped-billing":
        return (
            "Start it if it is still needed; otherwise snapshot its volumes (create-snapshots, tags copied), terminate "
            "it and release its Elastic IPs: its volumes and addresses bill every hour it stays stopped."
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
    evidence = decision.get("evidence") or {}
    per_day = _known_cost(key, evidence)
    money = key in ("idle", "unmonitored", "stalled") or per_day is not None
    summary, fix = first_reason(decision), remediation(key, policy, _cluster(decision))
    return [Problem(key, severity_of(decision), summary, fix, costs_money=money, usd_per_day=per_day)]


def _known_cost(key: str, evidence: Mapping[str, Any]) -> float | None:
    """Dollars a day the decision itself priced: a stopped instance's volumes and addresses, or the On-Demand rates
    paid twice beside a reservation."""
    found = None
    if key == "idle.stopped-billing":
        found = evidence.get("usd_per_day")
    elif key == "idle.paying-twice":
        found = (evidence.get("paying_twice") or {}).get("usd_per_day")
    return float(found) if isinstance(found, int | float) else None


def resolves(decision: Mapping[str, Any], key: str) -> bool:
    """A later info decision still seeing the instance idle does not resolve "idle"; it does resolve "no data"."""
    status = (decision.get("evidence") or {}).get("status")
    return not (key == "idle" and status in IDLE_STATUSES)
