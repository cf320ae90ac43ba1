"""One pass of a Kubernetes reclaim (``drain_state``): re-read the node, check that its reclaim path exists before
touching it, then cordon, evict through the Eviction API (PodDisruptionBudgets respected), ask its owner to remove it
(delete its Karpenter NodeClaim, or terminate it in its managed node group with the desired capacity lowered), and
re-read until the node is gone or the instance shutting down. Each pass resumes from the state the ledger kept.

"Terminated" is said only after a re-read: the node absent from the API, or EC2 reporting the instance
``shutting-down`` / ``terminated``. A node with both ``karpenter.sh/nodepool`` and ``eks.amazonaws.com/nodegroup``,
a Karpenter node no NodeClaim names, a node with neither label, or a node that vanished while its instance still
runs has no reclaim path: nothing is touched, and the pass says so (every pass, until someone acts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from governor.domain.actions import Outcome
from governor.domain.ports import utcnow
from governor.idle.kubernetes.api import KubernetesApi, KubernetesError
from governor.idle.kubernetes.drain_state import (
    CORDONED,
    DRAIN_KIND,
    Drain,
    begin,
    begun,
    give_up_reason,
    summary,
)
from governor.idle.kubernetes.promql import instance_of_provider
from governor.idle.kubernetes.reclaim import NODEGROUP_LABEL, NODEPOOL_LABEL, _skip_reason

#: EC2 states that confirm an instance is being, or has been, removed.
ENDING = frozenset({"shutting-down", "terminated"})
#: ``instance id -> its EC2 state now`` (None: it no longer exists).
InstanceState = Callable[[str], str | None]


def _node_instance(node: dict[str, Any]) -> str | None:
    return instance_of_provider(str(node.get("spec", {}).get("providerID", "")))


def _find(api: KubernetesApi, drain: Drain) -> dict[str, Any] | None:
    """The node, re-read by name once known, else found by its providerID; None when the API has no such node."""
    if drain.node:
        try:
            return api.node(drain.node)
        except KubernetesError as error:
            if error.status == 404:
                return None
            raise
    return next((n for n in api.nodes() if _node_instance(n) == drain.instance_id), None)


def _path(api: KubernetesApi, node: dict[str, Any], can_terminate: bool) -> tuple[str | None, str | None, str | None]:
    """(owner, pool, NodeClaim name) of the node's reclaim path, or (None, None, why it has none)."""
    name = str(node.get("metadata", {}).get("name"))
    labels = node.get("metadata", {}).get("labels") or {}
    pool, group = labels.get(NODEPOOL_LABEL), labels.get(NODEGROUP_LABEL)
    if pool and group:
        return (
            None,
            None,
            (
                f"node {name} carries both {NODEPOOL_LABEL}={pool} and {NODEGROUP_LABEL}={group}: "
                "which owner would remove it is unclear, so its reclaim path does not exist"
            ),
        )
    if pool:
        claim = next((c for c in api.nodeclaims() if c.get("status", {}).get("nodeName") == name), None)
        if claim is None:
            return None, None, f"no Karpenter NodeClaim names node {name}: its reclaim path does not exist"
        return "karpenter", str(pool), str(claim["metadata"]["name"])
    if group:
        if not can_terminate:
            return None, None, "no Auto Scaling adapter to terminate the instance in its node group"
        return "managed_node_group", str(group), None
    return None, None, f"node {name} has neither {NODEPOOL_LABEL} nor {NODEGROUP_LABEL}: no owner to remove it"


def stuck(drain: Drain, now: dt.datetime, why: str, *, budget: bool = False) -> Drain:
    """The pass stopped short: why, one more attempt without progress."""
    return replace(drain, problem=why, blocked_by_budget=budget, attempts=drain.attempts + 1).step(
        now, drain.state, ok=False, reason=why
    )


def _forward(drain: Drain, now: dt.datetime, state: str, what: str) -> Drain:
    return replace(drain, state=state, problem=None, blocked_by_budget=False, attempts=0).step(now, what)  # type: ignore[arg-type]


def node_present(api: KubernetesApi, drain: Drain) -> bool:
    """Whether the cluster still has the drain's node (a read: the follow-up of a drain no decision carried on)."""
    return _find(api, drain) is not None


