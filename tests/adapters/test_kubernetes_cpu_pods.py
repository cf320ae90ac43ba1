"""A GPU node held by CPU pods (issue 49.5) through the real idle handler: moto's EC2 and CloudWatch, the DCGM
exporter's series through the loopback Prometheus, and the cluster's Kubernetes API through the loopback fake.

When no pod requested ``nvidia.com/gpu`` on the node for the whole window (the exporter's pod labels come from the
kubelet's allocations), its CPU pods' work does not keep it: the owner is warned with what the node costs a day at its
GPU price, and, enforcing, it is drained like any idle node (cordon, eviction, NodeClaim deleted). A node whose GPU a
pod holds is judged as before: its CPU keeps it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.idle.handler import handle
from governor.idle.kubernetes.api import KubernetesApi
from governor.idle.kubernetes.nodes import KubernetesNodes
from governor.idle.sources import metric_source
from governor.policy import PolicyError
from governor_cli.testing.dcgm import PrometheusServer, exposition, load_capture
from tests.adapters.test_idle_sweep import T0, _aws, _event, _runtime
from tests.adapters.test_kubernetes_reclaim import FakeApiServer, node, pod
from tests.adapters.test_kubernetes_sources import NODE, idle_values
from tests.adapters.test_kubernetes_sweep import _karpenter_node


def _cluster(instance: str) -> FakeApiServer:
    provider = f"aws:///us-east-1a/{instance}"
    return FakeApiServer(
        node=node({"karpenter.sh/nodepool": "gpu-h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}, provider),
        pods=[
            pod("data", "etl-worker-0"),  # CPU work, no nvidia.com/gpu
            pod("kube-system", "nvidia-dcgm-exporter-abcde", owner="DaemonSet"),
        ],
        claims=[
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "gpu-h100-x7k2p", "labels": {"karpenter.sh/nodepool": "gpu-h100"}},
                "status": {"nodeName": NODE, "providerID": provider},
            }
        ],
    )


def _cpu(instance: str, percent: float) -> None:
    """EC2's own CPUUtilization, every 5 minutes (basic monitoring): the CPU pods are working."""
    data = [
        {
            "MetricName": "CPUUtilization",
            "Dimensions": [{"Name": "InstanceId", "Value": instance}],
            "Timestamp": T0 - dt.timedelta(minutes=m),
            "Value": percent,
        }
        for m in range(-120, 200, 5)
    ]
    boto3.client("cloudwatch", region_name="us-east-1").put_metric_data(Namespace="AWS/EC2", MetricData=data)


class Setup:
    def __init__(
        self, prometheus: tuple[PrometheusServer, str], *, gpu_pod: bool, enforce: bool = True, **idle: Any
    ) -> None:
        server, url = prometheus
        self.instance = _karpenter_node()
        capture = load_capture()
        for minute in range(-120, 200):
            at = (T0 - dt.timedelta(minutes=minute)).timestamp()
            text = exposition(capture, NODE, idle_values(capture), pods=gpu_pod)
            server.scrape(at, text, {"cluster": "gpu-prod"})
            server.add(at, "kube_node_info", {"node": NODE, "provider_id": f"aws:///us-east-1a/{self.instance}"}, 1)
        _cpu(self.instance, 60.0)
        self.api = _cluster(self.instance)
        api_url = self.api.start()
        cluster = {
            "name": "gpu-prod",
            "metric_source": "prometheus",
            "prometheus_url": url,
            "node_label": "hostname",
            "reclaim": "drain",
        }
        try:
            self.runtime = _runtime(clusters=[cluster], **{"cpu_utilization_threshold": 10, "enforce": enforce, **idle})
        except PolicyError as refused:
            raise AssertionError(f"the policy refuses it: {refused}") from None
        idle_policy = self.runtime.policy.idle
        signals = {"activity": idle_policy.activity_signals} if idle else {}  # only the signal tests name any
        self.aws = _aws(
            metrics=metric_source(  # type: ignore[arg-type]
                "cloudwatch_agent", "us-east-1", clusters=idle_policy.clusters, **signals
            )
        )
        self.aws.nodes = KubernetesNodes(
            "us-east-1", self.aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t")
        )

    def sweep(self, minutes: int, name: str) -> dict[str, Any]:
        return handle(_event(T0 + dt.timedelta(minutes=minutes), name), self.runtime, self.aws)

    def decisions(self) -> list[Any]:
        return [d for _, d in self.runtime.ledger.decisions if d.resource == self.instance]  # type: ignore[attr-defined]


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


def test_a_gpu_node_no_gpu_pod_used_is_warned_with_its_gpu_price_then_drained(
    aws: None, prometheus: tuple[PrometheusServer, str]
) -> None:
    setup = Setup(prometheus, gpu_pod=False)
    try:
        first = setup.sweep(0, "sweep-1")
        assert first["outcomes"] == {"warned": 1}, first
        warned = setup.decisions()[-1]
        assert warned.rule == "idle.warned" and warned.evidence["status"] == "warned"  # same buttons, same digest
        held = warned.evidence["gpu_node_without_gpu_pods"]
        assert (held["usd_per_hour"], held["usd_per_day"]) == (55.04, 1320.96)
        assert held["host_work"] == ["CPU utilisation reached 60.0%"]
        assert any("no pod requested nvidia.com/gpu" in r and "move those pods" in r for r in warned.reasons)
        title = setup.runtime.sink.findings[-1].title  # type: ignore[attr-defined]
        assert "runs no GPU pod" in title and "$1,320.96 a day at its GPU price" in title, title

        setup.sweep(30, "sweep-2")
        acted = setup.decisions()[-1]
        assert acted.rule == "idle.acted" and acted.actions[0].via == "kubernetes"  # type: ignore[attr-defined]
        assert acted.evidence["gpu_node_without_gpu_pods"]["usd_per_day"] == 1320.96
        assert setup.api.node["spec"].get("unschedulable") is True
        evicted = [path for method, path, _ in setup.api.calls if method == "POST" and path.endswith("/eviction")]
        assert evicted and all("etl-worker-0" in p for p in evicted)  # the DaemonSet's pod stays
        assert [c["metadata"]["name"] for c in setup.api.deleted_claims] == ["gpu-h100-x7k2p"]
    finally:
        setup.api.stop()


def test_a_gpu_node_whose_gpu_a_pod_holds_is_kept_by_its_cpu_as_before(
    aws: None, prometheus: tuple[PrometheusServer, str]
) -> None:
    setup = Setup(prometheus, gpu_pod=True)
    try:
        assert setup.sweep(0, "sweep-1")["outcomes"] == {"busy": 1}
        assert "gpu_node_without_gpu_pods" not in setup.decisions()[-1].evidence
    finally:
        setup.api.stop()
