"""The idle sweep's Kubernetes adapter: finds the node an instance is in its cluster's API and reclaims it through
its owner (``reclaim.reclaim_node``). One API client per cluster per invocation; ``api`` lets tests point it at a
loopback server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from governor.domain.actions import Outcome
from governor.idle.kubernetes.api import IAM_ACTIONS as API_ACTIONS
from governor.idle.kubernetes.api import KubernetesApi, eks_api
from governor.idle.kubernetes.drain import InstanceState, drain_pass, load, reclaim_through_cluster, store
from governor.idle.kubernetes.drain_state import Drain
from governor.idle.kubernetes.promql import instance_of_provider
from governor.idle.kubernetes.reclaim import NodeReclaim, reclaim_node

IAM_ACTIONS = API_ACTIONS


class KubernetesNodes:
    """Reclaim a node by instance id in a named cluster; ``groups`` terminates managed node group members."""

    def __init__(
        self,
        region: str | None,
        groups: Any = None,
        api: Callable[[str], KubernetesApi] | None = None,
    ) -> None:
        self._region = region
        self._groups = groups
        self._api = api or (lambda cluster: eks_api(cluster, region))
        self._clients: dict[str, KubernetesApi] = {}

    def node_instances(self, cluster: str) -> dict[str, str]:
        """node name -> instance id, from each node's ``spec.providerID`` as the cluster's API returns it: what proves
        a metric series' node is the instance it names (``governor.idle.provenance``)."""
        found: dict[str, str] = {}
        for node in self.api(cluster).nodes():
            instance = instance_of_provider(str(node.get("spec", {}).get("providerID", "")))
            name = str(node.get("metadata", {}).get("name", ""))
            if instance and name:
                found[name] = instance
        return found

    def api(self, cluster: str) -> KubernetesApi:
        """The cluster's API client, built once per invocation."""
        return self._clients.get(cluster) or self._clients.setdefault(cluster, self._api(cluster))

    def drain(
        self,
        instance_id: str,
        cluster: str,
        *,
        ledger: Any,
        event_id: str,
        now: dt.datetime,
        instance_state: InstanceState,
    ) -> tuple[Drain, list[str]]:
        """One pass of the node's drain, resumed from the ledger's record of it and recorded there again."""
        stored = load(ledger, instance_id) if ledger is not None else None
        terminate = self._groups.scale_in if self._groups is not None else None
        drain, steps = drain_pass(
            self.api(cluster),
            stored,
            instance_id,
            cluster,
            now=now,
            event_id=event_id,
            instance_state=instance_state,
            terminate=terminate,
        )
        if ledger is not None:
            store(ledger, drain)
        return drain, steps

    def reclaim_outcome(self, aws: Any, at: Any, cluster: str) -> Outcome:
        """``Terminate(via="kubernetes")``'s outcome: one pass of the drain (``drain.reclaim_through_cluster``)."""
        return reclaim_through_cluster(aws, at, cluster)

    def reclaim(self, instance_id: str, cluster: str, *, enforce: bool = True) -> NodeReclaim:
        api = self.api(cluster)
        nodes = api.nodes()
        name = next(
            (
                str(n["metadata"]["name"])
                for n in nodes
                if str(n.get("spec", {}).get("providerID", "")).rsplit("/", 1)[-1] == instance_id
            ),
            None,
        )
        if name is None:
            return NodeReclaim("(none)", instance_id, blocked=f"no node of cluster {cluster} is instance {instance_id}")
        terminate = self._groups.scale_in if self._groups is not None else None
        return reclaim_node(api, name, instance_id, enforce=enforce, terminate_in_group=terminate)
