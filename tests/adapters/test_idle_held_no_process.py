"""GPUs held with no process on them (issue 49.6) through the real idle handler on moto: an instance whose GPU memory
stayed at the floor of a GPU no process has open, with no compute, for the window is warned as held for nothing,
with what it costs a day; a model loaded but quiet (an abandoned notebook) is warned as before."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
from moto import mock_aws

from governor.idle.handler import handle
from tests.adapters.test_idle_sweep import NOW, T0, _aws, _event, _launch, _runtime


def _agent(instance_id: str, util: float, memory_mb: float) -> None:
    """What the CloudWatch agent's nvidia_smi input publishes every minute (memory in MB, nvidia-smi's MiB)."""
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", memory_mb)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": NOW - dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(-60, 201)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])


@mock_aws
def test_gpus_held_with_no_process_are_warned_as_held_for_nothing_with_their_price() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    empty, loaded = _launch(ec2, "g5.xlarge", 2)
    _agent(empty, 0.0, 0.0)  # nothing on the GPU: nvidia-smi reads 0 MiB without a process
    _agent(loaded, 0.0, 12_288.0)  # a model loaded, nobody using it
    runtime = _runtime()
    assert handle(_event(T0, "sweep-1"), runtime, _aws())["outcomes"] == {"warned": 2}
    decided: dict[str, Any] = {d.resource: d for _, d in runtime.ledger.decisions}  # type: ignore[attr-defined]
    held = decided[empty].evidence.get("no_process") or {}
    assert (held.get("max_gpu_memory_used_mib"), held.get("floor_mib"), held.get("usd_per_day")) == (0.0, 32.0, 24.14)
    assert decided[empty].rule == "idle.warned"  # the same warning, digest and buttons
    assert any("nothing on the GPUs" in r for r in decided[empty].reasons)
    assert "no_process" not in decided[loaded].evidence
    titles = {f.resource: f.title for f in runtime.sink.findings}  # type: ignore[attr-defined]
    assert "held with no process on them (GPU memory 0 MiB, no compute), $24.14 a day" in titles[empty], titles
    assert "no process" not in titles[loaded] and "will be stopped at" in titles[loaded]
