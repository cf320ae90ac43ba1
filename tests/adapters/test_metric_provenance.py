"""Issue 45.1: a metric source judges only the instances EC2's own record proves it serves, through the real idle sweep
on moto with a Prometheus-compatible API (and Container Insights' namespace) anyone able to publish there can write
to. Forged series for a busy instance that is in no cluster, for a node ``kube_node_info`` maps to two instances, for a
node the cluster's API says is another instance, and a busy CloudWatch agent under an idle DCGM exporter: none stops
a machine, and each refused series is named, with its source, in the instance's decision."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.idle.sources import metric_source
from governor_cli.testing.dcgm import PrometheusServer
from tests.adapters.test_idle_sweep import NOW, T0, _aws, _event, _launch, _metrics, _runtime, _state
from tests.adapters.test_kubernetes_sweep import NODE, _scrape

MIB = 1024 * 1024


def _node_group(count: int = 1) -> list[str]:
    """Nodes of cluster gpu-prod launched by their node group's Auto Scaling group (AWS's own proof)."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    autoscaling = boto3.client("autoscaling", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="gpu-nodes", LaunchTemplateData={"ImageId": image, "InstanceType": "p5.48xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="eks-gpu-nodes",
        LaunchTemplate={"LaunchTemplateName": "gpu-nodes", "Version": "$Latest"},
        MinSize=0,
        MaxSize=4,
        DesiredCapacity=count,
        AvailabilityZones=["us-east-1a"],
        Tags=[
            {"Key": "eks:cluster-name", "Value": "gpu-prod", "PropagateAtLaunch": True},
            {"Key": "eks:nodegroup-name", "Value": "h100", "PropagateAtLaunch": True},
            {"Key": "gpu-fleet", "Value": "true", "PropagateAtLaunch": True},
        ],
    )
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["eks-gpu-nodes"])["AutoScalingGroups"][0]
    return sorted(str(i["InstanceId"]) for i in group["Instances"])


def _forge(
    server: PrometheusServer, node: str, devices: list[tuple[str, str | None]], claims: str | None = None
) -> None:
    """Idle DCGM series published under ``node`` for ``devices`` (GPU index, MIG instance), and, with ``claims``, a
    ``kube_node_info`` saying that node is instance ``claims``: what anyone able to write to the workspace can do."""
    for minute in range(-120, 200):
        at = (T0 - dt.timedelta(minutes=minute)).timestamp()
        for gpu, mig in devices:
            labels = {"gpu": gpu, "hostname": node, "modelName": "NVIDIA H100 80GB HBM3", "cluster": "gpu-prod"}
            if mig:
                labels |= {"GPU_I_ID": mig, "GPU_I_PROFILE": "1g.10gb"}
            server.add(at, "DCGM_FI_DEV_GPU_UTIL", labels, 0.0)
            server.add(at, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.0)
            server.add(at, "DCGM_FI_DEV_FB_USED", labels, 14.0)
        if claims:
            server.add(at, "kube_node_info", {"node": node, "provider_id": f"aws:///us-east-1a/{claims}"}, 1)


