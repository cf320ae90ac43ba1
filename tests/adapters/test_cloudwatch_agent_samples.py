"""The CloudWatch agent's own nvidia-smi samples (tests/fixtures/cloudwatch_agent, MIT, with provenance), published
as the agent publishes them, read back through the real metric reader on moto and judged by the idle rule."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from governor.domain.fleet import Instance
from governor.idle.assessment import assess, power_limit
from governor.idle.domain import GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION, fetched_signals
from governor.idle.metrics import CloudWatchMetrics
from governor.idle.power import MEASURED
from governor.policy import parse_policy
from governor_cli.testing.nvidia_smi import metric_data, parse

SAMPLES = Path(__file__).parents[1] / "fixtures" / "cloudwatch_agent" / "nvidia_smi"
NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
POLICY = parse_policy({"idle": {"launch_grace_minutes": 0}})


def test_the_parser_reads_what_the_agents_own_test_expects() -> None:
    """The values the agent's nvidia_smi_test.go expects for these files (N/A fields absent)."""
    a10g = parse(SAMPLES / "a10g.xml")[0]
    assert (a10g.name, a10g.arch, a10g.index) == ("NVIDIA A10G", None, 0)
    assert a10g.fields == {
        "utilization_gpu": 0,
        "memory_used": 22,
        "memory_total": 23028,
        "temperature_gpu": 17,
        "power_draw": 25.58,
    }
    t4 = parse(SAMPLES / "tesla-t4.xml")[0]
    assert t4.fields["memory_used"] == 1032 and t4.fields["power_draw"] == 26.78 and t4.fields["utilization_gpu"] == 0
    a100 = parse(SAMPLES / "a100-sxm4-v12.xml")[0]
    assert a100.arch == "Ampere" and "utilization_gpu" not in a100.fields  # MIG mode: gpu_util N/A
    assert a100.fields["memory_used"] == 50 and a100.fields["power_draw"] == 67.03
    assert a100.mig_memory_used == [12, 12, 12, 12]


def test_the_measured_idle_draws_are_the_samples_own() -> None:
    """governor.idle.power.MEASURED is read from these files, not typed from memory."""
    for file, model in (
        ("a10g.xml", "NVIDIA A10G"),
        ("tesla-t4.xml", "Tesla T4"),
        ("a100-sxm4-v12.xml", "NVIDIA A100-SXM4-80GB"),
    ):
        reading = parse(SAMPLES / file)[0]
        assert reading.name == model and MEASURED[model].idle_watts == reading.fields["power_draw"]
        assert file in MEASURED[model].source


def _publish(cloudwatch: object, file: str, instance_id: str, minutes: int = 150) -> None:
    readings = parse(SAMPLES / file)
    data = [d for m in range(minutes) for d in metric_data(readings, instance_id, NOW - dt.timedelta(minutes=m))]
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])  # type: ignore[attr-defined]


@mock_aws
@pytest.mark.parametrize(
    ("file", "instance_type", "status"),
    [
        ("a10g.xml", "g5.xlarge", "idle"),
        ("tesla-t4.xml", "g4dn.xlarge", "idle"),
        ("a100-sxm4-v12.xml", "p4de.24xlarge", "unmonitored"),
    ],
)
def test_each_sample_is_read_back_through_the_metric_reader_and_judged(
    file: str, instance_type: str, status: str
) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    _publish(cloudwatch, file, "i-0sample")
    signals = CloudWatchMetrics("us-east-1").fetch(
        ["i-0sample"], fetched_signals(POLICY.idle), NOW - dt.timedelta(minutes=135), NOW + dt.timedelta(minutes=1)
    )["i-0sample"]
    instance = Instance(id="i-0sample", type=instance_type, state="running", launch_time=NOW - dt.timedelta(days=1))
    assessment = assess(instance, signals, POLICY, NOW + dt.timedelta(minutes=1))
    assert assessment.status == status
    if status == "idle":
        reading = parse(SAMPLES / file)[0]
        assert signals[GPU_POWER].values[-1] == reading.fields["power_draw"]
        assert signals[GPU_MEMORY_USED].values[-1] == reading.fields["memory_used"]  # MB as published = MiB
        assert assessment.evidence["max_gpu_power_w"] <= assessment.evidence["idle_power_ceiling_w"]
    else:
        # the A100 in MIG mode publishes no utilisation (N/A): never idle, and the reason says what is missing
        assert not signals[GPU_UTILIZATION].times
        assert "gpu_utilization: 0 of 120 expected samples" in assessment.reasons[0]