def _gone(api: KubernetesApi, drain: Drain, instance_state: InstanceState) -> str | None:
    """How the re-read confirms the reclaim (the node gone, the instance ending), or None."""
    state = instance_state(drain.instance_id)
    if state is None or state in ENDING:
        return f"instance {drain.instance_id} is {state or 'gone'}"
    if drain.node:
        try:
            api.node(drain.node)
        except KubernetesError as error:
            if error.status == 404:
                return f"node {drain.node} is gone from the cluster"
            raise
    return None


def _evict(api: KubernetesApi, drain: Drain, now: dt.datetime, steps: list[str]) -> tuple[Drain, bool]:
    """Evict every pod ``kubectl drain`` would; (drain, True) when all are out, else the drain saying why not."""
    evicted = 0
    for pod in api.pods_on(str(drain.node)):
        meta = pod.get("metadata", {})
        name, namespace = str(meta.get("name")), str(meta.get("namespace", "default"))
        if _skip_reason(pod):
            continue
        try:
            api.evict(namespace, name)
        except KubernetesError as error:
            if error.status == 404:  # gone already
                continue
            if error.status == 429:
                why = f"eviction of {namespace}/{name} refused by a PodDisruptionBudget; the node stays cordoned"
                return stuck(drain, now, why, budget=True), False
            raise
        evicted += 1
    steps.append(f"evict {evicted} pods")
    return _forward(drain, now, "drained", f"evicted {evicted} pods"), True


def _remove(
    api: KubernetesApi, drain: Drain, claim: str | None, terminate: Callable[[str], Any] | None, now: dt.datetime
) -> tuple[Drain, str]:
    if drain.owner == "karpenter":
        try:
            api.delete_nodeclaim(str(claim))
        except KubernetesError as error:
            if error.status != 404:  # deleted already (an earlier pass whose answer was lost)
                raise
        sentence = f"delete NodeClaim {claim} (node pool {drain.pool})"
    else:
        assert terminate is not None  # checked with the path
        terminate(drain.instance_id)
        sentence = f"terminate {drain.instance_id} in node group {drain.pool}, desired capacity lowered"
    return _forward(drain, now, "removing", sentence), sentence


def _pass(
    api: KubernetesApi,
    kept: list[Drain],
    now: dt.datetime,
    terminate: Callable[[str], Any] | None,
    instance_state: InstanceState,
    steps: list[str],
) -> Drain:
    """One pass; ``kept[0]`` follows each step forward, so an API error part-way keeps what was already done."""
    drain = kept[0]
    ending = instance_state(drain.instance_id)
    if ending is None or ending in ENDING:  # terminated meanwhile (its owner, a person): nothing more to do
        steps.append(f"instance {drain.instance_id} is {ending or 'gone'}")
        return _forward(drain, now, "gone", steps[-1])
    node = _find(api, drain)
    if node is None:
        if drain.state == "removing":
            return _forward(drain, now, "gone", f"node {drain.node} is gone from the cluster")
        why = f"no node of cluster {drain.cluster} is instance {drain.instance_id} (it left the cluster)"
        return stuck(replace(drain, state="no-path"), now, why)
    name = str(node.get("metadata", {}).get("name"))
    if _node_instance(node) != drain.instance_id:
        why = f"node {name} is instance {_node_instance(node) or '(none)'}, not {drain.instance_id}: not touched"
        return stuck(replace(drain, state="no-path", node=None), now, why)
    drain = kept[0] = replace(drain, node=name)
    if drain.state == "removing":
        confirmed = _gone(api, drain, instance_state)
        if confirmed:
            steps.append(confirmed)
            return _forward(drain, now, "gone", confirmed)
        return drain.step(now, "removing", ok=True, reason="waiting for the node's owner to remove it")
    owner, pool, claim = _path(api, node, terminate is not None)
    if owner is None:
        drain = _undo(api, drain, now, steps) if drain.state in CORDONED else drain
        return stuck(replace(drain, state="no-path"), now, str(claim))
    drain = kept[0] = replace(drain, owner=owner, pool=pool)
    if drain.state in ("started", "no-path"):
        if node.get("spec", {}).get("unschedulable"):
            drain = replace(drain, cordoned_by_us=False)
        else:
            api.cordon(name)
            steps.append(f"cordon {name}")
            drain = replace(drain, cordoned_by_us=True)
        drain = kept[0] = _forward(drain, now, "cordoned", f"cordoned {name}")
    if drain.state == "cordoned":
        drain, done = _evict(api, drain, now, steps)
        kept[0] = drain
        if not done:
            return drain
    drain, sentence = _remove(api, drain, claim, terminate, now)
    kept[0] = drain
    steps.append(sentence)
    confirmed = _gone(api, drain, instance_state)
    if confirmed:
        steps.append(confirmed)
        return _forward(drain, now, "gone", confirmed)
    return drain


