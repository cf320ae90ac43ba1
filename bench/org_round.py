"""Organisation sweep measured on the emulator: one idle round over 40,000 GPU instances in 200 accounts x 4 regions,
through the real fan-out queue, STS AssumeRole into each member account and real Lambda-like sandboxes. Every one of
the round's 800 target invocations runs and is measured end to end; nothing of the round is modelled.

Run: ``.venv/bin/python -m bench.org_round [--accounts 200] [--regions 4] [--instances 40000] [--concurrency 10]``
(invocations measured one at a time, concurrency composed) or with ``--parallel`` (``--concurrency`` sandboxes at
once, the round's wall measured on this machine).

What runs, and how each figure is obtained:

- **The emulator** is moto's server in its own process (``governor_cli.demo.emulator.running_emulator``: EC2 filter
  wildcards as AWS matches them). Every account-region has its own EC2 instances (g5.xlarge, owner and team tags) and
  every member account the idle spoke role per region; the hub has the ledger and idempotency tables, the findings
  bus, the DLQs and the targets queue, as ``governor demo`` creates them. CloudWatch is the one service not stored:
  40,000 instances x 3 signals x 135 one-minute points would be 16 million of moto's datapoint objects (over
  10 GB in its process), so the emulator answers GetMetricData from a rule (:data:`RULE`: one sample a minute, busy
  or, one instance in ten, idle) through moto's own request parsing and response serialisation. moto 5.2 lacks
  DescribeCapacityReservations: the emulator answers it with no reservations (``governor_cli.testing.capacity``, as
  the demo does). Where moto's cost is moto's and not AWS's, the emulator takes a shortcut that gives moto's own
  answers (each has a test in ``tests/unit/test_bench_emulator.py``), and never skips or fakes a call the function
  makes: moto walks every item of a table for each DynamoDB Query, so the emulator hands its own query only the
  partition or the index's matching items (:func:`_indexed_queries`); moto's JSON serializer turns each timestamp
  and value of a GetMetricData answer through its generic dispatch (130 ms a target), so lists of timestamps and
  numbers go through its own converters once per distinct value (:func:`quick_json_lists`); moto's SQS asks a slow
  clock twice per queued message whenever it counts the queue (every send and receive: 20 of the planner's 24 s),
  so that clock is read from ``time.time`` (:func:`quick_sqs_clock`). The emulator's CPU per operation is reported.
- **Sandboxes** are fresh Python processes with the idle function's environment (``GOVERNOR_FANOUT``,
  ``GOVERNOR_SPOKE_ROLE``, the policy, the tables), each one Lambda execution environment: its **init** is measured
  (interpreter start to ``governor.idle.handler`` imported, wall), then it runs ``lambda_handler`` on the events it is
  handed, each invocation's wall and CPU measured, and counts its AWS API calls and the **DynamoDB items** each of
  its reads returned (by index and kind: what read units are billed on; the report compares the round's first and
  second halves, so a read that grows with the organisation shows). Its first invocation pays what a cold start
  pays (boto3, the Session, the policy's validators, each client).
- **The event source mapping** is this process: it receives each target message from the emulator's SQS queue (batch
  size 1), hands it to a sandbox and deletes it when the sandbox reports no item failure. The schedule's own event is
  the first invocation (the planner enqueues the 800 targets through ``SendMessageBatch``).
- **Concurrency, two ways.** By default it is composed from measurements: invocations run one at a time (two cores
  shared with other work; running ten at once measures this machine's contention, not Lambda's), and each message
  goes to the sandbox whose *virtual* clock is earliest, as an event source mapping at ``maximum_concurrency`` hands
  a message to a free sandbox. A sandbox's clock starts when the planner's invocation ends (plus its own measured
  init for all but the planner's sandbox, which is warm) and advances by each measured invocation wall. The round's
  wall to its last decision is the latest clock. Other concurrencies are composed from the same measured walls
  (``--compose``). Because invocations run one after another, a message reaches its sandbox later in real time than
  in the virtual schedule: its round time (``Target.time``) is moved forward by that lag before it is handed over, so
  the target sees the age it has in the virtual schedule (a sweep more than one interval old is skipped, as a late
  retry would be). With ``--parallel`` the ``--concurrency`` sandboxes run at once, each taking the next message as
  soon as it is free, and the wall from the schedule's event to the last decision is measured: an upper bound, since
  they and the emulator share this machine's cores where Lambda gives each sandbox its own. ``--rounds N`` (with
  ``--parallel``) runs N rounds on the same ledger and warm sandboxes, so what a target reads once the earlier rounds'
  marks and outbox entries exist is measured too.

- **The fleet is seeded** in the emulator's own process (:func:`_seed_fleet`: moto's backends, each instance and spoke
  role as the API would make them); the hub's tables, bus, DLQs and queue through the API as ``governor demo`` does.
  Seeding is not part of the round and not timed in it.
- **``--sample N``** sweeps only the first N targets the queue hands out (the rest stay queued), for a quick look:
  the report then says how many were swept, and composes the whole round by giving the other targets the swept
  ones' measured walls in turn, labelled MODELLED.

Not modelled: the event source mapping's polling delay, AWS's own latency (the emulator's processing time stands in for
it: each call is a real HTTP round trip to moto on this machine), and Lambda's throttling.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HUB = "123456789012"  # moto's default account: the organisation's management (hub) account
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "eu-central-1", "us-east-2")
SPOKE = "GovernorSpoke"
QUEUE = "governor-idle-targets"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{HUB}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
)
POLICY = {"idle": {"enforce": False, "launch_grace_minutes": 0}}
#: What the emulator's CloudWatch answers, per agent metric: (an idle instance's value, a busy one's), every minute.
RULE = {
    "nvidia_smi_utilization_gpu": (0.0, 70.0),
    "nvidia_smi_memory_used": (300.0, 20_000.0),
    "nvidia_smi_power_draw": (25.0, 200.0),
}


def idle_instance(instance_id: str) -> bool:
    """One instance in ten is idle (a stable choice from its id)."""
    return int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16) % 10 == 0


# --- the emulator process ---------------------------------------------------------------------------------------


def serve() -> None:
    """moto's server with GetMetricData answered by rule; prints its endpoint, serves until stdin closes."""
    import logging

    from moto.cloudwatch.models import CloudWatchBackend

    from governor_cli.demo.emulator import running_emulator
    from governor_cli.testing.capacity import _teach_moto

    def get_metric_data(
        self: Any, queries: list[dict[str, Any]], start_time: Any, end_time: Any, scan_by: str = "TimestampAscending"
    ) -> list[dict[str, Any]]:
        start = start_time.replace(second=0, microsecond=0)
        results = []
        for query in queries:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            period = int(stat["Period"])
            instance_id = metric["Dimensions"][0]["Value"]
            idle = idle_instance(instance_id)
            value = RULE.get(metric["MetricName"], (0.0, 0.0))[0 if idle else 1]
            steps = int((end_time - start).total_seconds() // period)
            stamps = [start + dt.timedelta(seconds=k * period) for k in range(steps)]
            if scan_by == "TimestampDescending":
                stamps.reverse()
            results.append(
                {
                    "id": query["Id"],
                    "label": query.get("Label") or metric["MetricName"],
                    "values": [value] * len(stamps),
                    "timestamps": stamps,
                    "status_code": "Complete",
                }
            )
        return results

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    from moto.core.responses import BaseResponse

    spent: Counter[str] = Counter()
    served: Counter[str] = Counter()
    call_action = BaseResponse.call_action

    def timed(self: Any) -> Any:  # the emulator's CPU per operation (the thread's own: requests run in threads)
        began = time.thread_time()
        try:
            return call_action(self)
        finally:
            name = f"{type(self).__module__.split('.')[1]}:{getattr(self, '_get_action', lambda: '?')()}"
            spent[name] += time.thread_time() - began
            served[name] += 1

    BaseResponse.call_action = timed  # type: ignore[method-assign]
    with running_emulator() as emulator:
        CloudWatchBackend.get_metric_data = get_metric_data  # type: ignore[method-assign]
        _teach_moto()  # DescribeCapacityReservations (moto 5.2 lacks it): no reservations
        _indexed_queries()
        quick_json_lists()
        quick_sqs_clock()
        print(emulator.endpoint, flush=True)
        for line in sys.stdin:  # a fleet to seed, "ledger", or an empty line: the CPU per operation so far
            if line.strip() == "ledger":
                print(json.dumps({"ledger": _ledger_kinds()}), flush=True)
            elif line.strip():
                print(json.dumps({"seeded": _seed_fleet(json.loads(line))}), flush=True)
            else:
                print(json.dumps({"spent": dict(spent), "served": dict(served)}), flush=True)


def quick_json_lists() -> Callable[[], None]:
    """moto's JSON serializer turns each element of a list through its generic per-shape dispatch (a path push, a
    ``getattr`` per type, a wrapper dict, the timestamp parsed back to an aware datetime and formatted): a
    GetMetricData answer of 50 instances x 3 signals x 135 minutes is 20,250 timestamps and as many values, 130 ms of
    the emulator's CPU a target, where CloudWatch answers in tens of ms. Lists of timestamps and numbers are turned
    here with moto's own converters, each distinct timestamp once (the 150 series of an answer share their 135
    minutes): the same answer, byte for byte (``tests/unit/test_bench_emulator.py``). Returns the undo."""
    from moto.core.serialize import BaseJSONSerializer

    original = BaseJSONSerializer._serialize_type_list

    def quick(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        member = shape.member
        named = self.get_serialized_name(member, member.name) == member.name  # else moto keeps the raw item
        if named and member.type_name == "timestamp":
            form = member.serialization.get("timestampFormat", self._timestamp_serializer.default_format)
            turned: dict[Any, Any] = self.__dict__.setdefault("_bench_turned", {})  # one answer's
            convert = self._timestamp_serializer._convert_timestamp_to_str
            out = []
            for v in value:
                found = turned.get((v, form))
                if found is None:
                    found = turned[(v, form)] = convert(v, form)
                out.append(found)
            self._default_serialize(serialized, out, shape, key)
        elif named and member.type_name in ("double", "float"):
            self._default_serialize(serialized, [float(v) for v in value], shape, key)
        else:
            original(self, serialized, value, shape, key)

    BaseJSONSerializer._serialize_type_list = quick  # type: ignore[method-assign]

    def undo() -> None:
        BaseJSONSerializer._serialize_type_list = original  # type: ignore[method-assign]

    return undo


def quick_sqs_clock() -> Callable[[], None]:
    """moto's SQS asks the time (``unix_time_millis``: a UTC datetime made naive, minus the epoch made the same way)
    twice for every message of the queue whenever it counts the queue's messages, and it counts them for every message
    sent (``Queue.attributes``) and every receive: enqueueing and consuming the round's 800 targets asked it 2.6
    million times (20 s of the planner's 24). The time is read here from ``time.time``, the same clock: the same
    answers (``tests/unit/test_bench_emulator.py``). Returns the undo."""
    import moto.sqs.models as sqs

    own = sqs.unix_time_millis

    def unix_time_millis(at: dt.datetime | None = None) -> float:
        return time.time() * 1000.0 if at is None else own(at)

    sqs.unix_time_millis = unix_time_millis  # type: ignore[assignment]

    def undo() -> None:
        sqs.unix_time_millis = own

    return undo


def _seed_fleet(plan: list[list[Any]]) -> int:
    """Each (account, region, instances, owner, make the spoke role) of ``plan`` into moto's backends directly: what
    the fleet is before the round, not part of it. Through the API, RunInstances serialises every instance and moto
    looks the AMI up once per instance (18 ms): 40,000 instances took 18 minutes; here about a minute."""
    from moto.ec2.models import EC2Backend, ec2_backends
    from moto.iam.models import iam_backends

    lookup = EC2Backend.describe_images
    found: dict[tuple[int, str], Any] = {}

    def describe_images(self: Any, *args: Any, **kwargs: Any) -> Any:  # the one AMI, looked up once per backend
        key = (id(self), repr((args, kwargs)))
        if key not in found:
            found[key] = lookup(self, *args, **kwargs)
        return found[key]

    EC2Backend.describe_images = describe_images  # type: ignore[method-assign]
    launched = 0
    try:
        for account, region, count, owner, role in plan:
            if role:
                iam_backends[account]["global"].create_role(f"{SPOKE}-idle-{region}", TRUST, "/", None, "", [], None)
            ec2_backends[account][region].run_instances(
                "ami-12c6146b",
                count,
                None,
                [],
                instance_type="g5.xlarge",
                is_instance_type_default=False,
                region_name=region,
                tags={"instance": {"owner": owner, "team": "vision"}},
            )
            launched += count
    finally:
        EC2Backend.describe_images = lookup  # type: ignore[method-assign]
    return launched


def _indexed_queries() -> None:
    """moto answers every DynamoDB Query by walking every item of the table (``Table.all_items``, for the table's own
    key too), so the ledger's by-kind queries would cost more with every target swept (51 ms a call at 1,000 items,
    growing with the 40,000 decisions of the round); DynamoDB reads a partition. Hand moto's own ``query`` only the
    items that can match (the partition, or the items with the index's hash value, kept as they are written): the
    same answers, moto still filters, sorts and pages them."""
    import inspect
    import threading

    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    lock = threading.RLock()
    query, put, delete = Table.query, Table.put_item, Table.delete_item
    signature = inspect.signature(query)

    def hashes(table: Any) -> list[tuple[str, str]]:
        """(index, its one hash attribute) of the table's global secondary indexes."""
        found = []
        for gsi in table.global_indexes:
            keys = [k["AttributeName"] for k in gsi.schema if k["KeyType"] == "HASH"]
            if len(keys) == 1:
                found.append((gsi.name, keys[0]))
        return found

    def file(table: Any, index: dict[Any, Any], item: Any, add: bool) -> None:
        for name, attribute in hashes(table):
            if attribute in item.attrs:
                bucket = index.setdefault((name, item.attrs[attribute]), {})
                if add:
                    bucket[(item.hash_key, item.range_key)] = item
                else:
                    bucket.pop((item.hash_key, item.range_key), None)

    def index_of(table: Any) -> dict[Any, Any]:
        found = table.__dict__.get("_bench_index")
        if found is None:
            found = table.__dict__["_bench_index"] = {}
            for item in table.all_items():
                file(table, found, item, True)
        return found

    def put_item(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        with lock:
            index = self.__dict__.get("_bench_index")
            if index is None:
                return put(self, item_attrs, *args, **kwargs)
            key = DynamoType(item_attrs[self.hash_key_attr])
            held = self.items.get(key)
            if held is not None and self.range_key_attr:
                held = held.get(DynamoType(item_attrs[self.range_key_attr]))
            stored = put(self, item_attrs, *args, **kwargs)
            if held is not None:
                file(self, index, held, False)
            file(self, index, stored, True)
            return stored

    def delete_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            gone = delete(self, *args, **kwargs)
            index = self.__dict__.get("_bench_index")
            if gone is not None and index is not None:
                file(self, index, gone, False)
            return gone

    def narrowed_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs).arguments
        with lock:
            name, conditions = bound.get("index_name"), bound.get("hash_key_conditions") or []
            if name:
                attributes = dict(hashes(self))
                if name not in attributes or len(conditions) != 1 or conditions[0][0] != attributes[name]:
                    return query(self, *args, **kwargs)
                candidates = list(index_of(self).get((name, conditions[0][1]), {}).values())
            else:
                held = self.items.get(bound["hash_key"])
                candidates = [] if held is None else list(held.values()) if self.range_key_attr else [held]
            self.all_items = lambda: candidates  # the instance attribute shadows the method for this call only
            try:
                return query(self, *args, **kwargs)
            finally:
                del self.all_items

    Table.query = narrowed_query  # type: ignore[method-assign]
    Table.put_item = put_item  # type: ignore[method-assign]
    Table.delete_item = delete_item  # type: ignore[method-assign]


# --- a sandbox process ------------------------------------------------------------------------------------------


class _Context:
    """The parts of the Lambda context Powertools reads."""

    function_name = "governor-idle"
    memory_limit_in_mb = 1024
    invoked_function_arn = f"arn:aws:lambda:us-east-1:{HUB}:function:governor-idle"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def _items_read(operation: str, params: dict[str, Any], answer: dict[str, Any]) -> tuple[str, int] | None:
    """What one DynamoDB read returned, in items (what read units are billed on), named by the read: a Query by its
    index and the kind it asks for, GetItem and BatchGetItem by the kinds of their keys (``pk`` is ``kind#key``)."""
    if operation == "Query":
        values = params.get("ExpressionAttributeValues") or {}
        kind = values.get(":kind", {}).get("S", "?")
        return f"Query {params.get('IndexName', 'table')} {kind}", len(answer.get("Items", []))
    if operation == "GetItem":
        kind = str(params.get("Key", {}).get("pk", {}).get("S", "?")).split("#", 1)[0]
        return f"GetItem {params.get('TableName')} {kind}", int("Item" in answer)
    if operation == "BatchGetItem":
        kinds = sorted(
            {
                str(k.get("pk", {}).get("S", "?")).split("#", 1)[0]
                for r in params["RequestItems"].values()
                for k in r["Keys"]
            }
        )
        return f"BatchGetItem {'+'.join(kinds)}", sum(len(v) for v in answer.get("Responses", {}).values())
    return None


def _count_calls(calls: Counter[str], items: Counter[str]) -> None:
    """Count every AWS call once botocore.client is imported (by the handler's first client, not by us), and the
    items each DynamoDB read returns (``items``)."""
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "botocore.client":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            original = loader.exec_module  # type: ignore[attr-defined]

            def exec_module(module: Any) -> None:
                original(module)
                real = module.BaseClient._make_api_call

                def counted(client: Any, operation: str, params: Any) -> Any:
                    service = client.meta.service_model.service_name
                    calls[f"{service}:{operation}"] += 1
                    answer = real(client, operation, params)
                    if service == "dynamodb":
                        read = _items_read(operation, params, answer)
                        if read is not None:
                            items[read[0]] += read[1]
                    return answer

                module.BaseClient._make_api_call = counted

            loader.exec_module = exec_module  # type: ignore[attr-defined]
            sys.meta_path.remove(self)
            return spec

    sys.meta_path.insert(0, Finder())


def sandbox() -> None:
    """One execution environment: init (the handler's import), then one invocation per line on stdin."""
    began, cpu = time.perf_counter(), time.process_time()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Powertools' logs and metrics print here, as in Lambda
    calls: Counter[str] = Counter()
    items: Counter[str] = Counter()
    _count_calls(calls, items)
    from governor.idle import handler

    out.write(json.dumps({"import_wall": time.perf_counter() - began, "import_cpu": time.process_time() - cpu}) + "\n")
    context = _Context()
    for line in sys.stdin:
        event = json.loads(line)
        calls.clear()
        items.clear()
        began, cpu = time.perf_counter(), time.process_time()
        answer = handler.lambda_handler(event, context)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        record = {"wall": wall, "cpu": cpu, "calls": dict(calls), "items": dict(items), "answer": answer}
        out.write(json.dumps(record, default=str) + "\n")


# --- the orchestrator: seeding, the event source mapping, the composed schedule ----------------------------------


def _environment(
    endpoint: str, stack: Any, regions: tuple[str, ...], accounts: list[str], queue_url: str
) -> dict[str, str]:
    """The idle function's environment as the stack sets it in organisation mode, pointed at the emulator."""
    from governor.policy import parse_policy

    stack.spoke_role, stack.home_account = SPOKE, HUB
    fanout = {"queue_url": queue_url, "regions": list(regions), "home_account": HUB, "accounts": accounts}
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": "lambdas:cli:.",
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_REGION": regions[0],
        "AWS_DEFAULT_REGION": regions[0],
        "AWS_ENDPOINT_URL": endpoint,
        "POWERTOOLS_TRACE_DISABLED": "true",
        **stack.environment("idle", parse_policy(POLICY)),
        "GOVERNOR_FANOUT": json.dumps(fanout),
    }


class Sandbox:
    """A sandbox process; ``init`` is from its spawn to its handler imported (wall)."""

    def __init__(self, env: dict[str, str]) -> None:
        spawned = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.org_round", "sandbox"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self._line())
        self.init = time.perf_counter() - spawned
        self.import_wall, self.import_cpu = ready["import_wall"], ready["import_cpu"]
        self.clock = 0.0
        self.invocations = 0

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"sandbox exited ({self.process.wait()})")
        return line

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(event) + "\n")
        self.process.stdin.flush()
        found: dict[str, Any] = json.loads(self._line())
        found["first"] = self.invocations == 0
        self.invocations += 1
        return found

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def seed(
    emulator: subprocess.Popen[str], accounts: list[str], regions: tuple[str, ...], instances: int
) -> tuple[Any, str, int]:
    """What the stack and the fleet would be: the hub's resources as ``governor demo`` creates them (through the API),
    then the spoke roles and instances (:func:`_seed_fleet`, in the emulator). Returns the hub's resources, the
    targets queue's URL and the instances launched."""
    import boto3

    from governor_cli.demo.bootstrap import create_shared

    stack = create_shared(regions[0])
    queue_url = str(boto3.client("sqs", region_name=regions[0]).create_queue(QueueName=QUEUE)["QueueUrl"])
    targets = len(accounts) * len(regions)
    plan = []
    for a, account in enumerate(accounts):
        for r, region in enumerate(regions):
            index = a * len(regions) + r
            count = instances // targets + (1 if index < instances % targets else 0)
            # the hub's own region runs on the function's role, every other target on its spoke role
            plan.append([account, region, count, f"user{index % 40}@example.com", account != HUB or r > 0])
    assert emulator.stdin is not None and emulator.stdout is not None
    emulator.stdin.write(json.dumps(plan) + "\n")
    emulator.stdin.flush()
    launched: int = json.loads(emulator.stdout.readline())["seeded"]
    return stack, queue_url, launched


