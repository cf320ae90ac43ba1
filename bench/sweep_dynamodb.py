"""DynamoDB requests per idle sweep: how many the ledger and outbox make for a fleet with a share of warnings.

Run: ``.venv/bin/python -m bench.sweep_dynamodb [--size 10000] [--warn-share 0.1]``

The real handler (``governor.idle.sweep_run.run_sweep``) with the real ledger (``DynamoLedger``: decisions, marks,
outbox, breaker, intents) on moto's DynamoDB (the ledger table as the stack defines it), enforcing; EC2 and
CloudWatch are ``bench.idle_sweep``'s in-memory clients (moto's GetMetricData is impractical at 10,000 instances).
The fleet is ``--size`` instances of which ``--warn-share`` are idle for the whole window, the rest busy: the first
sweep warns every idle one. Every DynamoDB request the sweep's client sends is counted by operation (a botocore
``before-send`` hook, so retries count too); the figure is requests per sweep and per warning.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections import Counter
from typing import Any

REGION = "us-east-1"


def measure(size: int, warn_share: float) -> dict[str, Any]:
    from moto import mock_aws

    from bench.idle_sweep import FakeCloudWatch, FakeEc2, _event
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.adapters.ssm import SsmCommands
    from governor.idle.metrics import CloudWatchMetrics
    from governor.idle.ports import Adapters
    from governor.idle.sweep_run import run_sweep
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.demo.bootstrap import create_ledger_table
    from governor_cli.sim.workload import generate
    from governor_cli.testing.memory import MemoryDeadLetters, MemorySink

    idle = max(1, round(size * warn_share))
    # Every instance the same kind per group: "idle" for the warned share, "training" (busy) for the rest.
    workload = generate(idle, hours=3, seed=11, mix={"idle": 1.0})
    busy = generate(size - idle, hours=3, seed=12, mix={"training": 1.0})
    workload.instances.extend(busy.instances)
    with mock_aws():
        create_ledger_table("bench-ledger", REGION)
        ledger = DynamoLedger("bench-ledger", region=REGION)
        counted: Counter[str] = Counter()

        kinds: Counter[str] = Counter()

        def count(request: Any, **_: Any) -> None:
            target = request.headers.get("X-Amz-Target", b"")
            name = (target.decode() if isinstance(target, bytes) else str(target)).rsplit(".", 1)[-1]
            counted[name] += 1
            if name in ("PutItem", "GetItem", "UpdateItem", "DeleteItem"):
                body = json.loads(request.body or b"{}")
                key = (body.get("Item") or body.get("Key") or {}).get("pk", {}).get("S", "?")
                kinds[f"{name} {key.split('#', 1)[0]}"] += 1

        ledger._client.meta.events.register("before-send.dynamodb", count)
        ec2 = FakeEc2(workload)
        cloudwatch = FakeCloudWatch(workload)
        policy = parse_policy({"idle": {"enforce": True}})
        runtime = Runtime(policy, ledger, MemorySink(), MemoryDeadLetters(), region=REGION)
        at = workload.start + dt.timedelta(minutes=150)
        aws = Adapters(
            Ec2Reader(ec2=ec2),
            Ec2Actions(ec2=ec2),
            CloudWatchMetrics(cloudwatch=cloudwatch),
            SsmCommands(ssm=object()),
            clock=lambda: at,
        )
        began = time.perf_counter()
        result = run_sweep(_event(at, "bench-sweep-1"), runtime, aws)
        elapsed = time.perf_counter() - began
    warned = int(result["outcomes"].get("warned", 0))
    return {
        "size": size,
        "warned": warned,
        "outcomes": dict(result["outcomes"]),
        "requests": sum(counted.values()),
        "by_operation": dict(counted),
        "by_item": dict(kinds),
        "seconds": elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--warn-share", type=float, default=0.1)
    args = parser.parse_args(argv)
    found = measure(args.size, args.warn_share)
    per = found["requests"] / found["warned"] if found["warned"] else float("nan")
    operations = ", ".join(f"{k} {v:,}" for k, v in sorted(found["by_operation"].items()))
    print(
        f"{found['size']:,} instances, {found['warned']:,} warned: {found['requests']:,} DynamoDB requests "
        f"({per:.1f} per warning; {operations}) in {found['seconds']:.1f} s on moto; outcomes {found['outcomes']}"
    )
    print(
        "single-item requests by ledger kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(found["by_item"].items()))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
