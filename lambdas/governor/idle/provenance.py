"""Which instances a metric source may speak for, proved from EC2's own record, never from the metrics themselves.

Whoever can write to a cluster's Prometheus (or AMP workspace, or the ``ContainerInsights`` namespace) can publish a
series naming any node and any instance (issue 45.1: 0 % published for a busy EC2 instance that is in no cluster
stopped it). So a cluster's source judges only that cluster's nodes, and what makes an instance a node of cluster C
is EC2's record of it as the sweep's own DescribeInstances returns it:

* its tags name C and no other cluster (``aws:eks:cluster-name``, ``eks:cluster-name`` or ``kubernetes.io/cluster/C``),
* and AWS itself says a group of machines launched it (``aws:autoscaling:groupName`` or ``aws:ec2:fleet-id``, which
  only AWS writes; ``governor.idle.ownership``), unless the cluster tag is AWS's own ``aws:eks:cluster-name``,
* and, for a cluster whose Kubernetes API the governor reads (``reclaim: drain``), the API's own node of that name has
  ``spec.providerID`` ``aws:///<zone>/<instance id>``: a series naming a node the API does not have, or a node the API
  says is another instance, is nobody's.

A series for any other instance is dropped, counted and named in the instance's decision (``evidence.metric_sources``)
with the source that sent it. The sources also refuse what is ambiguous in their own data: a node that
``kube_node_info`` maps to two instances, an instance two nodes claim. When a cluster's source and the instance source
(the CloudWatch agent) both have data for one instance, both are judged, each under its own device, so busy from
either wins; a source without data adds nothing, and an instance no source may speak for has no data: unmonitored,
never idle. Pure: the records come from the sweep, the node lists from ``governor.idle.kubernetes.nodes``.

The account boundary holds by construction and is checked here too: the sweep of an account (or a member account's
target) lists only that account's instances, builds only the sources of the clusters in it
(``KubernetesCluster.in_target``), and a source answers only for the instances of that listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from governor.domain.tagging import KUBERNETES_TAG_PREFIX
from governor.idle.domain import DEVICE_SEP, HOST_SIGNALS, Series
from governor.idle.ownership import kubernetes_node

if TYPE_CHECKING:
    from governor.domain.fleet import Instance
    from governor.idle.sweep import SweepPlan

#: Tags naming the EKS cluster an instance is a node of; the first is AWS's own (no one else may write ``aws:`` keys).
AWS_CLUSTER_TAG = "aws:eks:cluster-name"
CLUSTER_TAGS = (AWS_CLUSTER_TAG, "eks:cluster-name")
#: The device the instance source's GPU series are judged under when a cluster's source also speaks for the instance.
INSTANCE_SOURCE_DEVICE = "cloudwatch_agent"


def clusters_named(tags: Mapping[str, str]) -> set[str]:
    """Every cluster the instance's tags name (more than one: the record contradicts itself)."""
    named = {tags[key].strip() for key in CLUSTER_TAGS if tags.get(key, "").strip()}
    named |= {key.removeprefix(KUBERNETES_TAG_PREFIX) for key in tags if key.startswith(KUBERNETES_TAG_PREFIX)}
    return {name for name in named if name}


def cluster_refusal(cluster: str, instance: Instance | None) -> str | None:
    """Why the source of ``cluster`` may not speak for ``instance`` (None: its EC2 record proves it is a node there)."""
    if instance is None:
        return "not in the sweep's own EC2 read (DescribeInstances)"
    named = clusters_named(instance.tags)
    if not named:
        return "its EC2 record names no EKS cluster"
    if named != {cluster}:
        return f"its EC2 record names cluster {', '.join(sorted(named))}, not {cluster}"
    if not instance.tags.get(AWS_CLUSTER_TAG, "").strip() and kubernetes_node(instance.tags) is None:
        return (
            "its cluster tag is one anyone may write and no Auto Scaling group or EC2 Fleet launched it "
            "(no aws:autoscaling:groupName or aws:ec2:fleet-id)"
        )
    return None