@mock_aws
def test_the_per_gpu_series_carry_the_agents_dimensions() -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    _publish(cloudwatch, "a100-sxm4-v12.xml", "i-0mig", minutes=1)
    metrics = cloudwatch.list_metrics(Namespace="CWAgent", MetricName="nvidia_smi_power_draw")["Metrics"]
    dimension_sets = sorted(sorted(d["Name"] for d in m["Dimensions"]) for m in metrics)
    assert dimension_sets == [["InstanceId"], ["InstanceId", "arch", "host", "index", "name"]]


def test_a_model_without_a_measured_idle_draw_is_not_judged_on_power() -> None:
    limit = power_limit("p5.48xlarge", POLICY.idle)
    assert limit.ceiling is None and "NVIDIA H100" in limit.note and "idle.gpu_power" in limit.note
    own = parse_policy({"idle": {"gpu_power": {"NVIDIA H100 80GB HBM3": {"idle_watts": 70, "limit_watts": 700}}}})
    assert power_limit("p5.48xlarge", own.idle).ceiling == 70 + 0.2 * 630


SHIPPED_AGENT = json.loads((Path(__file__).parents[2] / "infra" / "cloudwatch-agent-gpu.json").read_text())


@mock_aws
@pytest.mark.parametrize(("file", "instance_type", "status"), [("a10g.xml", "g5.xlarge", "idle")])
def test_the_shipped_agent_publishes_only_what_is_read_and_the_sweep_judges_as_before(
    file: str, instance_type: str, status: str
) -> None:
    """Issue 50.2: the shipped configuration publishes each field once per instance (InstanceId, the series the sweep
    and the dashboard read), never once per GPU, and the sweep's decision is unchanged."""
    from governor.idle.metrics import METRICS
    from infra.constructs.dashboard import GPU_METRICS

    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    readings = parse(SAMPLES / file)
    eight = [replace(readings[0], index=n) for n in range(8)]  # an 8-GPU instance of the same model
    data = [
        d
        for m in range(150)
        for d in metric_data(eight, "i-0lean", NOW - dt.timedelta(minutes=m), config=SHIPPED_AGENT)
    ]
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])
    metrics = cloudwatch.list_metrics(Namespace="CWAgent")["Metrics"]
    assert {tuple(d["Name"] for d in m["Dimensions"]) for m in metrics} == {("InstanceId",)}
    published = {m["MetricName"] for m in metrics}
    read = {name for specs in METRICS.values() for namespace, name, _ in specs if namespace == "CWAgent"}
    assert published == read | {metric for metric, _, _ in GPU_METRICS}
    from governor.footprint.agent import metrics_per_instance

    assert len(metrics) == metrics_per_instance(SHIPPED_AGENT, 8) == 4  # not 5 fields x (8 GPUs + 1) = 45
    signals = CloudWatchMetrics("us-east-1").fetch(
        ["i-0lean"], fetched_signals(POLICY.idle), NOW - dt.timedelta(minutes=135), NOW + dt.timedelta(minutes=1)
    )["i-0lean"]
    instance = Instance(id="i-0lean", type=instance_type, state="running", launch_time=NOW - dt.timedelta(days=1))
    assert assess(instance, signals, POLICY, NOW + dt.timedelta(minutes=1)).status == status
