"""EKS GPU nodes' metric sources against their real formats: the DCGM exporter's own captured H100 MIG node
(tests/fixtures/dcgm_exporter, Apache-2.0, with provenance) served by a Prometheus-compatible API on the loopback
interface (also under an AMP workspace path, SigV4 for ``aps`` required), and Container Insights' published schema
on moto; each read through the real source and judged by the idle rule."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from governor.domain.fleet import Instance
from governor.idle.assessment import assess_signals
from governor.idle.domain import (
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_PODS,
    GPU_POWER,
    GPU_UTILIZATION,
    NETWORK_BYTES,
    fetched_signals,
)
from governor.idle.kubernetes.container_insights import ContainerInsightsMetrics
from governor.idle.kubernetes.prometheus import PrometheusError, PrometheusMetrics
from governor.idle.kubernetes.promql import attribute, gpu_query
from governor.idle.provenance import vouch
from governor.idle.sources import CombinedMetrics, metric_source
from governor.policy import parse_policy
from governor_cli.testing.dcgm import (
    FIXTURES,
    Capture,
    PrometheusServer,
    captured,
    exposition,
    load_capture,
    parse_exposition,
)

NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
POLICY = parse_policy({"idle": {"launch_grace_minutes": 0}})
NODE = "ip-10-0-1-5.ec2.internal"
INSTANCE = "i-0123456789abcdef0"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def capture() -> Capture:
    return load_capture()


def node_record(instance: str, tags: dict[str, str] | None = None) -> Instance:
    """An instance as DescribeInstances returns it; by default a node its Auto Scaling group launched in gpu-prod."""
    if tags is None:
        tags = {"eks:cluster-name": "gpu-prod", "aws:autoscaling:groupName": "eks-gpu-nodes"}
    return Instance(instance, "p5.48xlarge", "running", NOW - dt.timedelta(days=1), tags)


def idle_values(capture: Capture, busy: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """The capture's own memory readings; utilisation 0 and engine activity 0 on every device (not in the
    capture), except ``busy`` devices."""
    keys = [d.key for d in capture.devices]
    util = {k: (busy or {}).get(k, 0.0) for k in keys}
    return {
        "DCGM_FI_DEV_FB_USED": captured(capture, "DCGM_FI_DEV_FB_USED"),
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": {k: v / 100 for k, v in util.items()},
    }


def scrape_node(
    server: PrometheusServer, capture: Capture, minutes: int = 150, busy: dict[str, float] | None = None, **kw: object
) -> None:
    for minute in range(minutes):
        at = (NOW - dt.timedelta(minutes=minute)).timestamp()
        text = exposition(capture, NODE, idle_values(capture, busy), **kw)  # type: ignore[arg-type]
        server.scrape(at, text, {"job": "dcgm-exporter", "cluster": "gpu-prod"})
        server.add(
            at,
            "kube_node_info",
            {"node": NODE, "provider_id": f"aws:///us-east-1a/{INSTANCE}", "cluster": "gpu-prod"},
            1,
        )


def test_the_capture_renders_as_the_exporter_labels_it(capture: Capture) -> None:
    """Label names and values the exporter writes, read back by the Prometheus project's parser; the pod mapper's
    attribution lands on GPU 0's MIG slices only; the README's verbatim /metrics lines parse too."""
    samples = parse_exposition(
        exposition(capture, NODE, {"DCGM_FI_DEV_FB_USED": captured(capture, "DCGM_FI_DEV_FB_USED")})
    )
    assert len(samples) == 9  # 7 whole GPUs + GPU 0's two 1g.10gb MIG instances
    mig = [labels for _, labels, _ in samples if labels.get("GPU_I_ID")]
    assert {m["GPU_I_ID"] for m in mig} == {"11", "13"} and {m["GPU_I_PROFILE"] for m in mig} == {"1g.10gb"}
    assert all(m["pod"] == "ollama-76f687f4cd-xcvvp" and m["namespace"] == "testing" for m in mig)
    whole = [labels for _, labels, _ in samples if not labels.get("GPU_I_ID")]
    assert all("pod" not in w and w["modelName"] == "NVIDIA H100 80GB HBM3" for w in whole)
    readme = parse_exposition((FIXTURES / "readme-kubernetes.prom").read_text())
    assert readme[0][1] == {
        "gpu": "0",
        "UUID": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
        "container": "",
        "namespace": "",
        "pod": "",
    }


def test_an_idle_dcgm_node_is_idle_per_gpu_and_mig_slice(
    prometheus: tuple[PrometheusServer, str], capture: Capture
) -> None:
    server, url = prometheus
    scrape_node(server, capture)
    source = PrometheusMetrics(url, node_label="hostname", selector='cluster="gpu-prod"')
    signals = source.fetch(
        [INSTANCE, "i-0fffffffffffffff0"], fetched_signals(POLICY.idle), NOW - dt.timedelta(hours=3), NOW
    )
    assert set(signals) == {INSTANCE}  # the other instance is not a node of this cluster: left to another source
    devices = {key.partition("@")[2] for key in signals[INSTANCE] if key != GPU_PODS}  # GPU_PODS: no device's
    assert devices == {"0/mig11", "0/mig13", "1", "2", "3", "4", "5", "6", "7"}
    assert set(signals[INSTANCE][GPU_PODS].values) == {2.0}  # the capture's pod holds GPU 0's two MIG slices
    assert signals[INSTANCE][f"{GPU_MEMORY_USED}@0/mig11"].values[-1] == 14.0  # MiB, the capture's own reading
    assert signals[INSTANCE][f"{GPU_ENGINE_ACTIVE}@3"].values[-1] == 0.0  # ratio 0 -> percent 0
    verdict = assess_signals(INSTANCE, signals[INSTANCE], POLICY.idle, NOW)
    assert verdict.status == "idle", verdict.reasons
    # The PromQL is the one written in promql.py, filtered by the cluster's selector.
    sent = {params.get("query") for _, params, _ in server.requests}
    assert gpu_query(GPU_UTILIZATION, "hostname", 'cluster="gpu-prod"') in sent


def test_one_busy_gpu_keeps_the_node(prometheus: tuple[PrometheusServer, str], capture: Capture) -> None:
    server, url = prometheus
    scrape_node(server, capture, busy={"5": 63.0})
    signals = PrometheusMetrics(url, node_label="hostname").fetch(
        [INSTANCE], fetched_signals(POLICY.idle), NOW - dt.timedelta(hours=3), NOW
    )
    assert assess_signals(INSTANCE, signals[INSTANCE], POLICY.idle, NOW).status == "busy"


def test_a_mig_slice_without_readings_is_never_idle(prometheus: tuple[PrometheusServer, str], capture: Capture) -> None:
    """The exporter publishes nothing for a blank reading: a slice whose activity stops is missing data."""
    server, url = prometheus
    scrape_node(server, capture)
    server.samples = [
        s
        for s in server.samples
        if not (
            s[1] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
            and s[2].get("GPU_I_ID") == "13"
            and s[0] > (NOW - dt.timedelta(minutes=40)).timestamp()
        )
    ]
    server.samples = [
        s
        for s in server.samples
        if not (
            s[1] == "DCGM_FI_DEV_GPU_UTIL"
            and s[2].get("GPU_I_ID") == "13"
            and s[0] > (NOW - dt.timedelta(minutes=40)).timestamp()
        )
    ]
    signals = PrometheusMetrics(url, node_label="hostname").fetch(
        [INSTANCE], fetched_signals(POLICY.idle), NOW - dt.timedelta(hours=3), NOW
    )
    assert assess_signals(INSTANCE, signals[INSTANCE], POLICY.idle, NOW).status == "unmonitored"


def test_gpu_hours_by_namespace_show_the_allocated_but_idle_pod(
    prometheus: tuple[PrometheusServer, str], capture: Capture
) -> None:
    server, url = prometheus
    scrape_node(server, capture, minutes=120)
    source = PrometheusMetrics(url, node_label="hostname")
    source.fetch([INSTANCE], fetched_signals(POLICY.idle), NOW - dt.timedelta(hours=2), NOW)
    rows = {
        r.namespace: r for r in attribute(source.readings, POLICY.idle.gpu_utilization_threshold, {"testing": "ml"})
    }
    held = rows["testing"]
    assert held.team == "ml" and held.pods == ("testing/ollama-76f687f4cd-xcvvp",)
    assert held.gpu_hours == pytest.approx(2 * 2.0, abs=0.05)  # two MIG slices for two hours
    assert held.allocated_but_idle
    assert rows[None].gpu_hours == pytest.approx(7 * 2.0, abs=0.1) and not rows[None].allocated_but_idle


def test_amazon_managed_prometheus_requests_are_sigv4_signed_for_aps(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    server = PrometheusServer(require_sigv4=True)
    base = server.start()
    try:
        scrape_node(server, capture, minutes=130)
        from botocore.credentials import Credentials

        workspace = f"{base}/workspaces/ws-1234abcd"
        unsigned = PrometheusMetrics(workspace, node_label="hostname")
        with pytest.raises(PrometheusError, match="HTTP 403"):
            unsigned.fetch([INSTANCE], [GPU_UTILIZATION], NOW - dt.timedelta(hours=2), NOW)
        signed = PrometheusMetrics(
            workspace, node_label="hostname", sign="us-east-1", credentials=lambda: Credentials("AKIDEXAMPLE", "secret")
        )
        signals = signed.fetch([INSTANCE], [GPU_UTILIZATION], NOW - dt.timedelta(hours=2), NOW)
        assert f"{GPU_UTILIZATION}@7" in signals[INSTANCE]
        paths = {path for path, _, _ in server.requests}
        assert "/workspaces/ws-1234abcd/api/v1/query_range" in paths
        auth = server.requests[-1][2]["Authorization"]
        assert "/us-east-1/aps/aws4_request" in auth and "SignedHeaders=" in auth
    finally:
        server.stop()


def test_an_amp_url_is_signed_in_its_region() -> None:
    from governor.idle.kubernetes.prometheus import amp_region

    assert amp_region("https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1") == "eu-west-1"
    assert amp_region("http://prometheus.monitoring:9090") is None


def test_one_sweep_combines_the_agent_and_the_cluster(
    prometheus: tuple[PrometheusServer, str], capture: Capture
) -> None:
    """The EKS node is judged from DCGM, the plain instance from the CloudWatch agent, in one fetch."""
    server, url = prometheus
    scrape_node(server, capture, minutes=130)

    class Agent:
        asked: list[list[str]] = []

        def fetch(self, ids, signals, start, end):  # type: ignore[no-untyped-def]
            self.asked.append(list(ids))
            from governor.idle.domain import Series

            return {i: {GPU_UTILIZATION: Series([NOW.timestamp() - 60], [50.0])} for i in ids}

    agent = Agent()
    combined = CombinedMetrics(agent, {"gpu-prod": PrometheusMetrics(url, node_label="hostname")})  # type: ignore[arg-type]
    other = "i-0aaaaaaaaaaaaaaa0"
    combined.know([node_record(INSTANCE), node_record(other, {})])  # the sweep's own EC2 read
    found = combined.fetch([INSTANCE, other], [GPU_UTILIZATION, NETWORK_BYTES], NOW - dt.timedelta(hours=2), NOW)
    assert combined.judged_by == {INSTANCE: "gpu-prod"}
    assert f"{GPU_UTILIZATION}@0/mig11" in found[INSTANCE] and GPU_UTILIZATION in found[other]
    assert agent.asked == [[INSTANCE, other]]  # one read of every instance: the node's network still from EC2
    # The agent on the node speaks too, under its own device: busy from either wins.
    assert f"{GPU_UTILIZATION}@cloudwatch_agent" in found[INSTANCE]


def test_a_cluster_endpoint_that_is_down_leaves_its_nodes_unjudged(prometheus: tuple[PrometheusServer, str]) -> None:
    server, url = prometheus
    server.fail_with = 503

    class Agent:
        def fetch(self, ids, signals, start, end):  # type: ignore[no-untyped-def]
            return {i: {} for i in ids}

    combined = CombinedMetrics(Agent(), {"gpu-prod": PrometheusMetrics(url)})  # type: ignore[arg-type]
    found = combined.fetch([INSTANCE], [GPU_UTILIZATION], NOW - dt.timedelta(hours=2), NOW)
    assert "HTTP 503" in combined.failures["gpu-prod"] and found == {INSTANCE: {}}
    assert assess_signals(INSTANCE, found[INSTANCE], POLICY.idle, NOW).status == "unmonitored"


def test_the_policy_builds_the_combined_source() -> None:
    policy = parse_policy(
        {
            "idle": {
                "clusters": [
                    {
                        "name": "a",
                        "metric_source": "prometheus",
                        "prometheus_url": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
                    },
                    {"name": "b", "metric_source": "container_insights"},
                ]
            }
        }
    )
    source = metric_source("cloudwatch_agent", "us-east-1", object(), "MB", policy.idle.clusters)
    assert isinstance(source, CombinedMetrics) and set(source.clusters) == {"a", "b"}


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"name": "a", "metric_source": "prometheus"}, "idle.clusters.0: prometheus_url is required"),
        (
            {"name": "a", "metric_source": "prometheus", "prometheus_url": "ftp://x"},
            "idle.clusters.0: prometheus_url must",
        ),
        (
            {
                "name": "a",
                "metric_source": "prometheus",
                "prometheus_url": "http://p:9090",
                "selector": "}) or vector(1",
            },
            "idle.clusters.0: selector must be PromQL label matchers",
        ),
        ({"name": "a", "metric_source": "dcgm"}, "idle.clusters.0.metric_source"),
    ],
)
def test_a_bad_cluster_names_its_field(cluster: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(")):
        parse_policy({"idle": {"clusters": [cluster]}})


@mock_aws
def test_container_insights_read_by_its_published_schema() -> None:
    """ContainerInsights namespace; node_gpu_utilization (%), node_gpu_memory_used (bytes), node_gpu_power_draw (W);
    per GPU with dimensions ClusterName, InstanceId, NodeName, GpuDevice (AWS's enhanced-observability metric table)."""
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    data = []
    for minute in range(130):
        at = NOW - dt.timedelta(minutes=minute)
        for device in ("nvidia0", "nvidia1"):
            dims = [
                {"Name": "ClusterName", "Value": "gpu-prod"},
                {"Name": "InstanceId", "Value": INSTANCE},
                {"Name": "NodeName", "Value": NODE},
                {"Name": "GpuDevice", "Value": device},
            ]
            busy = device == "nvidia1" and minute < 30
            data += [
                {
                    "MetricName": "node_gpu_utilization",
                    "Dimensions": dims,
                    "Timestamp": at,
                    "Value": 70.0 if busy else 0.0,
                },
                {"MetricName": "node_gpu_memory_used", "Dimensions": dims, "Timestamp": at, "Value": 14 * MIB},
                {"MetricName": "node_gpu_power_draw", "Dimensions": dims, "Timestamp": at, "Value": 60.0},
            ]
    for first in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="ContainerInsights", MetricData=data[first : first + 500])
    source = ContainerInsightsMetrics("gpu-prod", "us-east-1", cloudwatch)
    signals = source.fetch([INSTANCE], fetched_signals(POLICY.idle), NOW - dt.timedelta(hours=3), NOW)[INSTANCE]
    assert signals[f"{GPU_MEMORY_USED}@nvidia0"].values[-1] == 14.0  # bytes -> MiB
    assert signals[f"{GPU_POWER}@nvidia1"].values[0] == 60.0
    assert source.nodes == {INSTANCE: NODE}
    assert assess_signals(INSTANCE, signals, POLICY.idle, NOW).status == "busy"  # nvidia1 worked half an hour ago
    assert (
        ContainerInsightsMetrics("other", "us-east-1", cloudwatch).fetch(
            [INSTANCE], [GPU_UTILIZATION], NOW - dt.timedelta(hours=1), NOW
        )
        == {}
    )