def _undo(api: KubernetesApi, drain: Drain, now: dt.datetime, steps: list[str]) -> Drain:
    """Un-cordon a node the governor cordoned (giving up, or the reclaim path gone); the history says how it went."""
    if not drain.cordoned_by_us or not drain.node or drain.state not in CORDONED:
        return drain
    try:
        api.uncordon(drain.node)
    except KubernetesError as error:
        return drain.step(now, "un-cordon", ok=False, reason=f"un-cordon of {drain.node} failed: {error}")
    steps.append(f"un-cordon {drain.node}")
    return replace(drain, uncordoned=True).step(now, f"un-cordoned {drain.node}")


def give_up(api: KubernetesApi, drain: Drain, why: str, now: dt.datetime, steps: list[str]) -> Drain:
    """Stop the drain: un-cordon what the governor cordoned, and keep why."""
    return replace(_undo(api, drain, now, steps), state="gave-up", problem=why).step(
        now, "gave up", ok=False, reason=why
    )


def drain_pass(
    api: KubernetesApi,
    stored: Drain | None,
    instance_id: str,
    cluster: str,
    *,
    now: dt.datetime,
    event_id: str,
    instance_state: InstanceState,
    terminate: Callable[[str], Any] | None = None,
) -> tuple[Drain, list[str]]:
    """One pass from where ``stored`` stopped (a new drain when it is not active): the drain now, and the sentences
    of what this pass changed. An API error is recorded as the pass's problem, never raised."""
    drain = begun(begin(stored, instance_id, cluster, now), event_id, now)
    steps: list[str] = []
    kept = [drain]
    try:
        drain = _pass(api, kept, now, terminate, instance_state, steps)
    except KubernetesError as error:  # HTTP 500, a timeout, a refused call: recorded, resumed next pass
        drain = stuck(kept[0], now, f"{error}")
    except Exception as error:  # the Auto Scaling call, an unexpected answer: the same
        drain = stuck(kept[0], now, f"{type(error).__name__}: {error}")
    why = give_up_reason(drain, now)
    if why is not None and drain.active:
        drain = give_up(api, drain, why, now, steps)
    return drain, steps


def load(ledger: Any, instance_id: str) -> Drain | None:
    return Drain.from_item(ledger.get_item(DRAIN_KIND, instance_id))


def store(ledger: Any, drain: Drain) -> None:
    ledger.put_item(DRAIN_KIND, drain.instance_id, drain.to_item())


def outcome_sentence(drain: Drain, steps: list[str]) -> str:
    """What the pass did, as the action's ``done``: the steps, and where the drain stands when it is not over."""
    if drain.state == "gone":
        return "; ".join(steps)
    done = "; ".join(steps)
    return f"not drained: {summary(drain)}" + (f" (this pass: {done})" if done else "")


def reclaim_through_cluster(aws: Any, at: Any, cluster: str) -> Outcome:
    """``Terminate(via="kubernetes")``: one pass of the node's drain, as an action outcome that is ok only once a
    re-read confirms the node gone or the instance ending; anything short of that says where the drain stands."""
    clock = getattr(aws, "clock", None)
    now = clock() if callable(clock) else utcnow()

    def instance_state(instance_id: str) -> str | None:
        live = aws.instances.instance(instance_id)
        return live.state if live is not None else None

    try:
        drain, steps = aws.nodes.drain(
            at.resource, cluster, ledger=at.ledger, event_id=at.event_id, now=now, instance_state=instance_state
        )
    except Exception as error:  # the cluster's API cannot even be found (DescribeCluster refused): nothing changed
        why = f"cluster {cluster}: {type(error).__name__}: {error}"
        return Outcome(ok=False, error_code=type(error).__name__, message=why, done=f"not drained: {why}")
    ok = drain.state == "gone"
    return Outcome(
        ok=ok,
        error_code=None if ok else "NodeNotDrained",
        message=summary(drain),
        done=outcome_sentence(drain, steps),
        data={"drain_state": drain.state, "drain_active": drain.active},
    )
