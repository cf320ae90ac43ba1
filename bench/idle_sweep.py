"""Idle sweep cost: CloudWatch and EC2 API calls and wall time per sweep for 100, 1,000 and 10,000 GPU instances.

Run: ``.venv/bin/python -m bench.idle_sweep [--sizes 100 1000 10000] [--moto]``

The real handler (``governor.idle.sweep_run.run_sweep``) and the real adapters run in-process against in-memory
EC2 and CloudWatch clients that enforce the AWS limits the adapters must respect: DescribeInstances pages of at most
1,000 instances, GetMetricData at most 500 queries and 100,800 datapoints per call with ``NextToken`` beyond that.
Metrics come from the synthetic workload generator. Two sweeps run, enforcing, 30 minutes apart: the first warns
(tags) idle instances, the second acts within the rate limit and defers the rest. Wall time excludes network latency.

``--moto`` adds a run of 100 instances on moto (in-process AWS emulator) for EC2 and CloudWatch; moto's
GetMetricData scans every stored datapoint per query, so larger fleets are impractical there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.events.envelopes import GovernorEvent
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, required_signals
from governor.idle.metrics import MAX_DATAPOINTS, MAX_QUERIES, CloudWatchMetrics
from governor.idle.ports import Adapters
from governor.idle.sweep_run import run_sweep
from governor.observability import logger
from governor.policy import Policy, parse_policy
from governor.runtime import Runtime
from governor_cli.sim.workload import Workload, generate
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

AGENT_METRICS = {"nvidia_smi_utilization_gpu": GPU_UTILIZATION, "nvidia_smi_memory_used": GPU_MEMORY_USED}


class FakeEc2:
    """DescribeInstances (paginated, 1,000 a page), Stop/Terminate and tag writes over a dict of instances."""

    def __init__(self, workload: Workload) -> None:
        launched = workload.start - dt.timedelta(days=1)
        self.instances: dict[str, dict[str, Any]] = {
            i.id: {
                "InstanceId": i.id,
                "InstanceType": i.instance_type,
                "State": {"Name": "running"},
                "LaunchTime": launched,
                "RootDeviceType": "ebs",
                "Tags": [{"Key": "owner", "Value": f"user{n % 40}@example.com"}],
            }
            for n, i in enumerate(workload.instances)
        }
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def get_paginator(self, name: str) -> FakeEc2:
        assert name == "describe_instances"
        return self

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        wanted = kwargs.get("InstanceIds")
        states = next((f["Values"] for f in kwargs.get("Filters", []) if f["Name"] == "instance-state-name"), None)
        rows = [self.instances[i] for i in wanted if i in self.instances] if wanted else list(self.instances.values())
        rows = [r for r in rows if states is None or r["State"]["Name"] in states]
        size = min(1000, kwargs.get("PaginationConfig", {}).get("PageSize") or 1000)
        for start in range(0, max(len(rows), 1), size):
            self._count("DescribeInstances")
            yield {"Reservations": [{"Instances": rows[start : start + size]}]}

    def stop_instances(self, InstanceIds: list[str]) -> None:
        self._count("StopInstances")
        for i in InstanceIds:
            self.instances[i]["State"] = {"Name": "stopped"}

    def terminate_instances(self, InstanceIds: list[str]) -> None:
        self._count("TerminateInstances")
        for i in InstanceIds:
            self.instances[i]["State"] = {"Name": "terminated"}

    def create_tags(self, Resources: list[str], Tags: list[dict[str, str]]) -> None:
        self._count("CreateTags")
        for i in Resources:
            keep = [t for t in self.instances[i]["Tags"] if t["Key"] not in {n["Key"] for n in Tags}]
            self.instances[i]["Tags"] = keep + Tags

    def delete_tags(self, Resources: list[str], Tags: list[dict[str, str]]) -> None:
        self._count("DeleteTags")
        for i in Resources:
            self.instances[i]["Tags"] = [
                t for t in self.instances[i]["Tags"] if t["Key"] not in {n["Key"] for n in Tags}
            ]


class FakeCloudWatch:
    """GetMetricData over the workload's series, enforcing 500 queries and 100,800 datapoints per call."""

    def __init__(self, workload: Workload) -> None:
        self.series = workload.signals()
        self.calls = 0

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        queries = kwargs["MetricDataQueries"]
        assert len(queries) <= MAX_QUERIES, f"{len(queries)} queries in one call"
        start, end = kwargs["StartTime"].timestamp(), kwargs["EndTime"].timestamp()
        first = int(kwargs.get("NextToken") or 0)
        results: list[dict[str, Any]] = []
        points = 0
        for index in range(first, len(queries)):
            stat = queries[index]["MetricStat"]
            instance_id = stat["Metric"]["Dimensions"][0]["Value"]
            signal = AGENT_METRICS.get(stat["Metric"]["MetricName"])
            series = self.series.get(instance_id, {}).get(signal or "")
            times: list[float] = []
            values: list[float] = []
            if series is not None:
                low, high = bisect_left(series.times, start), bisect_left(series.times, end)
                times, values = list(series.times[low:high]), list(series.values[low:high])
            if points + len(times) > MAX_DATAPOINTS:
                return {"MetricDataResults": results, "NextToken": str(index)}
            points += len(times)
            stamps = [dt.datetime.fromtimestamp(t, dt.UTC) for t in times]
            results.append({"Id": queries[index]["Id"], "Timestamps": stamps, "Values": values})
        return {"MetricDataResults": results}


