"""The demo's EKS cluster: one Karpenter GPU node (an 8 x H100 p5.48xlarge launched by an EC2 Fleet, as Karpenter
launches) whose GPUs are read from the DCGM exporter through a Prometheus-compatible API on the loopback interface,
with a pod that holds two MIG slices and never uses them (allocated but idle).

What is emulated (docs/kubernetes.md): the DCGM exporter's series are its own captured H100 MIG node rendered by
``governor_cli.testing.dcgm``; Prometheus/AMP is that module's loopback query server (no SigV4: a plain
Prometheus-compatible URL); EC2 would write ``aws:ec2:fleet-id`` itself, moto lets the demo write it. There is no
Kubernetes API in the demo, so the cluster is ``reclaim: report`` in both runs: its idle node is warned, then
reported with its node pool named (a report-only preview must equal what the enforced run does, and an enforced
drain would need an API server).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.policy import KubernetesCluster, Policy
from governor_cli.testing.dcgm import Capture, PrometheusServer, captured, exposition, load_capture

CLUSTER = "gpu-demo"
NODE_POOL = "gpu-h100"
NODE = "ip-10-0-7-21.ec2.internal"
NODE_TYPE = "p5.48xlarge"


class DemoCluster:
    """The loopback Prometheus holding the node's DCGM series, and the node itself once launched."""

    def __init__(self) -> None:
        self.server = PrometheusServer()
        self.url = self.server.start()
        self.capture: Capture = load_capture()
        self.instance: str | None = None

    def policy(self, policy: Policy) -> Policy:
        cluster = KubernetesCluster(
            name=CLUSTER,
            metric_source="prometheus",
            prometheus_url=self.url,
            node_label="hostname",
            reclaim="report",
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
        return self.instance

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
