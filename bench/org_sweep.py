"""Organisation sweep: 40,000 GPU instances across 200 accounts x 4 regions, fanned out one target per account-region.

Run: ``.venv/bin/python -m bench.org_sweep [--accounts 200] [--regions 4] [--instances 40000] [--concurrency 10]
[--latency-ms 0]``

The real planner and consumer (``governor.fanout``), the real idle handler (``governor.idle.handler.handle``: parse,
run_sweep, ledger, outbox) and the real adapters (``Ec2Reader``, ``CloudWatchMetrics``, ``DynamoLedger``,
``EventBusSink``) run in-process against in-memory EC2, CloudWatch, DynamoDB, EventBridge and SQS clients that
count every call and enforce the limits the adapters must respect (DescribeInstances pages of at most 1,000,
GetMetricData at most 500 queries and 100,800 datapoints a call, BatchWriteItem 25 items, PutEvents 10 entries,
SendMessageBatch 10 entries). The Lambda event source mapping is a thread pool of ``maximum_concurrency`` workers,
each taking one target message at a time (batch size 1, as the stack configures it). ``--latency-ms`` adds a fixed
sleep to every fake call, a stand-in for the network round trip the fakes do not have (the sleep releases the GIL,
as a socket wait does). One in ten instances is idle, the rest busy; the policy is report-only (the default).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from governor import fanout
from governor.adapters.bus import EventBusSink
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ledger import DynamoLedger
from governor.adapters.ssm import SsmCommands
from governor.idle import handler as idle
from governor.idle.domain import required_signals
from governor.idle.metrics import MAX_DATAPOINTS, MAX_QUERIES, CloudWatchMetrics
from governor.observability import logger
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters

HUB = "100000000000"
REGION_NAMES = ("us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "eu-central-1", "us-east-2")
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


class Calls:
    """API calls by service and operation, from every worker thread."""

    def __init__(self, latency: float) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self.latency = latency

    def __call__(self, service: str, operation: str) -> None:
        with self._lock:
            self.counts[(service, operation)] += 1
        if self.latency:
            time.sleep(self.latency)

    def service(self, name: str) -> int:
        return sum(n for (service, _), n in self.counts.items() if service == name)


class FakeEc2:
    """One account-region's GPU instances: paginated DescribeInstances (1,000 a page)."""

    def __init__(self, calls: Calls, prefix: int, count: int) -> None:
        self.calls = calls
        launched = NOW - dt.timedelta(days=1)
        self.instances = [
            {
                "InstanceId": f"i-{prefix:09x}{n:08x}",
                "InstanceType": "g5.xlarge",
                "State": {"Name": "running"},
                "LaunchTime": launched,
                "RootDeviceType": "ebs",
                "Tags": [{"Key": "owner", "Value": f"user{n % 40}@example.com"}, {"Key": "team", "Value": "vision"}],
            }
            for n in range(count)
        ]

    def get_paginator(self, name: str) -> FakeEc2:
        assert name == "describe_instances"
        return self

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        size = min(1000, kwargs.get("PaginationConfig", {}).get("PageSize") or 1000)
        for start in range(0, max(len(self.instances), 1), size):
            self.calls("ec2", "DescribeInstances")
            yield {"Reservations": [{"Instances": self.instances[start : start + size]}]}


