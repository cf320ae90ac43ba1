"""An EKS GPU node through the real idle sweep on moto: launched by its node group (an Auto Scaling group, so AWS's
own ``aws:autoscaling:groupName`` proves it is a node), no CloudWatch agent on it, its GPUs read from the DCGM
exporter through a Prometheus-compatible API on the loopback interface, combined with the agent's instances."""

from __future__ import annotations

import datetime as dt
import json

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
    hours = [d for _, d in runtime.ledger.decisions if d.rule == "idle.gpu-hours"]  # type: ignore[attr-defined]
    assert len(hours) == 2 and hours[0].resource == "eks:gpu-prod"  # one per sweep, over the sweep's own 15 min
    by_namespace = {row["namespace"]: row for row in hours[-1].evidence["namespaces"]}
    testing = by_namespace["testing"]
    assert testing["allocated_but_idle"] and testing["pods"] == ["testing/ollama-76f687f4cd-xcvvp"]
    assert testing["gpu_hours"] == pytest.approx(2 * 0.25, abs=0.02)  # two MIG slices x 15 minutes
    assert by_namespace[None]["gpu_hours"] == pytest.approx(7 * 0.25, abs=0.05)
    assert hours[-1].severity == "warning"
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


@mock_aws
def test_an_idle_karpenter_node_is_warned_then_cordoned_drained_and_removed_through_its_node_pool(
    prometheus: tuple[PrometheusServer, str],
) -> None:
    """The issue's Done-when: DCGM says idle; the owner is warned first; enforcing, the next sweep cordons the node,
    evicts its pod through the Eviction API and deletes its Karpenter NodeClaim (Karpenter then terminates it)."""
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from tests.adapters.test_kubernetes_reclaim import _karpenter_cluster

    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    # Karpenter launches through CreateFleet and EC2 writes aws:ec2:fleet-id; AWS refuses that key from anyone else,
    # moto does not, so the test writes it in EC2's place.
    tags = {
        "aws:ec2:fleet-id": "fleet-1d2c3b4a",
        "eks:cluster-name": "gpu-prod",
        "karpenter.sh/nodepool": "gpu-h100",
        "gpu-fleet": "true",
        "owner": "ana@example.com",
        "team": "research",
    }
    ec2.create_tags(Resources=[instance], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    server, url = prometheus
    _scrape(server, instance)
    api_server = _karpenter_cluster()
    api_server.node["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"
    api_server.claims[0]["status"]["providerID"] = f"aws:///us-east-1a/{instance}"
    api_url = api_server.start()
    try:
        runtime = _runtime(
            clusters=[
                {
                    "name": "gpu-prod",
                    "metric_source": "prometheus",
                    "prometheus_url": url,
                    "node_label": "hostname",
                    "reclaim": "drain",
                }
            ]
        )
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda cluster: KubernetesApi(api_url, lambda: "t"))
        from governor.idle.handler import handle

        first = handle(_event(T0, "sweep-1"), runtime, aws)
        assert first["outcomes"] == {"warned": 1}  # the owner hears first; nothing touched (the node list is read)
        assert [(m, p) for m, p, _ in api_server.calls] == [("GET", "/api/v1/nodes")]
        second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
        assert second["outcomes"] == {"acted": 1}, second
        done = " ".join(second["done"][instance])
        assert "cordon" in done and "evict 1 pods" in done and "delete NodeClaim gpu-h100-x7k2p" in done
        assert api_server.node["spec"]["unschedulable"] is True and api_server.claims == []
        assert [p["metadata"]["name"] for p in api_server.pods] == ["nvidia-dcgm-exporter-abcde", "kube-proxy-node"]
        reasons = [d for _, d in runtime.ledger.decisions if d.resource == instance][-1].reasons  # type: ignore[attr-defined]
        assert any("through EKS cluster gpu-prod" in r for r in reasons)
    finally:
        api_server.stop()


@mock_aws
def test_report_only_drains_nothing(prometheus: tuple[PrometheusServer, str]) -> None:
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from tests.adapters.test_kubernetes_reclaim import _karpenter_cluster

    instance = _node_group()
    server, url = prometheus
    _scrape(server, instance)
    api_server = _karpenter_cluster()
    api_server.node["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"  # the API proves the node is the instance
    api_url = api_server.start()
    try:
        cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}
        runtime = _runtime(enforce=False, clusters=[{**cluster, "reclaim": "drain"}])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t"))
        result = handle_sweeps(runtime, aws)
        assert result["outcomes"] == {"acted": 1} and not result["done"]
        assert {m for m, _, _ in api_server.calls} == {"GET"}  # the node list, read to prove the nodes: no change
        assert "report-only" in runtime.sink.findings[-1].title  # type: ignore[attr-defined]
    finally:
        api_server.stop()


@mock_aws
def test_an_idle_managed_node_group_node_is_drained_then_terminated_in_its_group(
    prometheus: tuple[PrometheusServer, str],
) -> None:
    """A managed node group's node: drained through the Eviction API, then terminated through its Auto Scaling
    group with the desired capacity lowered, so the group does not launch a replacement."""
    from governor.idle.handler import handle
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from tests.adapters.test_kubernetes_reclaim import FakeApiServer, node, pod

    instance = _node_group()
    server, url = prometheus
    _scrape(server, instance)
    api_server = FakeApiServer(
        node=node({"eks.amazonaws.com/nodegroup": "h100"}, provider=f"aws:///us-east-1a/{instance}"),
        pods=[pod("serving", "llm-0")],
    )
    api_url = api_server.start()
    try:
        cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}
        runtime = _runtime(clusters=[{**cluster, "reclaim": "drain"}])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t"))
        handle(_event(T0, "sweep-1"), runtime, aws)
        second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
        assert second["outcomes"] == {"acted": 1}, second
        assert "terminate " + instance + " in node group h100" in " ".join(second["done"][instance])
        assert api_server.pods == [] and api_server.node["spec"]["unschedulable"] is True
        autoscaling = boto3.client("autoscaling", region_name="us-east-1")
        group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["eks-gpu-nodes"])["AutoScalingGroups"][
            0
        ]
        assert group["DesiredCapacity"] == 0 and instance not in {i["InstanceId"] for i in group["Instances"]}
    finally:
        api_server.stop()


