"""Whose capacity a GPU instance is: a Kubernetes node is reported, never reclaimed, but only when AWS itself says a
group of machines launched it. Pure.

``eks:cluster-name``, ``karpenter.sh/nodepool`` or ``kubernetes.io/cluster/*`` are tags anyone can put on any instance
(issue 33: they made an instance report-only for ever, with no author and no end). A node group's instances are also
launched by something an ordinary tagger cannot fake: an Auto Scaling group (EKS managed and self-managed node groups;
EC2 Auto Scaling writes ``aws:autoscaling:groupName``) or an EC2 Fleet (Karpenter's CreateFleet; EC2 writes
``aws:ec2:fleet-id``). Tags under ``aws:`` are AWS's alone. A claim without that proof is reported as a tag the
governor did not honour, and the instance is judged like any other. A proven node's idle GPU-hours are still reported
and counted, with its node group named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.domain.fleet import TagProblem
from governor.domain.tagging import KUBERNETES_TAG_PREFIX, KUBERNETES_TAGS

#: System tags only AWS writes on the instances a group of machines launched.
LAUNCHED_BY = {"aws:autoscaling:groupName": "Auto Scaling group", "aws:ec2:fleet-id": "EC2 Fleet"}
#: Where a node's group is named, most specific first.
NODE_GROUP_TAGS = ("eks:nodegroup-name", "karpenter.sh/nodepool", "karpenter.sh/provisioner-name")


@dataclass(frozen=True)
class KubernetesClaim:
    """What an instance's tags say about Kubernetes, and what AWS's own tags prove."""

    tag: str
    node_group: str | None
    launched_by: str | None

    @property
    def proven(self) -> bool:
        return self.launched_by is not None

    def describe(self) -> str:
        group = f"node group {self.node_group}" if self.node_group else "its node group"
        return f"a Kubernetes node ({self.tag}; {group}, launched by {self.launched_by})"


def kubernetes_claim(tags: Mapping[str, str]) -> KubernetesClaim | None:
    """The instance's Kubernetes claim, proven or not; None when it makes none."""
    tag = next((f"tag {key}={tags[key]}" for key in KUBERNETES_TAGS if tags.get(key, "").strip()), None)
    if tag is None:
        tag = next((f"tag {key}" for key in tags if key.startswith(KUBERNETES_TAG_PREFIX)), None)
    if tag is None:
        return None
    launched = next((f"{what} {tags[key]}" for key, what in LAUNCHED_BY.items() if tags.get(key, "").strip()), None)
    group = next((tags[key] for key in NODE_GROUP_TAGS if tags.get(key, "").strip()), None)
    if group is None and launched is not None and "Auto Scaling" in launched:
        group = tags["aws:autoscaling:groupName"]
    return KubernetesClaim(tag, group, launched)


def cluster_name(tags: Mapping[str, str]) -> str | None:
    """The cluster the node's tags name (``eks:cluster-name``, else a ``kubernetes.io/cluster/<name>`` key). Only
    which cluster's API to ask: that API must then confirm the node is this instance before anything is done."""
    named = tags.get("eks:cluster-name", "").strip()
    if named:
        return named
    return next(
        (key.removeprefix(KUBERNETES_TAG_PREFIX) for key in tags if key.startswith(KUBERNETES_TAG_PREFIX)), None
    )


def kubernetes_node(tags: Mapping[str, str]) -> KubernetesClaim | None:
    """A Kubernetes node AWS's own tags prove a node group launched; None otherwise."""
    claim = kubernetes_claim(tags)
    return claim if claim is not None and claim.proven else None


def unproven_claim(tags: Mapping[str, str]) -> TagProblem | None:
    """A Kubernetes claim no Auto Scaling group or EC2 Fleet backs: not honoured, reported."""
    claim = kubernetes_claim(tags)
    if claim is None or claim.proven:
        return None
    key = claim.tag.removeprefix("tag ").split("=", 1)[0]
    return TagProblem(
        key,
        tags.get(key, ""),
        "claims a Kubernetes node, but no Auto Scaling group or EC2 Fleet launched the instance "
        "(no aws:autoscaling:groupName or aws:ec2:fleet-id): judged like any other instance",
    )