class FakeCloudWatch:
    """GetMetricData, one sample a minute per query; one instance in ten idle. Enforces AWS's per-call limits."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        self.calls("cloudwatch", "GetMetricData")
        queries = kwargs["MetricDataQueries"]
        assert len(queries) <= MAX_QUERIES, f"{len(queries)} queries in one call"
        start, end = kwargs["StartTime"], kwargs["EndTime"]
        minutes = int((end - start).total_seconds() // 60)
        first = int(kwargs.get("NextToken") or 0)
        results: list[dict[str, Any]] = []
        points = 0
        for index in range(first, len(queries)):
            if points + minutes > MAX_DATAPOINTS:
                return {"MetricDataResults": results, "NextToken": str(index)}
            stat = queries[index]["MetricStat"]
            instance_id = stat["Metric"]["Dimensions"][0]["Value"]
            busy = int(instance_id[-8:], 16) % 10 != 0
            utilisation = stat["Metric"]["MetricName"] == "nvidia_smi_utilization_gpu"
            value = (70.0 if busy else 0.0) if utilisation else (20_000.0 if busy else 300.0)
            stamps = [end - dt.timedelta(minutes=m) for m in range(minutes)]
            results.append({"Id": queries[index]["Id"], "Timestamps": stamps, "Values": [value] * minutes})
            points += minutes
        return {"MetricDataResults": results}


class FakeDynamo:
    """The ledger table: counts requests, keeps nothing (a first sweep finds no marks, breaker or outbox items)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.items_written = 0
        self._lock = threading.Lock()

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        self.calls("dynamodb", "PutItem")
        with self._lock:
            self.items_written += 1
        return {}

    def batch_write_item(self, RequestItems: dict[str, list[Any]]) -> dict[str, Any]:
        self.calls("dynamodb", "BatchWriteItem")
        written = sum(len(v) for v in RequestItems.values())
        assert written <= 25, f"{written} items in one BatchWriteItem"
        with self._lock:
            self.items_written += written
        return {"UnprocessedItems": {}}

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls("dynamodb", "BatchGetItem")
        assert sum(len(v["Keys"]) for v in RequestItems.values()) <= 100
        return {"Responses": {name: [] for name in RequestItems}, "UnprocessedKeys": {}}

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        self.calls("dynamodb", "GetItem")
        return {}

    def query(self, **kwargs: Any) -> dict[str, Any]:
        self.calls("dynamodb", "Query")
        return {"Items": []}


class FakeEvents:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def put_events(self, Entries: list[Any]) -> dict[str, Any]:
        self.calls("events", "PutEvents")
        assert len(Entries) <= 10
        return {"FailedEntryCount": 0, "Entries": [{"EventId": str(n)} for n in range(len(Entries))]}


class FakeQueue:
    """The targets queue as the planner sees it (SendMessageBatch, 10 a call)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.bodies: list[dict[str, Any]] = []

    def send(self, bodies: list[dict[str, Any]]) -> None:
        for _ in range(0, len(bodies), 10):
            self.calls("sqs", "SendMessageBatch")
        self.bodies.extend(bodies)


class World:
    """Every account-region's fakes, and the hub's runtime over the fake ledger and bus."""

    def __init__(self, accounts: int, regions: int, instances: int, calls: Calls) -> None:
        self.accounts = [HUB, *(f"{200000000000 + n:012d}" for n in range(1, accounts))]
        self.regions = REGION_NAMES[:regions]
        targets = accounts * regions
        per_target = [instances // targets + (1 if n < instances % targets else 0) for n in range(targets)]
        self.ec2: dict[tuple[str, str], FakeEc2] = {}
        index = 0
        for account in self.accounts:
            for region in self.regions:
                self.ec2[(account, region)] = FakeEc2(calls, index, per_target[index])
                index += 1
        self.cloudwatch = FakeCloudWatch(calls)
        self.dynamo = FakeDynamo(calls)
        ledger = DynamoLedger("ledger", region="us-east-1")
        ledger._client = self.dynamo
        sink = EventBusSink("governor", "us-east-1")
        sink._events = FakeEvents(calls)
        self.queue = FakeQueue(calls)
        self.config = fanout.FanoutConfig(
            queue_url="targets", regions=self.regions, home_account=HUB, accounts=tuple(self.accounts), attempts=3
        )
        self.runtime = Runtime(
            parse_policy({"idle": {"enforce": False}}),
            ledger,
            sink,
            MemoryDeadLetters(),
            region="us-east-1",
            extras={"fanout": self.config},
        )

    def aws(self, event: dict[str, Any], runtime: Runtime) -> idle.Adapters:
        """What ``idle.target_aws`` builds through the spoke role, on this target's fakes."""
        ec2 = self.ec2[(event["account"], event["region"])]
        return idle.Adapters(
            Ec2Reader(ec2=ec2, wildcard_type_filter=True),
            Ec2Actions(ec2=ec2),
            CloudWatchMetrics(cloudwatch=self.cloudwatch),
            SsmCommands(ssm=object()),
            clock=lambda: NOW,
        )


def schedule() -> dict[str, Any]:
    return events.scheduled(event_id="round-1", account=HUB, region="us-east-1", time=NOW)