def _prometheus_cluster(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname", **extra}


def _sweeps(runtime: Any, aws: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from governor.idle.handler import handle

    first = handle(_event(T0, "sweep-1"), runtime, aws)
    return first, handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)


def _last(runtime: Any, instance: str) -> Any:
    return [d for _, d in runtime.ledger.decisions if d.resource == instance][-1]


def _warned(runtime: Any) -> set[str]:
    return {f.resource for f in runtime.sink.findings if f.rule in ("idle.warned", "idle.acted")}


@pytest.mark.parametrize(
    ("node", "devices", "claims"),
    [
        # kube_node_info names a made-up node as the busy instance
        ("ip-10-9-9-9.ec2.internal", [("0", None), ("1", None)], True),
        # a node named after the instance (EKS resource-name hostnames), one MIG slice and one whole GPU claimed
        ("{instance}.ec2.internal", [("3", "5"), ("7", None)], False),
    ],
    ids=["kube_node_info", "instance-hostname-mig-slice"],
)
@mock_aws
def test_forged_idle_series_for_a_busy_instance_in_no_cluster_do_not_stop_it(
    prometheus: tuple[PrometheusServer, str], node: str, devices: list[tuple[str, str | None]], claims: bool
) -> None:
    """The issue's case: the CloudWatch agent says 85 %, a forged 0 % in the cluster's Prometheus says idle. The
    instance's EC2 record names no cluster, so the cluster's source may not speak for it: busy, never warned or
    stopped, and the refused series named with their source."""
    server, url = prometheus
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (busy,) = _launch(ec2, "p5.48xlarge")
    _metrics(busy, 85.0)
    _forge(server, node.format(instance=busy), devices, claims=busy if claims else None)
    runtime = _runtime(clusters=[_prometheus_cluster(url)])
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    first, second = _sweeps(runtime, aws)
    assert first["outcomes"] == second["outcomes"] == {"busy": 1}, second
    assert _state(ec2, busy) == "running" and busy not in _warned(runtime)
    sources = _last(runtime, busy).evidence["metric_sources"]
    assert sources["judged_by"] == ["cloudwatch_agent"]
    assert any(r.startswith("gpu-prod: ") and "names no EKS cluster" in r for r in sources["refused"]), sources


@mock_aws
def test_forged_container_insights_series_for_a_busy_instance_in_no_cluster_do_not_stop_it() -> None:
    """Container Insights' ``ContainerInsights`` namespace takes PutMetricData from anyone in the account: a series
    with ClusterName gpu-prod and the busy instance's InstanceId is refused the same way."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (busy,) = _launch(ec2, "p5.48xlarge")
    _metrics(busy, 85.0)
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    dims = [
        {"Name": "ClusterName", "Value": "gpu-prod"},
        {"Name": "InstanceId", "Value": busy},
        {"Name": "NodeName", "Value": "ip-10-9-9-9.ec2.internal"},
        {"Name": "GpuDevice", "Value": "nvidia0"},
    ]
    data = []
    for minute in range(-60, 201):
        at = NOW - dt.timedelta(minutes=minute)
        data += [
            {"MetricName": "node_gpu_utilization", "Dimensions": dims, "Timestamp": at, "Value": 0.0},
            {"MetricName": "node_gpu_memory_used", "Dimensions": dims, "Timestamp": at, "Value": 14.0 * MIB},
        ]
    for first in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="ContainerInsights", MetricData=data[first : first + 500])
    runtime = _runtime(clusters=[{"name": "gpu-prod", "metric_source": "container_insights"}])
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    _, second = _sweeps(runtime, aws)
    assert second["outcomes"] == {"busy": 1}, second
    assert _state(ec2, busy) == "running" and busy not in _warned(runtime)
    refused = _last(runtime, busy).evidence["metric_sources"]["refused"]
    assert any(r.startswith("gpu-prod: ") for r in refused), refused


@mock_aws
def test_a_busy_agent_on_a_node_wins_over_an_idle_dcgm_exporter(prometheus: tuple[PrometheusServer, str]) -> None:
    """Two sources speak for one proven node: DCGM through Prometheus says idle, the CloudWatch agent on the same
    instance says 85 %. Busy from either wins; both are named in the decision."""
    server, url = prometheus
    (node,) = _node_group()
    _scrape(server, node)
    _metrics(node, 85.0)
    runtime = _runtime(clusters=[_prometheus_cluster(url)])
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    first, second = _sweeps(runtime, aws)
    assert first["outcomes"] == second["outcomes"] == {"busy": 1}, second
    decision = _last(runtime, node)
    assert decision.evidence["metric_sources"]["judged_by"] == ["cloudwatch_agent", "cluster gpu-prod"]
    assert "cloudwatch_agent" in decision.evidence["devices"] and node not in _warned(runtime)


@pytest.mark.parametrize("forgery", ["node-to-two-instances", "two-nodes-to-one-instance"])
@mock_aws
def test_an_ambiguous_node_mapping_is_nobodys(prometheus: tuple[PrometheusServer, str], forgery: str) -> None:
    """``kube_node_info`` relabelled: the idle node's name also mapped to another node of the cluster (whose exporter
    is down), or a second node name mapped to the idle node's instance. Whichever mapping is real, the series are
    nobody's: neither instance is judged idle from them (no data: unmonitored, never idle)."""
    server, url = prometheus
    real, other = _node_group(2)
    _scrape(server, real)  # NODE is `real`, idle
    if forgery == "node-to-two-instances":
        _forge(server, NODE, [], claims=other)  # a second kube_node_info for NODE: it is `other`
    else:
        _forge(server, "ip-10-9-9-9.ec2.internal", [("0", None)], claims=real)
    runtime = _runtime(clusters=[_prometheus_cluster(url)])
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    _, second = _sweeps(runtime, aws)
    assert second["outcomes"] == {"unmonitored": 2}, second
    assert not _warned(runtime)
    refused = " ".join(_last(runtime, real).evidence["metric_sources"]["refused"])
    assert "gpu-prod: " in refused and ("kube_node_info maps node" in refused or "all claim it" in refused)


@mock_aws
def test_a_node_the_clusters_api_says_is_another_instance_is_not_judged_from_its_series(
    prometheus: tuple[PrometheusServer, str],
) -> None:
    """A cluster whose API the governor reads (``reclaim: drain``): ``kube_node_info`` relabelled so the idle node's
    series name another node of the cluster, whose own exporter is down. The API's node has the idle instance's
    providerID, so the series are refused for the other one: it is not drained on forged readings."""
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from tests.adapters.test_kubernetes_reclaim import FakeApiServer, node, pod

    server, url = prometheus
    real, other = _node_group(2)
    _forge(server, NODE, [("0", None), ("1", None)], claims=other)  # NODE is really `real` (the API says so)
    api_server = FakeApiServer(
        node=node({"eks.amazonaws.com/nodegroup": "h100"}, provider=f"aws:///us-east-1a/{real}"),
        pods=[pod("serving", "llm-0")],
    )
    api_url = api_server.start()
    try:
        runtime = _runtime(clusters=[_prometheus_cluster(url, reclaim="drain")])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t"))
        _, second = _sweeps(runtime, aws)
        assert second["outcomes"] == {"unmonitored": 2}, second
        assert not _warned(runtime) and {m for m, _, _ in api_server.calls} == {"GET"}  # nothing cordoned
        refused = _last(runtime, other).evidence["metric_sources"]["refused"]
        assert any(f"the cluster's API says node {NODE} is {real}, not {other}" in r for r in refused), refused
    finally:
        api_server.stop()
