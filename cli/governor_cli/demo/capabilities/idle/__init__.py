"""Idle's scenarios: the warning an owner gets before an idle GPU instance is stopped (with its buttons), and, in the
demo, the sweep at every tick of the simulated day and the EKS cluster whose node it drains (``eks``)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import TYPE_CHECKING, Any

from governor.domain.decision import Finding
from governor_cli.demo.hooks import provided

if TYPE_CHECKING:
    from governor_cli.demo.run import DemoResult, Simulation


def warning_finding(resource: str) -> Finding:
    """The warning before an idle instance is stopped: posted with Keep and Stop now (``governor.interactions``)."""
    return Finding(
        policy="idle",
        rule="idle.warned",
        severity="warning",
        resource=resource,
        title=f"Idle GPU instance {resource} will be stopped",
        team="vision",
        owner="alice@example.com",
        event_id=str(uuid.uuid4()),
    )


# --- the demo ---------------------------------------------------------------------------------------------------


def target_ports(target: dict[str, Any], runtime: Any) -> Any:
    """Organisation mode: its adapters in a member account and region (its handler's fan-out target builder)."""
    from governor.idle.handler import target_aws

    return target_aws(target, runtime)


def tick(sim: Simulation) -> None:
    """The idle sweep, at every tick of the simulated day."""
    sim.invoke("idle", sim.scheduled())


# --- the demo's EKS cluster (single-account demo only): one Karpenter GPU node, read from DCGM through Prometheus -----


def start(sim: Simulation) -> None:
    """The cluster's Prometheus, and the cluster in the policy the demo runs."""
    from governor_cli.demo.capabilities.idle.eks import DemoCluster

    if not sim.options.organization:
        sim.eks = DemoCluster()
        sim.policy = sim.eks.policy(sim.policy)


def set_up(sim: Simulation) -> None:
    """The node launched and its cluster registered, after the fleet."""
    from governor_cli.demo.capabilities.idle.eks import CLUSTER
    from governor_cli.demo.capabilities.idle.money import set_up_money
    from governor_cli.demo.run import DEMO_AMI, PEOPLE

    set_up_money(sim)  # paying twice and stopped, still billing: one case of each (issue 49)
    if sim.eks is None:
        return
    sim.say(f"EKS cluster {CLUSTER}: one Karpenter GPU node, its GPUs read from DCGM through Prometheus")
    sim.eks.launch(sim.ec2, DEMO_AMI, dict(sim.policy.fleet.fleet_tags), PEOPLE["research"])
    sim.eks.register(sim.site.client("eks"), sim.site.account, sim.site.region)
    # Karpenter launches through CreateFleet, which the lifecycle function's RunInstances rule does not
    # see: its scheduled reconcile opens the node's usage session (owner, GPUs) as it would in AWS.
    provided("reconcile")(sim)


def metrics(sim: Simulation, since: dt.datetime, until: dt.datetime) -> None:
    """The node's DCGM samples for the tick, scraped into Prometheus."""
    if sim.eks is not None and sim.site is sim.sites[0]:
        sim.eks.scrape(since, until)


def state_changes(sim: Simulation) -> None:
    """Karpenter terminated the node whose NodeClaim the governor deleted: EC2's state change (lifecycle closes its
    session)."""
    if sim.eks is not None and sim.site is sim.sites[0] and sim.eks.karpenter(sim.ec2, sim.now):
        change = sim.ec2_event(
            "EC2 Instance State-change Notification", {"instance-id": sim.eks.instance, "state": "terminated"}
        )
        sim.state_changed(change)


def collect(sim: Simulation) -> None:
    """What the cluster's Kubernetes API saw, for the summary (``eks_facts``)."""
    if sim.eks is not None:
        sim.result.eks = sim.eks.drained()


def stop(sim: Simulation) -> None:
    if sim.eks is not None:
        sim.eks.stop()


def stopped_by_governor(result: DemoResult, instance: str, before: str | None = None) -> bool:
    """Whether the ledger shows the governor stopping or terminating ``instance`` (before ``before``, if given)."""
    for item in result.decisions:
        if item.get("kind") != "decision" or item.get("policy") != "idle" or item.get("resource") != instance:
            continue
        done = (item.get("evidence") or {}).get("done") or []
        acted = any(str(d).startswith(("stopped", "terminated")) for d in done)
        if acted and (before is None or str(item.get("at", "")) < before):
            return True
    return False


def money_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """Paying twice and stopped, still billing, with their dollars (``capabilities.idle.money``)."""
    from governor_cli.demo.capabilities.idle.money import money_facts as facts

    return facts(result)


def _unused(warned: dict[str, Any]) -> str:
    """What the node's warning said it costs for nothing: no GPU pod on it, or GPUs held with no process on them."""
    evidence = warned.get("evidence") or {}
    for key, what in (("gpu_node_without_gpu_pods", "no GPU pod (CPU pods only)"), ("no_process", "")):
        held = evidence.get(key)
        if not isinstance(held, dict):
            continue
        if key == "no_process":
            pods = held.get("held_by_pods")
            what = f"{pods} GPU(s) allocated to pods with no process" if pods else "GPUs held with no process"
        cost = f", ${held['usd_per_day']:,.2f} a day" if "usd_per_day" in held else ""
        return f" ({what}{cost})"
    return ""


def eks_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """The EKS node's story, from the ledger and from what its cluster's Kubernetes API saw: warned, then drained
    through its node pool (enforcing) or the drain planned (report-only)."""
    eks = result.eks
    if not eks:
        return []
    warned = drained = None
    for item in result.decisions:
        if item.get("kind") != "decision" or item.get("policy") != "idle" or item.get("resource") != eks["instance"]:
            continue
        actions = item.get("actions") or []
        if warned is None and any(a.get("type") == "warn" for a in actions):
            warned = item
        if drained is None and any(a.get("via") == "kubernetes" for a in actions):
            drained = item
    where = f"{eks['instance']} ({eks['cluster']}, node pool {eks['node_pool']})"
    if warned is None:
        return [("EKS node", f"{where}: not judged idle")]
    story = f"{where}: idle by DCGM, warned {str(warned['at'])[11:16]} UTC{_unused(warned)}"
    if drained is None:
        return [("EKS node", story)]
    at = str(drained["at"])[11:16]
    if not result.enforce:
        return [("EKS node", f"{story}; would cordon, drain and delete its NodeClaim {at} UTC (Kubernetes API)")]
    if eks["claim_deleted"]:
        evicted = ", ".join(eks["evicted"]) or "no pod"
        story += f"; {at} UTC cordoned, evicted {evicted}, NodeClaim deleted"
        if eks["terminated_at"]:
            story += f"; Karpenter terminated it {str(eks['terminated_at'])[11:16]} UTC"
        return [("EKS node", story)]
    errors = (drained.get("evidence") or {}).get("errors") or drained.get("reason") or "not drained"
    return [("EKS node", f"{story}; drain {at} UTC failed: {errors}")]
