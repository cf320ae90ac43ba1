"""Activity signals the team defines (``idle.activity_signals``, issue 49.6) through the real idle handler on moto:
a signal above its threshold keeps a machine the GPU metrics call idle, a signal without data leaves it unknown (never
idle), a signal never makes a busy machine idle, and a signal is tied to the instance its dimension names."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.idle.autoscaling import AutoScalingGroups
from governor.idle.domain import IDLE_SINCE_TAG
from governor.idle.handler import handle
from governor.idle.ports import Adapters
from governor.idle.sources import metric_source
from governor.policy import PolicyError, parse_policy
from governor.runtime import Runtime
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import CLOCK, NOW, T0, _event, _launch, _metrics, _tags

KERNEL = {
    "name": "notebook-kernel",
    "namespace": "Team/Jupyter",
    "metric": "KernelBusy",
    "dimensions": {"InstanceId": "{instance_id}", "Service": "jupyter"},
    "threshold": 0,
}


def _kernel(instance_id: str, value: float, minutes: int = 200) -> None:
    """What the team's notebook server publishes: 1 while a kernel runs a cell, else 0, every minute."""
    data = [
        {
            "MetricName": "KernelBusy",
            "Dimensions": [{"Name": "InstanceId", "Value": instance_id}, {"Name": "Service", "Value": "jupyter"}],
            "Timestamp": NOW - dt.timedelta(minutes=m),
            "Value": value,
        }
        for m in range(-60, minutes + 1)
    ]
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="Team/Jupyter", MetricData=data[start : start + 500])


