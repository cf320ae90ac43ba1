"""SageMaker HyperPod cluster nodes: which EC2 instance ids belong to which cluster (ListClusters, ListClusterNodes).

A HyperPod node is removed through SageMaker (BatchDeleteClusterNodes, UpdateCluster), never stopped through EC2:
HyperPod would count it failed and replace it. No tag on the instance is trusted for this (AWS documents none the
governor could verify, and anyone can set a tag); the cluster's own node list is the proof.
"""

from __future__ import annotations

from typing import Any

from governor.adapters.aws import client

IAM_ACTIONS = frozenset({"sagemaker:ListClusters", "sagemaker:ListClusterNodes"})


class HyperPodNodes:
    """Counts its API calls so the benchmarks can report them."""

    def __init__(
        self,
        region: str | None = None,
        sagemaker: Any = None,
        *,
        account: str | None = None,
        event_id: str | None = None,
    ) -> None:
        self._sagemaker = sagemaker or client("sagemaker", region, account=account, event_id=event_id)
        self.calls = 0

    def nodes(self) -> dict[str, str]:
        """Instance id -> cluster name, for every node of every HyperPod cluster in the region."""
        found: dict[str, str] = {}
        for page in self._sagemaker.get_paginator("list_clusters").paginate():
            self.calls += 1
            for cluster in page.get("ClusterSummaries", []):
                name = cluster["ClusterName"]
                for nodes in self._sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=name):
                    self.calls += 1
                    for node in nodes.get("ClusterNodeSummaries", []):
                        if node.get("InstanceId"):
                            found[node["InstanceId"]] = name
        return found