def _karpenter_node(instance_tags: dict[str, str] | None = None) -> str:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    tags = {
        "aws:ec2:fleet-id": "fleet-1d2c3b4a",  # EC2 writes it for CreateFleet (Karpenter); moto lets the test write it
        "eks:cluster-name": "gpu-prod",
        "karpenter.sh/nodepool": "gpu-h100",
        "gpu-fleet": "true",
        "owner": "ana@example.com",
        **(instance_tags or {}),
    }
    ec2.create_tags(Resources=[instance], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return str(instance)


@mock_aws
def test_a_report_only_nodes_warning_has_no_stop_now_button(prometheus: tuple[PrometheusServer, str]) -> None:
    """Stop now on a node its cluster does not let the governor drain would be refused: the warning does not offer
    it (Keep stays: it snoozes the reporting). A draining cluster's node keeps the button (Stop now drains it)."""
    from governor.interactions.domain import KEEP_HOURS, KEEP_MORNING, STOP_NOW, buttons_for

    server, url = prometheus
    instance = _node_group()
    _scrape(server, instance)
    cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}
    for reclaim, buttons in (("report", [KEEP_HOURS, KEEP_MORNING]), ("drain", [KEEP_HOURS, KEEP_MORNING, STOP_NOW])):
        runtime = _runtime(clusters=[{**cluster, "reclaim": reclaim}])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        from governor.idle.handler import handle

        handle(_event(T0, f"sweep-{reclaim}"), runtime, aws)
        warned = [f for f in runtime.sink.findings if f.rule == "idle.warned"]  # type: ignore[attr-defined]
        assert len(warned) == 1 and buttons_for(warned[0]) == buttons, reclaim