def _runtime(**idle: Any) -> Runtime:
    settings = {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, **idle}
    try:
        policy = parse_policy({"idle": settings})
    except PolicyError as refused:
        raise AssertionError(f"the policy refuses a well-formed activity signal: {refused}") from None
    return Runtime(
        policy=policy,
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def _aws(runtime: Runtime) -> Adapters:
    """The handler's own wiring of the metric source: the policy's signals read with the GPU series."""
    return Adapters(
        Ec2Reader("us-east-1", wildcard_type_filter=False),
        Ec2Actions("us-east-1"),
        metric_source("cloudwatch_agent", "us-east-1", activity=runtime.policy.idle.activity_signals),
        SsmCommands("us-east-1"),
        AutoScalingGroups("us-east-1"),
        CLOCK,
    )


def _decisions(runtime: Runtime) -> dict[str, Any]:
    return {d.resource: d for _, d in runtime.ledger.decisions}  # type: ignore[attr-defined]


@pytest.fixture
def fleet() -> Any:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        kept, quiet, silent, busy = _launch(ec2, "g5.xlarge", 4)
        for instance in (kept, quiet, silent):
            _metrics(instance, 0.3)  # every GPU signal says idle
        _metrics(busy, 80.0)
        _kernel(kept, 1.0)  # a kernel runs a cell: the team's signal says busy
        _kernel(quiet, 0.0)  # the notebook server runs, no kernel busy
        _kernel(busy, 0.0)  # the signal reads quiet on a busy GPU
        yield ec2, {"kept": kept, "quiet": quiet, "silent": silent, "busy": busy}


def test_a_team_signal_keeps_a_machine_the_gpu_metrics_call_idle_and_missing_data_is_unknown(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(activity_signals=[KERNEL])
    first = handle(_event(T0, "sweep-1"), runtime, _aws(runtime))
    decided = _decisions(runtime)
    kept = decided[ids["kept"]]
    assert (kept.rule, kept.evidence["status"]) == ("idle.kept-by-signal", "busy")
    assert kept.evidence["kept_by_signal"] == ["notebook-kernel"]
    assert kept.evidence["activity_signals"]["notebook-kernel"]["max"] == 1.0
    assert "activity signal notebook-kernel (Team/Jupyter KernelBusy) read 1" in kept.reasons[0]
    assert IDLE_SINCE_TAG not in _tags(ec2, ids["kept"])
    # The signal is tied to the instance its dimension names: the quiet one is warned, not spared by the other's.
    assert decided[ids["quiet"]].evidence["status"] == "warned" and IDLE_SINCE_TAG in _tags(ec2, ids["quiet"])
    silent = decided[ids["silent"]]
    assert (silent.rule, silent.evidence["status"]) == ("idle.signal-unknown", "unmonitored")
    assert silent.evidence["activity_signals"]["notebook-kernel"]["samples"] == 0
    assert "unknown, and unknown is never idle" in silent.reasons[0]
    assert decided[ids["busy"]].evidence["status"] == "busy" and decided[ids["busy"]].rule == "idle.busy"
    assert first["outcomes"] == {"busy": 2, "warned": 1, "unmonitored": 1}
    warned = [f.resource for f in runtime.sink.findings if f.severity == "warning"]  # type: ignore[attr-defined]
    assert warned == [ids["quiet"]]


def test_a_signal_that_turns_busy_after_the_warning_withdraws_it_and_nothing_is_stopped(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(activity_signals=[KERNEL])
    handle(_event(T0, "sweep-1"), runtime, _aws(runtime))
    _kernel(ids["quiet"], 1.0, minutes=5)  # someone opens the notebook and runs a cell
    handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, _aws(runtime))
    decided = _decisions(runtime)[ids["quiet"]]
    assert decided.rule == "idle.resumed" and decided.evidence["kept_by_signal"] == ["notebook-kernel"]
    state = ec2.describe_instances(InstanceIds=[ids["quiet"]])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"


def test_a_signal_must_name_the_instance_it_judges() -> None:
    unbound = {**KERNEL, "dimensions": {"Service": "jupyter"}}
    with pytest.raises(PolicyError) as refused:
        parse_policy({"idle": {"activity_signals": [unbound]}})
    assert "idle.activity_signals.0" in str(refused.value) and "{instance_id}" in str(refused.value)


def test_a_promql_signal_keeps_only_the_node_of_its_cluster_it_names(aws_only: None, prometheus: Any) -> None:
    """A PromQL signal read from the cluster's Prometheus: its series naming the node (proven that cluster's, through
    kube_node_info and the API's providerID) keeps it; a series naming a node the cluster does not have is nobody's."""
    from tests.adapters.test_kubernetes_cpu_pods import Setup
    from tests.adapters.test_kubernetes_sources import NODE

    server, _ = prometheus
    signal = {"name": "kernel", "promql": 'kernel_busy{cluster="gpu-prod"}', "cluster": "gpu-prod", "threshold": 0}
    setup = Setup(prometheus, gpu_pod=True, activity_signals=[signal], cpu_utilization_threshold=None)
    try:
        for minute in range(-60, 200):
            at = (T0 - dt.timedelta(minutes=minute)).timestamp()
            server.add(at, "kernel_busy", {"cluster": "gpu-prod", "node": NODE}, 1.0)
            server.add(at, "kernel_busy", {"cluster": "gpu-prod", "node": "ip-10-9-9-9.ec2.internal"}, 1.0)
        assert setup.sweep(0, "sweep-1")["outcomes"] == {"busy": 1}
        decided = setup.decisions()[-1]
        assert decided.rule == "idle.kept-by-signal" and decided.evidence["kept_by_signal"] == ["kernel"]
        assert decided.evidence["activity_signals"]["kernel"]["source"] == "PromQL on gpu-prod"
    finally:
        setup.api.stop()


def test_a_promql_series_naming_another_node_spares_nothing(aws_only: None, prometheus: Any) -> None:
    from tests.adapters.test_kubernetes_cpu_pods import Setup

    server, _ = prometheus
    signal = {"name": "kernel", "promql": 'kernel_busy{cluster="gpu-prod"}', "cluster": "gpu-prod", "threshold": 0}
    setup = Setup(prometheus, gpu_pod=True, activity_signals=[signal], cpu_utilization_threshold=None)
    try:
        for minute in range(-60, 200):
            at = (T0 - dt.timedelta(minutes=minute)).timestamp()
            server.add(at, "kernel_busy", {"cluster": "gpu-prod", "node": "ip-10-9-9-9.ec2.internal"}, 1.0)
        assert setup.sweep(0, "sweep-1")["outcomes"] == {"unmonitored": 1}  # its own signal has no data: unknown
        assert setup.decisions()[-1].rule == "idle.signal-unknown"
    finally:
        setup.api.stop()


def test_a_promql_signal_names_a_prometheus_cluster_of_the_policy() -> None:
    signal = {"name": "kernel", "promql": "kernel_busy", "cluster": "nowhere", "threshold": 0}
    with pytest.raises(PolicyError) as refused:
        parse_policy({"idle": {"activity_signals": [signal]}})
    assert "activity_signals.0.cluster" in str(refused.value)


@pytest.fixture
def aws_only() -> Any:
    with mock_aws():
        yield
