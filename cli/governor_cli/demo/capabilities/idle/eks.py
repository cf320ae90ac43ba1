"""The demo's EKS cluster: one Karpenter GPU node (an 8 x H100 p5.48xlarge launched by an EC2 Fleet, as Karpenter
launches) whose GPUs are read from the DCGM exporter through a Prometheus-compatible API on the loopback interface,
with a pod that holds two MIG slices and never uses them (allocated but idle).

What is emulated (docs/kubernetes.md): the DCGM exporter's series are its own captured H100 MIG node rendered by
``governor_cli.testing.dcgm``; Prometheus/AMP is that module's loopback query server (no SigV4: a plain
Prometheus-compatible URL); EC2 would write ``aws:ec2:fleet-id`` itself, moto lets the demo write it. The cluster's
Kubernetes API is ``governor_cli.testing.kubeapi``'s loopback fake (no kube-apiserver is installable here): the
cluster exists in the emulated EKS, whose ``DescribeCluster`` endpoint the demo points at that fake, so the idle
function reaches it by the production path (``eks_api``: DescribeCluster, an STS-presigned token). The cluster is
``reclaim: drain``: report-only, its idle node is warned and its drain planned; enforcing, after the warning it is
cordoned, its pods evicted and its NodeClaim deleted, and Karpenter (played by :meth:`DemoCluster.karpenter`) then
terminates the instance.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.idle.kubernetes.reclaim import NODEPOOL_LABEL
from governor.idle.policy import KubernetesCluster
from governor.policy import Policy
from governor_cli.testing.dcgm import Capture, PrometheusServer, captured, exposition, load_capture
from governor_cli.testing.kubeapi import FakeApiServer

CLUSTER = "gpu-demo"
NODE_POOL = "gpu-h100"
NODE = "ip-10-0-7-21.ec2.internal"
NODE_TYPE = "p5.48xlarge"
NODE_CLAIM = f"{NODE_POOL}-x7k2p"
#: The allocated-but-idle pod (the DCGM exporter's own pod-resources capture: it holds GPU 0's MIG slices).
IDLE_POD = ("testing", "ollama-76f687f4cd-xcvvp")


class DemoCluster:
    """The loopback Prometheus holding the node's DCGM series, and the node itself once launched."""

    def __init__(self) -> None:
        self.server = PrometheusServer()
        self.url = self.server.start()
        self.capture: Capture = load_capture()
        self.instance: str | None = None
        self.api: FakeApiServer | None = None
        #: When Karpenter terminated the node (after the governor deleted its NodeClaim), or None.
        self.terminated_at: dt.datetime | None = None

    def policy(self, policy: Policy) -> Policy:
        cluster = KubernetesCluster(
            name=CLUSTER,
            metric_source="prometheus",
            prometheus_url=self.url,
            node_label="hostname",
            reclaim="drain",
            namespace_teams={"testing": "research"},
        )
        idle = policy.idle.model_copy(update={"clusters": (*policy.idle.clusters, cluster)})
        return policy.model_copy(update={"idle": idle})

    def launch(self, ec2: Any, image: str, fleet_tags: dict[str, str], owner: str) -> str:
        tags = {
            "eks:cluster-name": CLUSTER,
            "karpenter.sh/nodepool": NODE_POOL,
            "team": "research",
            "owner": owner,
            "Name": f"{CLUSTER}-{NODE_POOL}",
            **fleet_tags,
        }
        launched = ec2.run_instances(
            ImageId=image,
            InstanceType=NODE_TYPE,
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )["Instances"][0]
        self.instance = str(launched["InstanceId"])
        # Karpenter launches through CreateFleet and EC2 writes this tag; AWS refuses it from anyone else, moto not.
        ec2.create_tags(Resources=[self.instance], Tags=[{"Key": "aws:ec2:fleet-id", "Value": "fleet-7c1e2d3a"}])
        self.api = _api_server(self.instance)
        return self.instance

    def register(self, eks: Any, account: str, region: str) -> None:
        """The cluster in the emulated EKS, its endpoint the loopback API server (emulator set-up only: moto makes up
        an endpoint host and a CA; a real cluster's are its own)."""
        from moto.eks.models import eks_backends

        assert self.api is not None, "launch the node first"
        url = self.api.start()
        eks.create_cluster(name=CLUSTER, roleArn=f"arn:aws:iam::{account}:role/eks-cluster", resourcesVpcConfig={})
        found = eks_backends[account][region].clusters[CLUSTER]
        found.endpoint, found.certificate_authority = url, {}

    def karpenter(self, ec2: Any, now: dt.datetime) -> bool:
        """Karpenter's termination finalizer: once the governor has deleted the node's NodeClaim, terminate its
        instance (what the real controller does within seconds). True when it did so now."""
        if self.api is None or not self.api.deleted_claims or self.terminated_at is not None:
            return False
        ec2.terminate_instances(InstanceIds=[self.instance])
        self.terminated_at = now
        return True

    def drained(self) -> dict[str, Any]:
        """What the cluster's API saw: the writes, in order, and what is left (for the summary and the tests)."""
        api = self.api
        writes = [f"{method} {path}" for method, path, _ in (api.calls if api else []) if method != "GET"]
        return {
            "cluster": CLUSTER,
            "node_pool": NODE_POOL,
            "node": NODE,
            "instance": self.instance,
            "writes": writes,
            "cordoned": bool(api and api.node.get("spec", {}).get("unschedulable")),
            "evicted": [w.split("/")[4] + "/" + w.split("/")[6] for w in writes if w.endswith("/eviction")],
            "claim_deleted": bool(api and api.deleted_claims),
            "terminated_at": self.terminated_at.isoformat() if self.terminated_at else None,
        }

    def scrape(self, since: dt.datetime, until: dt.datetime) -> None:
        """One scrape a minute in [since, until): every GPU and slice idle, the capture's own memory readings."""
        if self.instance is None:
            return
        keys = [d.key for d in self.capture.devices]
        values = {
            "DCGM_FI_DEV_FB_USED": captured(self.capture, "DCGM_FI_DEV_FB_USED"),
            "DCGM_FI_DEV_GPU_UTIL": dict.fromkeys(keys, 0.0),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": dict.fromkeys(keys, 0.0),
        }
        text = exposition(self.capture, NODE, values)
        at = since.replace(second=0, microsecond=0)
        while at < until:
            stamp = at.timestamp()
            self.server.scrape(stamp, text, {"cluster": CLUSTER})
            self.server.add(
                stamp, "kube_node_info", {"node": NODE, "provider_id": f"aws:///us-east-1a/{self.instance}"}, 1
            )
            at += dt.timedelta(minutes=1)
        horizon = (until - dt.timedelta(hours=4)).timestamp()  # what no sweep reads again
        self.server.samples = [s for s in self.server.samples if s[0] >= horizon]

    def stop(self) -> None:
        self.server.stop()
        if self.api is not None and hasattr(self.api, "_server"):
            self.api.stop()


def _api_server(instance: str) -> FakeApiServer:
    """The node as Karpenter registers it, the idle pod that holds two of its MIG slices, the DCGM exporter's
    DaemonSet pod (never evicted) and the node's NodeClaim."""

    def pod(namespace: str, name: str, owner: str | None = None) -> dict[str, Any]:
        refs = [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0], "uid": "u"}] if owner else []
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": refs},
            "spec": {"nodeName": NODE, "containers": [{"name": name.split("-")[0]}]},
            "status": {"phase": "Running"},
        }

    provider = f"aws:///us-east-1a/{instance}"
    labels = {NODEPOOL_LABEL: NODE_POOL, "node.kubernetes.io/instance-type": NODE_TYPE}
    return FakeApiServer(
        node={
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": labels},
            "spec": {"providerID": provider},
        },
        pods=[pod(*IDLE_POD), pod("gpu-operator", "nvidia-dcgm-exporter-7xk2p", owner="DaemonSet")],
        claims=[
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": NODE_CLAIM, "labels": {NODEPOOL_LABEL: NODE_POOL}},
                "status": {"nodeName": NODE, "providerID": provider},
            }
        ],
    )