def schedule(start: float, cold: list[float], walls: list[float]) -> float:
    """The round's wall to its last decision with ``len(cold)`` sandboxes: each target (in queue order, its measured
    warm wall) to the sandbox free first; a sandbox's first target adds its cold start (``cold``); the clocks start
    at ``start`` (the planner's end)."""
    clocks = [start] * len(cold)
    used = [False] * len(cold)
    for wall in walls:
        k = min(range(len(clocks)), key=clocks.__getitem__)
        if not used[k]:
            clocks[k] += cold[k]
            used[k] = True
        clocks[k] += wall
    return max(clocks)


def run_round(args: argparse.Namespace) -> dict[str, Any]:
    import boto3

    from governor.adapters.aws import client

    emulator = subprocess.Popen(
        [sys.executable, "-m", "bench.org_round", "serve"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": "lambdas:cli:."},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert emulator.stdout is not None
    endpoint = emulator.stdout.readline().strip()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "demo",
            "AWS_SECRET_ACCESS_KEY": "demo",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
    )
    client.cache_clear()
    sandboxes: list[Sandbox] = []
    try:
        regions = REGIONS[: args.regions]
        accounts = [HUB, *(f"{200000000000 + n:012d}" for n in range(1, args.accounts))]
        began = time.perf_counter()
        stack, queue_url, launched = seed(emulator, accounts, regions, args.instances)
        print(f"seeded {launched:,} instances in {len(accounts)} accounts x {len(regions)} regions "
              f"({time.perf_counter() - began:.0f} s, not counted)", flush=True)  # fmt: skip
        env = _environment(endpoint, stack, regions, accounts, queue_url)

        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        round_began = time.perf_counter()
        planner = Sandbox(env)
        sandboxes.append(planner)
        scheduled = {
            "version": "0",
            "id": f"round-{int(now.timestamp())}",
            "detail-type": "Scheduled Event",
            "source": "aws.scheduler",
            "account": HUB,
            "region": regions[0],
            "time": now.isoformat().replace("+00:00", "Z"),
            "resources": [],
            "detail": {},
        }
        planned = planner.invoke(scheduled)
        print(f"planned: {planned['answer']} in {planned['wall']:.2f} s (init {planner.init:.2f} s)", flush=True)
        if args.parallel:
            emulator_cpu, spent_before = cpu_of(emulator.pid), _spent(emulator)
            invocations, wall = _run_parallel(args, env, sandboxes, queue_url, regions[0], round_began)
            figures = _figures(emulator, emulator_cpu, spent_before, planned, planner, sandboxes, invocations, launched)
            later = [_later_round(args, env, sandboxes, queue_url, regions[0], n) for n in range(2, args.rounds + 1)]
            return figures | {
                "virtual_wall": wall,
                "start": planner.init + planned["wall"],
                "parallel": True,
                "later_rounds": later,
            }
        for _ in range(args.concurrency - 1):
            sandboxes.append(Sandbox(env))
        start = planner.init + planned["wall"]
        inits = [0.0, *(s.init for s in sandboxes[1:])]
        for s, init in zip(sandboxes, inits, strict=True):
            s.clock = start + init
        sqs = boto3.client("sqs", region_name=regions[0])
        invocations: list[dict[str, Any]] = []
        emulator_cpu = cpu_of(emulator.pid)
        spent_before = _spent(emulator)
        while True:
            got = sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=1, AttributeNames=["All"], VisibilityTimeout=900
            ).get("Messages", [])
            if not got or (args.sample and len(invocations) >= args.sample):
                break
            message = got[0]
            record = _record(message, regions[0])
            chosen = min(sandboxes, key=lambda s: s.clock)
            # Invocations run one after another, so a message reaches its sandbox later than the virtual schedule
            # says; its round time moves by that lag, so the target sees the age it has in the virtual schedule (the
            # sweep skips a target more than one interval old, as it would a late retry).
            body = json.loads(message["Body"])
            body["time"] = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=chosen.clock)).isoformat()
            record["body"] = json.dumps(body)
            done = chosen.invoke({"Records": [record]})
            chosen.clock += done["wall"]
            done["target"] = json.loads(message["Body"])
            invocations.append(done)
            _settle(sqs, queue_url, message, done)
            if len(invocations) % 50 == 0:
                print(f"  {len(invocations)} invocations, virtual wall {max(s.clock for s in sandboxes):.0f} s",
                      flush=True)  # fmt: skip
        measured = _figures(emulator, emulator_cpu, spent_before, planned, planner, sandboxes, invocations, launched)
        return {**measured, "virtual_wall": max(s.clock for s in sandboxes), "start": start}
    finally:
        for s in sandboxes:
            s.close()
        assert emulator.stdin is not None
        emulator.stdin.close()
        emulator.wait()