def _event(at: dt.datetime, event_id: str) -> GovernorEvent:
    return GovernorEvent.model_validate(events.scheduled(event_id=event_id, time=at))


def _policy() -> Policy:
    return parse_policy({"idle": {"enforce": True}})


def run_fake(size: int) -> list[str]:
    workload = generate(size, hours=3, seed=11)
    ec2 = FakeEc2(workload)
    cloudwatch = FakeCloudWatch(workload)
    policy = _policy()
    runtime = Runtime(policy, MemoryLedger(), MemorySink(), MemoryDeadLetters(), region="us-east-1")
    first = workload.start + dt.timedelta(minutes=150)
    clock = [first]  # the scheduler delivers each sweep on time: the function's clock reads the event's time
    aws = Adapters(
        Ec2Reader(ec2=ec2),
        Ec2Actions(ec2=ec2),
        CloudWatchMetrics(cloudwatch=cloudwatch),
        SsmCommands(ssm=object()),
        clock=lambda: clock[0],
    )
    lines = []
    for n, at in enumerate((first, first + dt.timedelta(minutes=30)), start=1):
        clock[0] = at
        ec2.calls.clear()
        cloudwatch.calls = 0
        began = time.perf_counter()
        result = run_sweep(_event(at, f"sweep-{n}"), runtime, aws)
        elapsed = time.perf_counter() - began
        lines.append(_line(size, n, result, cloudwatch.calls, ec2.calls, elapsed, policy, "in-memory EC2 + CloudWatch"))
    return lines


def _line(
    size: int,
    n: int,
    result: dict[str, Any],
    cw_calls: int,
    ec2_calls: dict[str, int],
    elapsed: float,
    policy: Policy,
    source: str,
) -> str:
    metrics = len(required_signals(policy.idle))
    target = math.ceil(size * metrics / MAX_QUERIES) + 1
    reads = ec2_calls.get("DescribeInstances", 0)
    writes = sum(v for k, v in ec2_calls.items() if k != "DescribeInstances")
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(result["outcomes"].items()))
    return (
        f"{size:>6} {n:>5} {cw_calls:>8} {target:>7} {'yes' if cw_calls <= target else 'NO':>4} {reads:>9} {writes:>10} "
        f"{elapsed:>8.2f}s  {source}; {outcomes}"
    )


def run_moto(size: int) -> list[str]:
    import boto3
    from moto import mock_aws

    workload = generate(size, hours=3, seed=11)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        launched = ec2.run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=size, MaxCount=size)
        ids = [i["InstanceId"] for i in launched["Instances"]]
        now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
        shift = now.timestamp() - (workload.start.timestamp() + 150 * 60)
        for instance_id, synthetic in zip(ids, workload.instances, strict=True):
            for name, signal in AGENT_METRICS.items():
                series = synthetic.series()[signal]
                data = [
                    {
                        "MetricName": name,
                        "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                        "Timestamp": dt.datetime.fromtimestamp(t + shift, dt.UTC),
                        "Value": v,
                    }
                    for t, v in zip(series.times, series.values, strict=True)
                    if t + shift <= now.timestamp() + 3600
                ]
                for start in range(0, len(data), 1000):
                    cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])
        policy = parse_policy({"idle": {"enforce": True, "launch_grace_minutes": 0}})
        runtime = Runtime(policy, MemoryLedger(), MemorySink(), MemoryDeadLetters(), region="us-east-1")
        reader = Ec2Reader("us-east-1", wildcard_type_filter=False)
        actions = Ec2Actions("us-east-1")
        metrics = CloudWatchMetrics("us-east-1")
        aws = Adapters(reader, actions, metrics, SsmCommands("us-east-1"))
        lines = []
        at = now + dt.timedelta(minutes=5)
        for n, when in enumerate((at, at + dt.timedelta(minutes=30)), start=1):
            reader.calls = actions.calls = metrics.calls = 0
            began = time.perf_counter()
            result = run_sweep(_event(when, f"moto-{n}"), runtime, aws)
            elapsed = time.perf_counter() - began
            calls = {"DescribeInstances": reader.calls, "writes": actions.calls}
            lines.append(_line(size, n, result, metrics.calls, calls, elapsed, policy, "moto EC2 + CloudWatch"))
        return lines


def main() -> None:
    logger.setLevel("ERROR")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--moto", action="store_true", help="also run 100 instances on moto")
    args = parser.parse_args()
    print("target: CloudWatch calls <= ceil(instances x metrics / 500) + 1, with 2 metrics (GPU utilisation, memory)")
    print(
        f"{'fleet':>6} {'sweep':>5} {'CW calls':>8} {'target':>7} {'ok':>4} {'EC2 reads':>9} {'EC2 writes':>10} {'wall':>9}  source; outcomes"
    )
    for size in args.sizes:
        for line in run_fake(size):
            print(line, flush=True)
    if args.moto:
        for line in run_moto(100):
            print(line, flush=True)


if __name__ == "__main__":
    main()