@mock_aws
def test_container_insights_attributes_gpu_hours_to_namespaces() -> None:
    """``pod_gpu_utilization`` is published with exactly the dimension sets the CloudWatch agent declares (read from
    its own configuration, tests/fixtures/container_insights), every rollup included: the source counts each pod's
    GPU once (at ``ClusterName, FullPodName, GpuDevice, Namespace, PodName``), names the allocated-but-idle pod and
    leaves the node's other GPU to nobody; the sweep records it as the ledger's ``idle.gpu-hours``."""
    import yaml

    from governor.idle.sources import attribution

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "container_insights"
    declared = {
        d["metric_name_selectors"][0]: d["dimensions"]
        for d in yaml.safe_load((fixtures / "emf-gpu-metric-declarations.yaml").read_text())
    }
    values = {
        "ClusterName": "gpu-prod",
        "InstanceId": INSTANCE,
        "InstanceType": "p4d.24xlarge",
        "NodeName": NODE,
        "Namespace": "testing",
        "Service": "ollama",
        "PodName": "ollama",
        "FullPodName": "ollama-76f687f4cd-xcvvp",
    }
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    data = []
    for minute in range(1, 31):
        at = NOW - dt.timedelta(minutes=minute)
        for device, metric in (("nvidia0", "pod_gpu_utilization"), ("nvidia0", "node_gpu_utilization")):
            for names in declared[metric]:  # EMF publishes the point once per declared dimension set
                dims = [{"Name": n, "Value": device if n == "GpuDevice" else values[n]} for n in names]
                data.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Value": 0.0})
        names = declared["node_gpu_utilization"][-1]  # the node's other GPU, which no pod holds
        dims = [{"Name": n, "Value": "nvidia1" if n == "GpuDevice" else values[n]} for n in names]
        data.append({"MetricName": "node_gpu_utilization", "Dimensions": dims, "Timestamp": at, "Value": 0.0})
    for first in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="ContainerInsights", MetricData=data[first : first + 500])

    policy = parse_policy(
        {
            "idle": {
                "clusters": [
                    {
                        "name": "gpu-prod",
                        "metric_source": "container_insights",
                        "namespace_teams": {"testing": "research"},
                    }
                ]
            }
        }
    )
    source = metric_source("cloudwatch_agent", "us-east-1", cloudwatch, clusters=policy.idle.clusters)
    vouch(source, [node_record(INSTANCE)])  # the sweep's own EC2 read: the instance is a node of gpu-prod
    start, end = NOW - dt.timedelta(minutes=30), NOW
    assert f"{GPU_UTILIZATION}@nvidia1" in source.fetch([INSTANCE], [GPU_UTILIZATION], start, end)[INSTANCE]
    (record,) = attribution(source, policy.idle, start, end)
    rows = {row["namespace"]: row for row in record.evidence["namespaces"]}
    assert rows["testing"]["gpu_hours"] == pytest.approx(0.5, abs=0.02)  # one GPU, half an hour, counted once
    assert rows["testing"]["allocated_but_idle"] and rows["testing"]["team"] == "research"
    assert rows["testing"]["pods"] == ["testing/ollama-76f687f4cd-xcvvp"]
    assert rows[None]["gpu_hours"] == pytest.approx(0.5, abs=0.02)  # nvidia1: no pod held it
    assert record.rule == "idle.gpu-hours" and record.resource == "eks:gpu-prod" and record.severity == "warning"
