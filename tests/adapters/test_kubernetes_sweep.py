"""An EKS GPU node through the real idle sweep on moto: launched by its node group (an Auto Scaling group, so AWS's
own ``aws:autoscaling:groupName`` proves it is a node), no CloudWatch agent on it, its GPUs read from the DCGM
exporter through a Prometheus-compatible API on the loopback interface, combined with the agent's instances."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from governor.idle.metrics import CloudWatchMetrics
from governor.idle.sources import metric_source
from governor.policy import parse_policy
from governor_cli.testing.dcgm import PrometheusServer, exposition, load_capture
from tests.adapters.test_idle_sweep import T0, _aws, _event, _runtime
from tests.adapters.test_kubernetes_sources import idle_values

NODE = "ip-10-0-1-5.ec2.internal"


@pytest.fixture
def prometheus() -> Iterator[tuple[PrometheusServer, str]]:
    server = PrometheusServer()
    url = server.start()
    yield server, url
    server.stop()


def _node_group() -> str:
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
        DesiredCapacity=1,
        AvailabilityZones=["us-east-1a"],
        Tags=[
            {"Key": "eks:cluster-name", "Value": "gpu-prod", "PropagateAtLaunch": True},
            {"Key": "eks:nodegroup-name", "Value": "h100", "PropagateAtLaunch": True},
            {"Key": "gpu-fleet", "Value": "true", "PropagateAtLaunch": True},
        ],
    )
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["eks-gpu-nodes"])["AutoScalingGroups"][0]
    return str(group["Instances"][0]["InstanceId"])


def _scrape(server: PrometheusServer, instance: str, busy: dict[str, float] | None = None) -> None:
    capture = load_capture()
    for minute in range(-120, 200):
        at = (T0 - dt.timedelta(minutes=minute)).timestamp()
        server.scrape(at, exposition(capture, NODE, idle_values(capture, busy)), {"cluster": "gpu-prod"})
        server.add(at, "kube_node_info", {"node": NODE, "provider_id": f"aws:///us-east-1a/{instance}"}, 1)


@mock_aws
def test_an_eks_gpu_node_idle_by_dcgm_is_reported_with_its_node_group(prometheus: tuple[PrometheusServer, str]) -> None:
    server, url = prometheus
    instance = _node_group()
    _scrape(server, instance)
    runtime = _runtime(
        clusters=[{"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}]
    )
    policy = runtime.policy
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=policy.idle.clusters))  # type: ignore[arg-type]
    first = handle_sweeps(runtime, aws)
    assert first["outcomes"] == {"reported": 1}, first
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == instance]  # type: ignore[attr-defined]
    assert [f.rule for f in runtime.sink.findings][:1] == ["idle.warned"]  # type: ignore[attr-defined]  # owner first
    decision = recorded[-1]
    devices = decision.evidence.get("devices") or {}
    assert {"0/mig11", "0/mig13", "7"} <= set(devices), decision.evidence
    finding = runtime.sink.findings[-1]  # type: ignore[attr-defined]
    assert "Kubernetes node" in finding.title and "h100" in " ".join(decision.reasons)
    assert (
        boto3.client("ec2", region_name="us-east-1").describe_instances(InstanceIds=[instance])["Reservations"][0][
            "Instances"
        ][0]["State"]["Name"]
        == "running"
    )


@mock_aws
def test_an_eks_gpu_node_with_one_busy_gpu_is_busy(prometheus: tuple[PrometheusServer, str]) -> None:
    server, url = prometheus
    instance = _node_group()
    _scrape(server, instance, busy={"4": 71.0})
    runtime = _runtime(
        clusters=[{"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}]
    )
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    assert handle_sweeps(runtime, aws)["outcomes"] == {"busy": 1}


def handle_sweeps(runtime, aws):  # type: ignore[no-untyped-def]
    from governor.idle.handler import handle

    handle(_event(T0, "sweep-1"), runtime, aws)
    return handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)


def test_without_clusters_the_agent_alone_is_used() -> None:
    policy = parse_policy({})
    assert isinstance(
        metric_source("cloudwatch_agent", "us-east-1", object(), "MB", policy.idle.clusters), CloudWatchMetrics
    )