@pytest.mark.parametrize("blocked", [False, True], ids=["drained", "pdb-blocks"])
@mock_aws
def test_stop_now_on_a_draining_clusters_node_drains_it_through_its_node_pool(
    prometheus: tuple[PrometheusServer, str], blocked: bool
) -> None:
    """Stop now on a Karpenter node of a cluster with ``reclaim: drain`` goes through the cluster's API (cordon,
    evict, delete the NodeClaim), never around its owner (a plain TerminateInstances Karpenter would replace); a
    drain a PodDisruptionBudget blocks is answered as refused, not as done."""
    from governor.idle.handler import handle
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from tests.adapters.test_kubernetes_reclaim import _karpenter_cluster
    from tests.adapters.test_nothing_lost import _click

    ec2 = boto3.client("ec2", region_name="us-east-1")
    server, url = prometheus
    instance = _karpenter_node()
    _scrape(server, instance)
    api_server = _karpenter_cluster()
    for held in (api_server.node["spec"], api_server.claims[0]["status"]):
        held["providerID"] = f"aws:///us-east-1a/{instance}"
    if blocked:
        api_server.protected = {"research/notebook-0"}
    api_url = api_server.start()
    try:
        cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url}
        runtime = _runtime(clusters=[{**cluster, "node_label": "hostname", "reclaim": "drain"}])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t"))
        answers: list[str] = []
        aws.respond = lambda _url, body: answers.append(str(body)) or True
        assert handle(_event(T0, "sweep-1"), runtime, aws)["outcomes"] == {"warned": 1}
        at = T0 + dt.timedelta(minutes=2)
        aws.clock = lambda: at
        result = handle(_click(runtime, instance, "click-1", at), runtime, aws)
        state = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"]
        assert state["Name"] == "running"  # never TerminateInstances around Karpenter
        assert api_server.node["spec"]["unschedulable"] is True
        if blocked:
            assert result["status"] == "refused" and len(api_server.claims) == 1, result
            assert "PodDisruptionBudget" in answers[-1]
        else:
            assert result["status"] == "terminated" and api_server.claims == [], result
            acted = [d for _, d in runtime.ledger.decisions if d.rule == "idle.stop-now"]  # type: ignore[attr-defined]
            assert acted[-1].actions[0].via == "kubernetes"
            assert "delete NodeClaim gpu-h100-x7k2p" in acted[-1].evidence["done"][0]
    finally:
        api_server.stop()


@mock_aws
def test_a_nodes_warning_says_it_would_be_drained_and_removed_not_terminated(
    prometheus: tuple[PrometheusServer, str],
) -> None:
    """Issue 48 item 6: the summary said "would cordon, drain and delete its NodeClaim" while Slack and email said
    "would be terminated". The warning carries the path (``Warn.via``/``group``) and every message renders it with
    ``facts.action_path``: through the real sweep on moto, a Kubernetes API double and a Prometheus double."""
    from governor.idle.kubernetes.api import KubernetesApi
    from governor.idle.kubernetes.nodes import KubernetesNodes
    from governor.notifier.domain import MergedFinding
    from governor.notifier.render import email_for, slack_messages
    from tests.adapters.test_kubernetes_reclaim import _karpenter_cluster

    instance = _node_group()
    server, url = prometheus
    _scrape(server, instance)
    api_server = _karpenter_cluster()
    api_server.node["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"
    api_url = api_server.start()
    try:
        cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}
        runtime = _runtime(enforce=False, clusters=[{**cluster, "reclaim": "drain"}])
        aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
        aws.nodes = KubernetesNodes("us-east-1", aws.groups, api=lambda c: KubernetesApi(api_url, lambda: "t"))
        from governor.idle.handler import handle

        assert handle(_event(T0, "sweep-1"), runtime, aws)["outcomes"] == {"warned": 1}
    finally:
        api_server.stop()
    warning = runtime.sink.findings[-1]  # type: ignore[attr-defined]
    slack = json.dumps(slack_messages([MergedFinding(warning)], {}))
    email = email_for([MergedFinding(warning)]).text
    for text in (slack, email):
        assert "it would be cordoned and drained (PodDisruptionBudgets respected)" in text, text
        assert "EKS cluster gpu-prod" in text and "would be terminated" not in text
    assert "would be drained and removed (EKS cluster gpu-prod) at" in warning.title