def api_refusal(instance: str, nodes: Iterable[str], api: Mapping[str, str]) -> str | None:
    """Why the cluster's API does not back a series of ``instance`` published under ``nodes`` (None: it does)."""
    for node in sorted(nodes):
        actual = api.get(node)
        if actual is None:
            return f"the cluster's API has no node {node}"
        if actual != instance:
            return f"the cluster's API says node {node} is {actual}, not {instance}"
    if instance not in api.values():
        return f"the cluster's API has no node whose providerID is {instance}"
    return None


def has_gpu_data(series: Mapping[str, Series]) -> bool:
    """Whether any GPU series holds a sample (host signals are EC2's, never a cluster's)."""
    return any(s.times for key, s in series.items() if key.partition(DEVICE_SEP)[0] not in HOST_SIGNALS)


def combined(cluster_series: Mapping[str, Series], instance_series: Mapping[str, Series]) -> dict[str, Series]:
    """One instance's series from its cluster's source and the instance source: the cluster's GPU series as they are,
    the instance source's GPU series under their own device (only when it holds data) so the idle rule judges both and
    busy from either wins, and the host signals (CPU, network) from EC2."""
    found = {key: s for key, s in cluster_series.items() if key.partition(DEVICE_SEP)[0] not in HOST_SIGNALS}
    found.update({key: s for key, s in instance_series.items() if key in HOST_SIGNALS})
    if has_gpu_data(instance_series):
        for key, series in instance_series.items():
            base, _, device = key.partition(DEVICE_SEP)
            if base in HOST_SIGNALS:
                continue
            where = f"{INSTANCE_SOURCE_DEVICE}/{device}" if device else INSTANCE_SOURCE_DEVICE
            found[f"{base}{DEVICE_SEP}{where}"] = series
    return found


@dataclass
class Provenance:
    """Which sources spoke for each instance in the last fetch, and whose series were refused and why."""

    spoke: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, list[str]] = field(default_factory=dict)

    def speak(self, instance: str, source: str) -> None:
        self.spoke.setdefault(instance, []).append(source)

    def refuse(self, instance: str, source: str, why: str) -> None:
        self.refused.setdefault(instance, []).append(f"{source}: {why}")

    def evidence(self, instance: str) -> dict[str, Any]:
        found: dict[str, Any] = {"judged_by": self.spoke.get(instance, [])}
        if instance in self.refused:
            found["refused"] = self.refused[instance]
        return found


def vouch(source: Any, instances: Iterable[Instance], nodes: Any = None, read_api: Iterable[str] = ()) -> None:
    """Hand a combined source the sweep's own EC2 records (and the Kubernetes API of the clusters in ``read_api``,
    through ``nodes``): what its cluster sources may speak for. A source of one kind judges every instance it has
    data of (the CloudWatch agent publishes under the instance's own id) and needs nothing."""
    know = getattr(source, "know", None)
    if callable(know):
        know(instances, nodes, frozenset(read_api))


def annotated(plan: SweepPlan, source: Any) -> SweepPlan:
    """The plan with each decision naming the sources that spoke for its instance and the series refused for it."""
    provenance = getattr(source, "provenance", None)
    if not isinstance(provenance, Provenance):
        return plan
    outcomes = []
    for outcome in plan.outcomes:
        instance = outcome.instance.id
        if instance not in provenance.spoke and instance not in provenance.refused:
            outcomes.append(outcome)
            continue
        evidence = {**outcome.decision.evidence, "metric_sources": provenance.evidence(instance)}
        reasons = outcome.decision.reasons
        if instance in provenance.refused:
            reasons = [*reasons, f"metric series refused: {'; '.join(provenance.refused[instance])}"]
        decision = outcome.decision.model_copy(update={"evidence": evidence, "reasons": reasons})
        outcomes.append(replace(outcome, decision=decision))
    return replace(plan, outcomes=outcomes)
