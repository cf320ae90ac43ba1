"""``governor explain --metrics`` gives, for an EKS GPU node, the decision the real idle sweep records for it: the
sweep runs on moto with the node's GPUs read through its cluster source (the DCGM exporter's captured H100 MIG node
on a loopback Prometheus API; Container Insights on moto's CloudWatch), then the same data, exported as a platform
team would export it (a range-query JSON answer; the agent's performance log events), goes through explain. Verdict,
outcome, reasons, actions and the per-GPU / per-slice evidence must be the sweep's."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from governor.idle.kubernetes.promql import DCGM_FIELDS, gpu_query
from governor.idle.sources import metric_source
from governor_cli.main import main
from governor_cli.testing.dcgm import PrometheusServer
from tests.adapters.test_idle_sweep import T0, _aws, _event, _runtime
from tests.adapters.test_kubernetes_sweep import NODE, _node_group, _scrape

MIB = 1024 * 1024
PROM_CLUSTER = {"name": "gpu-prod", "metric_source": "prometheus", "node_label": "hostname"}
CI_CLUSTER = {"name": "gpu-prod", "metric_source": "container_insights"}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "container_insights"


def _swept(cluster: dict[str, Any]) -> tuple[Any, Any]:
    """The real sweep at T0 (enforcing, like ``_runtime``) and the policy file explain reads for the same policy."""
    from governor.idle.handler import handle

    runtime = _runtime(clusters=[cluster])
    aws = _aws(metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=runtime.policy.idle.clusters))  # type: ignore[arg-type]
    handle(_event(T0, "sweep-1"), runtime, aws)
    return runtime, runtime.policy


def _explained(tmp_path: Path, export: Path, cluster: dict[str, Any], instance: str, *extra: str) -> dict[str, Any]:
    policy = tmp_path / "governor.yaml"
    settings = {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, "clusters": [cluster]}
    policy.write_text(yaml.safe_dump({"idle": settings}))
    described = boto3.client("ec2", region_name="us-east-1").describe_instances(InstanceIds=[instance])
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(described, default=str))
    args = ["explain", "--metrics", str(export), "--policy", str(policy), "--instances", str(instances)]
    code = main([*args, "--at", T0.isoformat(), "--json", *extra])
    assert code == 0
    return {"args": args}


def _compare(capsys: pytest.CaptureFixture[str], runtime: Any, instance: str) -> dict[str, Any]:
    out = capsys.readouterr().out
    (result,) = json.loads(out)
    found = [d for _, d in runtime.ledger.decisions if d.resource == instance]
    judged = [d for d in found if d.rule == f"idle.{d.evidence.get('status')}"]
    swept = judged[0]  # the decision (the ledger then records its outcome with what was done)
    assert all(d.reasons == swept.reasons for d in judged)
    (explained,) = result["decisions"]
    assert explained["verdict"] == swept.verdict and result["status"] == swept.evidence["status"]
    assert explained["reasons"] == swept.reasons
    assert [a["type"] for a in explained["actions"]] == [a.type for a in swept.actions]
    assert set(result["evidence"].get("devices", {})) == set(swept.evidence.get("devices", {}))
    assert any(a.startswith("assumed: no idle mark") for a in explained["assumptions"])
    return result


def _prometheus_export(server: PrometheusServer, path: Path) -> Path:
    """What a team saves from AMP: one ``query_range`` answer per DCGM field, and kube-state-metrics' node info."""
    times = [(T0 - dt.timedelta(minutes=m)).timestamp() for m in range(180, -1, -1)]
    export: dict[str, Any] = {}
    for signal, (field, _) in DCGM_FIELDS.items():
        result = server.evaluate(gpu_query(signal, "hostname"), times)
        if result:
            export[field] = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    node_info = server.evaluate("max by (node, provider_id) (kube_node_info{})", times)
    export["kube_node_info"] = {"status": "success", "data": {"resultType": "matrix", "result": node_info}}
    path.write_text(json.dumps(export))
    return path