def _record(message: dict[str, Any], region: str) -> dict[str, Any]:
    """The SQS record the event source mapping hands the function for one message (batch size 1)."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message["Attributes"],
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{region}:{HUB}:{QUEUE}",
        "awsRegion": region,
    }


def _settle(sqs: Any, queue_url: str, message: dict[str, Any], done: dict[str, Any]) -> None:
    """As the event source mapping does: a message with no item failure is deleted, a failed one made visible."""
    if not done["answer"]["batchItemFailures"]:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    else:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)


def _run_parallel(
    args: argparse.Namespace,
    env: dict[str, str],
    sandboxes: list[Sandbox],
    queue_url: str,
    region: str,
    began: float,
) -> tuple[list[dict[str, Any]], float]:
    """``--parallel``: ``--concurrency`` sandboxes at once, each taking the next message as soon as it is free (the
    planner's sandbox, warm, is one of them; the others start now and pay their init in the round's wall). Every
    target keeps the round time the planner gave it. Returns the invocations and the wall from the schedule's event
    (the planner's spawn) to the last decision, measured."""
    import threading

    import boto3

    clients = [boto3.client("sqs", region_name=region) for _ in range(args.concurrency)]
    invocations: list[dict[str, Any]] = []
    ends: list[float] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        if k >= len(sandboxes):
            with lock:
                sandboxes.append(Sandbox(env))
                mine = sandboxes[-1]
        else:
            mine = sandboxes[k]
        while True:
            got = (
                clients[k]
                .receive_message(
                    QueueUrl=queue_url, MaxNumberOfMessages=1, AttributeNames=["All"], VisibilityTimeout=900
                )
                .get("Messages", [])
            )
            if not got:
                return
            done = mine.invoke({"Records": [_record(got[0], region)]})
            with lock:
                ends.append(time.perf_counter() - began)
                done["target"] = json.loads(got[0]["Body"])
                invocations.append(done)
                if len(invocations) % 50 == 0:
                    print(f"  {len(invocations)} invocations, {ends[-1]:.0f} s since the schedule's event", flush=True)
            _settle(clients[k], queue_url, got[0], done)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return invocations, max(ends, default=0.0)


def _later_round(
    args: argparse.Namespace, env: dict[str, str], sandboxes: list[Sandbox], queue_url: str, region: str, n: int
) -> dict[str, Any]:
    """``--rounds``: round ``n`` on the same ledger and warm sandboxes (the schedule's next event, as the schedule
    fires again), so what a target reads once the organisation's marks and outbox entries exist is measured."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    began = time.perf_counter()
    event = {
        "version": "0",
        "id": f"round-{int(now.timestamp())}-{n}",
        "detail-type": "Scheduled Event",
        "source": "aws.scheduler",
        "account": HUB,
        "region": region,
        "time": now.isoformat().replace("+00:00", "Z"),
        "resources": [],
        "detail": {},
    }
    planned = sandboxes[0].invoke(event)
    print(f"round {n} planned: {planned['answer']} in {planned['wall']:.2f} s", flush=True)
    invocations, wall = _run_parallel(args, env, sandboxes, queue_url, region, began)
    return {"round": n, "planned": planned, "invocations": invocations, "wall": wall}


def _figures(
    emulator: subprocess.Popen[str],
    emulator_cpu: float,
    spent_before: dict[str, dict[str, float]],
    planned: dict[str, Any],
    planner: Sandbox,
    sandboxes: list[Sandbox],
    invocations: list[dict[str, Any]],
    launched: int,
) -> dict[str, Any]:
    """What a round measured besides its wall: the emulator's CPU (total and per operation) since ``emulator_cpu``
    and ``spent_before`` were read, the planner, the sandboxes' inits, every invocation, the ledger after."""
    spent_after = _spent(emulator)
    return {
        "emulator_operations": {
            name: (
                spent_after["spent"][name] - spent_before["spent"].get(name, 0.0),
                spent_after["served"][name] - spent_before["served"].get(name, 0),
            )
            for name in spent_after["spent"]
        },
        "emulator_cpu": cpu_of(emulator.pid) - emulator_cpu,
        "planned": planned,
        "planner_init": planner.init,
        "inits": [s.init for s in sandboxes],
        "imports": [(s.import_wall, s.import_cpu) for s in sandboxes],
        "invocations": invocations,
        "launched": launched,
        "targets": int(planned["answer"]["targets"]),
        "ledger_items": _ledger_items(emulator),
    }


def _spent(emulator: subprocess.Popen[str]) -> dict[str, dict[str, float]]:
    """The emulator's CPU per operation so far (and the calls served)."""
    assert emulator.stdin is not None and emulator.stdout is not None
    emulator.stdin.write("\n")
    emulator.stdin.flush()
    found: dict[str, dict[str, float]] = json.loads(emulator.stdout.readline())
    return found


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ledger_kinds() -> dict[str, int]:
    """In the emulator: the hub ledger's items by kind, from moto's table (a Scan through the API pages through
    moto's 45,000 items once per page, minutes at this size; this is not part of the round)."""
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[HUB][REGIONS[0]].get_table("governor-ledger")
    found: Counter[str] = Counter()
    for item in table.all_items():
        kind = item.attrs.get("kind")
        found[str(kind.value) if kind is not None else "?"] += 1
    return dict(found)


def _ledger_items(emulator: subprocess.Popen[str]) -> Counter[str]:
    """The ledger's items by kind after the round (what the targets recorded)."""
    assert emulator.stdin is not None and emulator.stdout is not None
    emulator.stdin.write("ledger\n")
    emulator.stdin.flush()
    return Counter(json.loads(emulator.stdout.readline())["ledger"])


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return f"median {statistics.median(ordered):.3f} s, p95 {pick(0.95):.3f} s, max {ordered[-1]:.3f} s"


def report(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """What the round measured, then the round's wall composed from it (and, with --sample, modelled)."""
    runs = figures["invocations"]
    _report_outcomes(runs)
    _report_costs(figures, runs)
    _report_round(args, figures, runs)
    _report_cpu_schedule(args, figures, runs)
    for later in figures.get("later_rounds", []):
        print(f"\nROUND {later['round']} on the same ledger and warm sandboxes, measured: wall from its schedule event "
              f"to the last decision {later['wall']:.1f} s")  # fmt: skip
        _report_outcomes(later["invocations"])
        _report_items(later["invocations"])


def _report_outcomes(runs: list[dict[str, Any]]) -> None:
    """What the targets decided and whether every one was swept."""
    results = [r for i in runs for r in i["answer"]["results"]]
    failed = sum(len(i["answer"]["batchItemFailures"]) for i in runs)
    outcomes: Counter[str] = Counter()
    for result in results:
        outcomes.update(result.get("outcomes", {}))
    swept = sum(int(r.get("instances", 0)) for r in results)
    calls: Counter[str] = Counter()
    for i in runs:
        calls.update(i["calls"])
    first = [i["wall"] for i in runs if i["first"]]
    statuses = Counter(str(r.get("status")) for r in results)
    print(
        f"\n{len(runs)} target invocations ({len(first)} first in their sandbox), statuses {dict(statuses)}, "
        f"{'every target swept' if statuses == Counter(swept=len(runs)) else 'NOT every target swept'}; "
        f"{failed} item failures, "
        f"{len({(i['target']['account'], i['target']['region']) for i in runs})} account-regions swept, {swept:,} instances; "
        f"outcomes {dict(outcomes)}"
    )


def _report_costs(figures: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """Init, invocation walls and CPU, API calls, the emulator's own CPU."""
    warm = [i["wall"] for i in runs if not i["first"]]
    first = [i["wall"] for i in runs if i["first"]]
    calls: Counter[str] = Counter()
    for i in runs:
        calls.update(i["calls"])
    print(f"  planner (schedule event): init {figures['planner_init']:.2f} s + plan {figures['planned']['wall']:.2f} s, "
          f"calls {figures['planned']['calls']}")  # fmt: skip
    inits = figures["inits"]
    imports = figures["imports"]
    print(f"  sandbox init (spawn to handler imported), {len(inits)} sandboxes: {_quantiles(inits)}; import alone "
          f"wall {_quantiles([w for w, _ in imports])}, CPU median {statistics.median(c for _, c in imports):.3f} s")  # fmt: skip
    print(f"  target invocation wall, warm ({len(warm)}): {_quantiles(warm)}")
    print(f"  target invocation wall, first in a sandbox ({len(first)}): {_quantiles(first)}")
    first_cpu = [i["cpu"] for i in runs if i["first"]]
    warm_cpu = [i["cpu"] for i in runs if not i["first"]]
    print(f"  target invocation CPU, warm: {_quantiles(warm_cpu)}; first in a sandbox: {_quantiles(first_cpu)}")
    own = sum(i["cpu"] for i in runs)
    print(f"  target invocation CPU: median {statistics.median(i['cpu'] for i in runs):.3f} s, total {own:.1f} s; "
          f"the emulator's CPU over the same invocations (and this process's receives and deletes) "
          f"{figures['emulator_cpu']:.1f} s: {(own + figures['emulator_cpu']) / len(runs):.3f} s of CPU per target "
          "between them (a target's calls are sequential: on free cores its wall would be about this)")  # fmt: skip
    print("  API calls per target (the sandboxes' own, counted in botocore):")
    for name, n in sorted(calls.items()):
        print(f"    {name:<36} {n:>7}  ({n / len(runs):.2f} per target)")
    _report_items(runs)
    print(f"  ledger items after the round: {dict(figures['ledger_items'])}")
    print("  the emulator's CPU per operation over the targets (moto's own handling, this machine):")
    for name, (seconds, served) in sorted(figures.get("emulator_operations", {}).items(), key=lambda kv: -kv[1][0]):
        if served:
            print(f"    {name:<36} {seconds:7.1f} s for {served:>6} calls ({1000 * seconds / served:.1f} ms a call)")


def _report_items(runs: list[dict[str, Any]]) -> None:
    """The DynamoDB items each target's reads returned, by read, in the round's first and second halves: a read
    whose items grow as the round goes reads other targets' state (its cost grows with the organisation)."""
    half = len(runs) // 2
    parts = [runs[:half], runs[half:]] if half else [runs]
    totals = [sum(sum(i.get("items", {}).values()) for i in part) / len(part) for part in parts]
    print(f"  DynamoDB items read per target (first half / second half of the round): "
          f"{' / '.join(f'{t:.2f}' for t in totals)}")  # fmt: skip
    names = sorted({name for i in runs for name in i.get("items", {})})
    for name in names:
        means = [sum(i.get("items", {}).get(name, 0) for i in part) / len(part) for part in parts]
        print(f"    {name:<52} {' / '.join(f'{m:7.2f}' for m in means)}")


def _report_round(args: argparse.Namespace, figures: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """The round's wall from the measured walls: as run, modelled for the whole round (--sample), other concurrencies."""
    inits = figures["inits"]
    warm = [i["wall"] for i in runs if not i["first"]]
    first = [i["wall"] for i in runs if i["first"]]
    first_cpu = [i["cpu"] for i in runs if i["first"]]
    warm_cpu = [i["cpu"] for i in runs if not i["first"]]
    targets = int(figures.get("targets", len(runs)))
    whole = len(runs) >= targets
    half = len(warm) // 2
    if half:
        print(f"  warm wall, first half / second half of the swept targets: median {statistics.median(warm[:half]):.3f}"
              f" s / {statistics.median(warm[half:]):.3f} s (the ledger grows as the round goes)")  # fmt: skip
    verdict = "met" if figures["virtual_wall"] <= 900 else "NOT met"
    if figures.get("parallel"):
        print(
            f"  ROUND, MEASURED with {len(figures['inits'])} sandboxes running at once (processes on this machine's "
            f"{os.cpu_count()} cores, the emulator's too: contention included, an upper bound; Lambda gives each "
            f"sandbox its own CPU): wall from the schedule's event to the last decision {figures['virtual_wall']:.1f} s"
            f" (planner {figures['start']:.1f} s) -> "
            + (f"target <= 900 s: {verdict}" if whole else f"the {len(runs)} of {targets} targets swept, not the round")
        )
    else:
        print(
            f"  ROUND, maximum_concurrency {args.concurrency}: wall to the last decision {figures['virtual_wall']:.1f} "
            f"s (planner {figures['start']:.1f} s, then the targets on {args.concurrency} sandboxes; invocations "
            "measured one at a time, concurrency composed from their measured walls) -> "
            + (f"target <= 900 s: {verdict}" if whole else f"the {len(runs)} of {targets} targets swept, not the round")
        )
    walls = [i["wall"] for i in runs if not i["first"]]
    walls += [statistics.median(warm)] * (len(runs) - len(walls))  # the first ones' warm share; the rest is cold
    if not whole:  # --sample: the targets not swept take the swept ones' measured walls, in turn (a model)
        walls = [walls[k % len(walls)] for k in range(targets)]
        print(
            f"  MODELLED, the whole round of {targets} targets at maximum_concurrency {args.concurrency}: about "
            f"{schedule(figures['start'], [statistics.median(inits)] * args.concurrency, walls):.1f} s "
            f"({targets - len(runs)} targets given the {len(runs)} measured walls in turn; the ledger's growth over "
            "the rest of the round is not in them)"
        )
    # What a first invocation costs beyond a warm one (clients, the Session, validators), never less than nothing: the
    # wall difference, or the CPU difference where the emulator's growing tables made later invocations slower.
    cold_extra = (
        max(
            0.0,
            statistics.median(first) - statistics.median(warm),
            statistics.median(first_cpu) - statistics.median(warm_cpu),
        )
        if first and warm
        else 0.0
    )
    for concurrency in args.compose:
        cold = [statistics.median(inits) + cold_extra] * concurrency
        total = schedule(figures["start"], cold, walls)
        print(
            f"  composed for maximum_concurrency {concurrency}: {total:.1f} s (median init {statistics.median(inits):.2f}"
            f" s + first-invocation extra {cold_extra:.2f} s per sandbox, the same measured target walls"
            f"{' (measured under the parallel run contention)' if figures.get('parallel') else ''}"
            f"{'' if whole else f', all {targets} targets: modelled as above'})"
        )


def _report_cpu_schedule(args: argparse.Namespace, figures: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """The same schedule from CPU instead of wall: each target's own CPU plus its share of the emulator's (spread
    evenly over the targets), which is what its sequential calls would take with a core each for it and the service."""
    imports = figures["imports"]
    first_cpu = [i["cpu"] for i in runs if i["first"]]
    warm_cpu = [i["cpu"] for i in runs if not i["first"]]
    targets = int(figures.get("targets", len(runs)))
    whole = len(runs) >= targets
    share = figures["emulator_cpu"] / len(runs)
    costs = [i["cpu"] + share for i in runs if not i["first"]]
    costs += [statistics.median(costs)] * (len(runs) - len(costs))
    costs = [costs[k % len(costs)] for k in range(max(targets, len(costs)))]
    cold_cpu = statistics.median(c for _, c in imports) + (
        max(0.0, statistics.median(first_cpu) - statistics.median(warm_cpu)) if first_cpu and warm_cpu else 0.0
    )
    planner = figures["planned"]["cpu"] + statistics.median(c for _, c in imports)
    for concurrency in [args.concurrency, *args.compose]:
        total = schedule(planner, [cold_cpu] * concurrency, costs)
        print(
            f"  composed from CPU for maximum_concurrency {concurrency}: {total:.1f} s (each target's CPU + "
            f"{share:.3f} s of the emulator's; cold start {cold_cpu:.2f} s CPU: import + first-invocation extra"
            f"{'' if whole else f'; all {targets} targets: modelled as above'})"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "sandbox":
        sandbox()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--regions", type=int, default=4, choices=range(1, len(REGIONS) + 1))
    parser.add_argument("--instances", type=int, default=40_000)
    parser.add_argument("--concurrency", type=int, default=10, help="maximum_concurrency of the targets mapping")
    parser.add_argument("--compose", type=int, nargs="*", default=[2, 5, 50], help="other concurrencies to compose")
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="sweep only the first N targets of the round (the rest stay queued); the whole round is then composed "
        "from their measured walls (a model, labelled so)",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run --concurrency sandboxes at once (processes) and measure the round's wall on this machine, "
        "contention included: an upper bound (Lambda gives each sandbox its own CPU)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --parallel: run this many rounds on the same ledger (later rounds read the earlier ones' marks and "
        "outbox entries); the report adds each later round's wall, outcomes and DynamoDB items read per target",
    )
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--report", help="print the report of measurements a --json run wrote, without running")
    args = parser.parse_args()
    if args.parallel and args.sample:
        parser.error("--parallel runs the whole round: leave --sample out")
    if args.rounds > 1 and not args.parallel:
        parser.error("--rounds needs --parallel")
    if args.report:
        report(args, json.loads(Path(args.report).read_text()))
        return
    print(
        f"{args.instances:,} GPU instances, {args.accounts} accounts x {args.regions} regions, report-only idle round, "
        f"maximum_concurrency {args.concurrency}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    began = time.perf_counter()
    figures = run_round(args)
    report(args, figures)
    print(f"bench wall {time.perf_counter() - began:.0f} s; load average after {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
