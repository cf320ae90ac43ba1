"""Reclaim an idle EKS GPU node through its owner, never around it: cordon it, evict its pods through the Eviction
API (which honours PodDisruptionBudgets), then let the owner remove it: delete its Karpenter NodeClaim (Karpenter's
termination finalizer drains what is left and terminates the instance), or, for a managed node group, terminate the
instance in its Auto Scaling group with the desired capacity lowered (so the group does not replace it).

Nothing is done to a node the API does not confirm is the instance judged idle (``spec.providerID`` ends with its
id), nor to one neither Karpenter (label ``karpenter.sh/nodepool``) nor a managed node group
(``eks.amazonaws.com/nodegroup``) owns. A PodDisruptionBudget that refuses an eviction (HTTP 429) stops the drain:
the node stays cordoned, and the next sweep tries again. DaemonSet pods, mirror (static) pods and finished pods are
not evicted (``kubectl drain``'s rules). Report-only (``enforce`` false) reads and plans, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from governor.idle.kubernetes.api import KubernetesApi, KubernetesError

NODEPOOL_LABEL = "karpenter.sh/nodepool"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

Owner = Literal["karpenter", "managed_node_group"]


@dataclass
class NodeReclaim:
    """What was found, planned and done on one node, in order; ``blocked`` says why it stopped, if it did."""

    node: str
    instance_id: str
    owner: Owner | None = None
    pool: str | None = None
    evicted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    blocked: str | None = None
    removed: bool = False


def _node_instance(node: dict[str, Any]) -> str:
    return str(node.get("spec", {}).get("providerID", "")).rsplit("/", 1)[-1]


def _skip_reason(pod: dict[str, Any]) -> str | None:
    meta = pod.get("metadata", {})
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return "DaemonSet"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "static pod"
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return "finished"
    return None


def _owner(node: dict[str, Any], done: NodeReclaim) -> bool:
    """Who removes the node: Karpenter (its node pool) or a managed node group; False (and why) when neither does."""
    labels = node.get("metadata", {}).get("labels") or {}
    if labels.get(NODEPOOL_LABEL):
        done.owner, done.pool = "karpenter", labels[NODEPOOL_LABEL]
    elif labels.get(NODEGROUP_LABEL):
        done.owner, done.pool = "managed_node_group", labels[NODEGROUP_LABEL]
    else:
        done.blocked = f"node {done.node} has neither {NODEPOOL_LABEL} nor {NODEGROUP_LABEL}: no owner to remove it"
        return False
    return True


def _evict(api: KubernetesApi, done: NodeReclaim, *, enforce: bool) -> bool:
    """Evict every pod ``kubectl drain`` would, through the Eviction API; False when a PodDisruptionBudget refuses."""
    for pod in api.pods_on(done.node):
        meta = pod.get("metadata", {})
        name, namespace = str(meta.get("name")), str(meta.get("namespace", "default"))
        why = _skip_reason(pod)
        if why:
            done.skipped.append(f"{namespace}/{name} ({why})")
            continue
        if enforce:
            try:
                api.evict(namespace, name)
            except KubernetesError as error:
                if error.status == 404:  # gone already
                    continue
                if error.status == 429:
                    done.blocked = (
                        f"eviction of {namespace}/{name} refused by a PodDisruptionBudget; node stays cordoned"
                    )
                    return False
                raise
        done.evicted.append(f"{namespace}/{name}")
    return True


def _remove(
    api: KubernetesApi, done: NodeReclaim, *, enforce: bool, terminate_in_group: Callable[[str], Any] | None
) -> bool:
    """Let the owner remove the drained node: delete its NodeClaim, or terminate it in its node group."""
    verb = "" if enforce else "would "
    if done.owner == "karpenter":
        claims = api.nodeclaims()
        claim = next((c for c in claims if c.get("status", {}).get("nodeName") == done.node), None)
        if claim is None:
            done.blocked = f"no Karpenter NodeClaim names node {done.node}"
            return False
        name = str(claim["metadata"]["name"])
        if enforce:
            api.delete_nodeclaim(name)
        done.steps.append(f"{verb}delete NodeClaim {name} (node pool {done.pool})")
        return True
    if terminate_in_group is None:
        done.blocked = "no Auto Scaling adapter to terminate the instance in its node group"
        return False
    if enforce:
        terminate_in_group(done.instance_id)
    done.steps.append(f"{verb}terminate {done.instance_id} in node group {done.pool}, desired capacity lowered")
    return True


def reclaim_node(
    api: KubernetesApi,
    node_name: str,
    instance_id: str,
    *,
    enforce: bool,
    terminate_in_group: Callable[[str], Any] | None = None,
) -> NodeReclaim:
    """Cordon, drain and remove one node through its owner (``terminate_in_group`` for a managed node group)."""
    done = NodeReclaim(node_name, instance_id)
    node = api.node(node_name)
    if _node_instance(node) != instance_id:
        done.blocked = (
            f"node {node_name} is instance {_node_instance(node) or '(none)'}, not {instance_id}: not touched"
        )
        return done
    if not _owner(node, done):
        return done
    verb = "" if enforce else "would "
    if not node.get("spec", {}).get("unschedulable"):
        if enforce:
            api.cordon(node_name)
        done.steps.append(f"{verb}cordon {node_name}")
    if not _evict(api, done, enforce=enforce):
        return done
    done.steps.append(f"{verb}evict {len(done.evicted)} pods")
    if _remove(api, done, enforce=enforce, terminate_in_group=terminate_in_group):
        done.removed = enforce
    return done
