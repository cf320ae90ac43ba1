"""The lifecycle reconciliation sweep and the report's cost queries, at fleet scale.

1. Reconciliation through ``governor.lifecycle.handler.handle`` on moto: N running GPU instances (plus non-GPU
   noise), of which a third already have open sessions, a third were never seen starting, and M further open
   sessions belong to instances that are gone. Prints wall time and AWS API calls per operation.
2. ``gpu_hours_and_cost`` (by team, owner, type), ``idle_hours`` and ``savings`` over S synthetic sessions and
   idle decisions, as the report Lambda runs them.

    .venv/bin/python -m bench.lifecycle_reconcile [--instances 600] [--vanished 100] [--sessions 50000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import time
from collections import Counter
from typing import Any

from governor_cli.testing import events

REGION = "us-east-1"


def reconcile_figures(instances: int, vanished: int) -> None:
    import boto3
    from moto import mock_aws

    from governor.adapters.aws import client
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.domain.costs import PriceBook
    from governor.lifecycle import domain as lifecycle
    from governor.lifecycle.handler import Adapters, handle
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.demo.bootstrap import create_shared
    from governor_cli.testing.memory import MemoryDeadLetters, MemorySink

    with mock_aws():
        client.cache_clear()
        local = create_shared(REGION)
        ec2 = boto3.client("ec2", region_name=REGION)
        image = "ami-12c6146b"  # moto accepts any AMI id
        ids: list[str] = []
        for start in range(0, instances, 100):
            count = min(100, instances - start)
            reply = ec2.run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=count, MaxCount=count)
            ids.extend(i["InstanceId"] for i in reply["Instances"])
        ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=50, MaxCount=50)
        policy = parse_policy({"lifecycle": {"enforce": True}})
        ledger = DynamoLedger(local.ledger_table, region=REGION)
        prices = PriceBook(policy.pricing)
        now = dt.datetime.now(dt.UTC)
        reader = Ec2Reader(REGION, ec2, wildcard_type_filter=False)  # moto does not match wildcard filters
        known = reader.instances(ids[: instances // 3])
        for instance in known:  # sessions the state-change events opened
            session = lifecycle.open_session(instance, instance.launch_time, policy, prices, opened_by="state-change")
            ledger.put_item(lifecycle.OPEN_SESSION, instance.id, {**session, "open": True})
        for index in range(vanished):  # sessions whose stop event was lost and whose instance is gone
            gone = {
                "instance_id": f"i-{index:017x}",
                "instance_type": "g5.xlarge",
                "start": (now - dt.timedelta(hours=5)).isoformat(),
                "session_key": f"i-{index:017x}#x",
                "open": True,
            }
            ledger.put_item(lifecycle.OPEN_SESSION, gone["instance_id"], gone)
        calls: Counter[str] = Counter()

        def count(event_name: str, **kwargs: Any) -> None:
            calls[event_name.rsplit(".", 1)[-1]] += 1

        ec2.meta.events.register("before-call.ec2.*", count)
        ledger._client.meta.events.register("before-call.dynamodb.*", count)
        runtime = Runtime(policy, ledger, MemorySink(), MemoryDeadLetters(), region=REGION)
        caps = Adapters(reader=reader, tagger=Ec2Actions(REGION, ec2), prices=prices, now=lambda: now)
        event = events.scheduled(event_id="bench-sweep", time=now, region=REGION)
        began = time.perf_counter()
        result = handle(event, runtime, caps)
        elapsed = time.perf_counter() - began
        client.cache_clear()
    print(f"reconcile: {instances} running GPU instances (+50 non-GPU), {len(known)} already open, {vanished} vanished")
    print(
        f"  opened {result['opened']}, closed {result['closed']}, no-team findings {result['no_team']}, "
        f"{elapsed:.2f} s on moto"
    )
    print("  API calls: " + ", ".join(f"{name} {n}" for name, n in sorted(calls.items())))


def query_figures(sessions: int) -> None:
    from governor.domain.actions import Stop
    from governor.domain.costs import PriceBook, gpu_hours_and_cost
    from governor.domain.decision import Decision
    from governor.idle.costs import idle_hours, savings
    from governor.policy import parse_policy

    rng = random.Random(7)
    policy = parse_policy({})
    book = PriceBook(policy.pricing)
    types = sorted(policy.pricing.prices)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=30)
    items: list[dict[str, Any]] = []
    for index in range(sessions):
        kind = rng.choice(types)
        price = book.price(kind)
        began = start + dt.timedelta(hours=rng.uniform(-48, 700))
        items.append(
            {
                "kind": "session",
                "instance_id": f"i-{index % (sessions // 4 or 1):017x}",
                "instance_type": kind,
                "gpus": price.gpus,
                "team": f"team-{rng.randrange(20)}",
                "owner": f"user-{rng.randrange(200)}",
                "start": began.isoformat(),
                "end": (began + dt.timedelta(hours=rng.uniform(0.1, 72))).isoformat(),
                "price_per_hour": price.per_hour,
                "on_demand_per_hour": price.on_demand,
            }
        )
    for index in range(sessions // 10):
        at = start + dt.timedelta(hours=rng.uniform(0, 720))
        status = rng.choice(["warned", "idle", "acted"])
        decision = Decision(
            policy="idle",
            verdict="act",
            resource=f"i-{index:017x}",
            actions=[Stop(enforced=True)] if status == "acted" else [],
            evidence={
                "status": status,
                "window_start": (at - dt.timedelta(hours=2)).isoformat(),
                "window_end": at.isoformat(),
            },
        )
        items.append({"kind": "decision", "at": at.isoformat(), **decision.model_dump(mode="json")})
    began = time.perf_counter()
    rows = {by: gpu_hours_and_cost(items, start, end, by) for by in ("team", "owner", "instance_type")}  # type: ignore[misc]
    costed = time.perf_counter() - began
    began = time.perf_counter()
    idle = idle_hours(items, start, end)
    saved = savings(items, start, end, book)
    idled = time.perf_counter() - began
    total = sum(r.cost_usd for r in rows["team"])
    print(f"cost queries: {sessions} sessions + {sessions // 10} idle decisions over 30 days")
    print(f"  gpu_hours_and_cost x3 groupings: {costed:.2f} s ({len(rows['owner'])} owners, {total:,.0f} USD)")
    print(
        f"  idle_hours + savings: {idled:.2f} s (idle {idle.detected_gpu_hours:,.0f} GPU-h, "
        f"reclaimed {idle.reclaimed_gpu_hours:,.0f} GPU-h, saved {saved.saved_usd:,.0f} USD)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=600)
    parser.add_argument("--vanished", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=50_000)
    args = parser.parse_args()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ.setdefault(name, value)
    reconcile_figures(args.instances, args.vanished)
    query_figures(args.sessions)


if __name__ == "__main__":
    main()