@pytest.mark.parametrize(
    ("busy", "status"),
    [({}, "warned"), ({"4": 71.0}, "busy"), ({"0/mig13": -1.0}, "unmonitored")],
    ids=["idle-warned", "one-busy-gpu", "mig-slice-without-data"],
)
@mock_aws
def test_explain_on_a_prometheus_export_gives_the_sweeps_decision_for_the_node(
    prometheus: tuple[PrometheusServer, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    busy: dict[str, float],
    status: str,
) -> None:
    server, url = prometheus
    instance = _node_group()
    _scrape(server, instance, busy={k: v for k, v in busy.items() if v >= 0})
    if any(v < 0 for v in busy.values()):  # the exporter publishes nothing for a slice whose reading is blank
        cutoff = (T0 - dt.timedelta(minutes=40)).timestamp()
        server.samples = [
            s
            for s in server.samples
            if not (s[1].startswith("DCGM_FI_") and s[2].get("GPU_I_ID") == "13" and s[0] > cutoff)
            or s[1] == "DCGM_FI_DEV_FB_USED"
        ]
    cluster = {**PROM_CLUSTER, "prometheus_url": url}
    runtime, _ = _swept(cluster)
    export = _prometheus_export(server, tmp_path / "amp-export.json")
    _explained(tmp_path, export, cluster, instance)
    result = _compare(capsys, runtime, instance)
    assert result["status"] == status
    if status == "unmonitored":
        assert any("GPU 0/mig13" in r and "missing data is never idle" in r for r in result["decisions"][0]["reasons"])
    if status == "warned":  # a proven node of a cluster that does not drain: warned that it will be reported
        assert result["decisions"][0]["actions"][1]["planned"] == "report"
        assert {"0/mig11", "0/mig13", "7"} <= set(result["evidence"]["devices"])

    main(["explain", "--metrics", str(export), "--node", NODE, "--policy", str(tmp_path / "governor.yaml")])
    text = capsys.readouterr().out
    assert f"{instance} ({NODE})" in text and "assumed: an On-Demand" in text  # no --instances: said, not hidden


def _performance_events(instance: str, busy_device: str | None) -> list[dict[str, Any]]:
    """The agent's ``NodeGPU`` / ``PodGPU`` EMF records for one p4d node's two GPUs, two hours a minute: the
    dimension sets and metric names are the agent's own declarations (tests/fixtures/container_insights)."""
    declared = {
        d["metric_name_selectors"][0]: d
        for d in yaml.safe_load((FIXTURES / "emf-gpu-metric-declarations.yaml").read_text())
    }
    values = {
        "ClusterName": "gpu-prod",
        "InstanceId": instance,
        "InstanceType": "p4d.24xlarge",
        "NodeName": NODE,
        "Namespace": "testing",
        "PodName": "ollama",
        "FullPodName": "ollama-76f687f4cd-xcvvp",
        "Service": "ollama",
    }
    events = []
    for minute in range(120, -60, -1):
        at = T0 - dt.timedelta(minutes=minute)
        for device in ("nvidia0", "nvidia1"):
            node = declared["node_gpu_utilization"]
            names = max(node["dimensions"], key=len)  # the per-GPU set
            record: dict[str, Any] = {n: device if n == "GpuDevice" else values[n] for n in names}
            record.update(
                {
                    "Type": "NodeGPU",
                    "Timestamp": str(int(at.timestamp() * 1000)),
                    "node_gpu_utilization": 55.0 if device == busy_device and minute < 20 else 0.0,
                    "node_gpu_memory_used": 14 * 1024 * MIB,
                    "node_gpu_power_draw": 61.0,
                    "_aws": {
                        "Timestamp": int(at.timestamp() * 1000),
                        "CloudWatchMetrics": [
                            {
                                "Namespace": "ContainerInsights",
                                "Dimensions": node["dimensions"],
                                "Metrics": [{"Name": n} for n in node["metric_name_selectors"]],
                            }
                        ],
                    },
                }
            )
            events.append({"timestamp": int(at.timestamp() * 1000), "message": json.dumps(record)})
        pod: dict[str, Any] = {
            n: values[n] for n in max(declared["pod_gpu_utilization"]["dimensions"], key=len) if n != "GpuDevice"
        }
        pod.update({"GpuDevice": "nvidia0", "Type": "PodGPU", "pod_gpu_utilization": 0.0})
        pod["Timestamp"] = str(int(at.timestamp() * 1000))
        events.append({"timestamp": int(at.timestamp() * 1000), "message": json.dumps(pod)})
    return events


def _publish(events: list[dict[str, Any]]) -> None:
    """What CloudWatch makes of the EMF records: one datapoint per declared metric and per-GPU dimension set."""
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    data = []
    for event in events:
        record = json.loads(event["message"])
        if record["Type"] != "NodeGPU":
            continue
        at = dt.datetime.fromtimestamp(int(record["Timestamp"]) / 1000, dt.UTC)
        names = max(record["_aws"]["CloudWatchMetrics"][0]["Dimensions"], key=len)
        dims = [{"Name": n, "Value": record[n]} for n in names]
        for metric in ("node_gpu_utilization", "node_gpu_memory_used", "node_gpu_power_draw"):
            data.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Value": record[metric]})
    for first in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="ContainerInsights", MetricData=data[first : first + 500])


@pytest.mark.parametrize(("busy_device", "status"), [(None, "warned"), ("nvidia1", "busy")])
@mock_aws
def test_explain_on_container_insights_performance_events_gives_the_sweeps_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], busy_device: str | None, status: str
) -> None:
    instance = _node_group()
    events = _performance_events(instance, busy_device)
    _publish([e for e in events if json.loads(e["message"])["Timestamp"] <= str(int(T0.timestamp() * 1000))])
    runtime, _ = _swept(CI_CLUSTER)
    export = tmp_path / "performance-events.json"
    export.write_text(json.dumps({"events": events, "searchedLogStreams": []}))
    _explained(tmp_path, export, CI_CLUSTER, instance)
    result = _compare(capsys, runtime, instance)
    assert result["status"] == status and {"nvidia0", "nvidia1"} == set(result["evidence"]["devices"])
    if status == "busy":
        assert any(
            r.startswith("GPU nvidia1: GPU utilisation reached 55.0%") for r in result["decisions"][0]["reasons"]
        )

    lines = tmp_path / "performance.jsonl"  # a Logs Insights export of @message, one EMF object a line
    lines.write_text("\n".join(e["message"] for e in events) + "\n")
    assert main(["explain", "--metrics", str(lines), "--node", instance, "--at", T0.isoformat(), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == status