def run(accounts: int, regions: int, instances: int, concurrency: int, latency_ms: float) -> dict[str, Any]:
    calls = Calls(latency_ms / 1000)
    world = World(accounts, regions, instances, calls)

    def sweep(event: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        return idle.handle(event, runtime, world.aws(event, runtime))

    def consume(n: int, body: dict[str, Any]) -> dict[str, Any]:
        record = {
            "messageId": str(n),
            "body": fanout.Target.model_validate(body).model_dump_json(),
            "attributes": {"ApproximateReceiveCount": "1"},
            "eventSource": "aws:sqs",
        }
        return fanout.consume({"Records": [record]}, world.runtime, sweep, attempts=world.config.attempts)

    out = io.StringIO()
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):  # Powertools metrics flush EMF lines to stdout
        planned = fanout.plan(schedule(), world.runtime, "idle", world.config, queue=world.queue)
        plan_calls = Counter(calls.counts)
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            answers = list(pool.map(consume, range(len(world.queue.bodies)), world.queue.bodies))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    results = [r for a in answers for r in a["results"]]
    failures = sum(len(a["batchItemFailures"]) for a in answers)
    targets = planned["targets"]
    signals = len(required_signals(world.runtime.policy.idle))
    per_target = [len(e.instances) for e in world.ec2.values()]
    budget = sum(math.ceil(n * signals / MAX_QUERIES) + 1 for n in per_target)
    swept = sum(int(r.get("instances", 0)) for r in results)
    outcomes: Counter[str] = Counter()
    for r in results:
        outcomes.update(r.get("outcomes", {}))
    return {
        "targets": targets,
        "instances": swept,
        "failures": failures + sum(1 for r in results if r.get("status") != "swept"),
        "calls": calls.counts,
        "plan_calls": plan_calls,
        "cloudwatch": calls.service("cloudwatch"),
        "cloudwatch_budget": budget,
        "items_written": world.dynamo.items_written,
        "wall": wall,
        "cpu": cpu,
        "outcomes": dict(outcomes),
    }


def main() -> None:
    logger.setLevel("ERROR")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--regions", type=int, default=4, choices=range(1, len(REGION_NAMES) + 1))
    parser.add_argument("--instances", type=int, default=40_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10], help="maximum_concurrency (2..1000)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every fake API call")
    args = parser.parse_args()
    print(
        f"{args.instances:,} GPU instances, {args.accounts} accounts x {args.regions} regions, report-only idle sweep, "
        f"{args.latency_ms:g} ms per API call"
    )
    for concurrency in args.concurrency:
        figures = run(args.accounts, args.regions, args.instances, concurrency, args.latency_ms)
        calls: Counter[tuple[str, str]] = figures["calls"]
        print(
            f"\nconcurrency {concurrency}: {figures['targets']} targets, {figures['instances']:,} instances swept, "
            f"{figures['failures']} failed; outcomes {figures['outcomes']}"
        )
        print(
            f"  wall {figures['wall']:.1f} s, CPU {figures['cpu']:.1f} s "
            f"({figures['wall'] / figures['targets'] * 1000:.1f} ms wall per target)"
        )
        ok = "yes" if figures["cloudwatch"] <= figures["cloudwatch_budget"] else "NO"
        print(
            f"  CloudWatch GetMetricData {figures['cloudwatch']} (budget sum of ceil(n x 2 / 500) + 1 per "
            f"account-region = {figures['cloudwatch_budget']}: within {ok})"
        )
        for (service, operation), n in sorted(calls.items()):
            print(f"  {service:<10} {operation:<18} {n:>7}  ({n / figures['targets']:.2f} per target)")
        print(f"  DynamoDB items written {figures['items_written']:,}")
        # One Lambda sandbox per concurrent target: no GIL between them. Per target, its share of the CPU measured
        # here plus one latency per API call, in waves of ``concurrency`` targets.
        serial = figures["cpu"] / figures["targets"] + sum(calls.values()) / figures["targets"] * args.latency_ms / 1000
        waves = math.ceil(figures["targets"] / concurrency)
        print(
            f"  modelled on Lambda: {serial * 1000:.0f} ms per target x {waves} waves = {serial * waves:.0f} s "
            "(CPU share + calls x latency; this process's threads share one GIL, Lambda sandboxes do not)"
        )


if __name__ == "__main__":
    main()
