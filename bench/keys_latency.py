"""How long from a KMS CloudTrail event to rotation being on again, through the real handler and adapters.

Each of N customer keys has rotation switched off; its DisableKeyRotation event (the AWS documentation's record
shape) goes through ``governor.keys.handler.handle`` with enforcement on, against the local emulator
(``ThreadedMotoServer(port=0)``): parse, DescribeKey + GetKeyRotationStatus, ListResourceTags, ledger PutItem
(DynamoDB), EnableKeyRotation, action record, PutEvents. Prints p50/p99/max and API calls per event.

    .venv/bin/python -m bench.keys_latency [--events 1000]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from governor_cli.testing import events

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _event(template: dict[str, Any], index: int, key_id: str, arn: str) -> dict[str, Any]:
    record = copy.deepcopy(template)
    record["requestParameters"]["keyId"] = key_id
    record["responseElements"] = {"keyId": arn}
    record["awsRegion"] = REGION
    record["eventID"] = f"bench-{index:05d}"
    return events.cloudtrail(record, event_id=f"bench-event-{index:05d}", account="123456789012", resources=[arn])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    args = parser.parse_args()

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }
    )
    os.environ.pop("IDEMPOTENCY_TABLE", None)
    try:
        run(args.events)
    finally:
        server.stop()


def run(count: int) -> None:
    import boto3

    from governor.adapters.bus import EventBusSink
    from governor.adapters.ledger import DynamoLedger
    from governor.keys.handler import Adapters, handle
    from governor.keys.iam_keys import IamAccessKeys
    from governor.keys.kms import KmsKeys
    from governor.keys.secrets import SecretsRotation
    from governor.observability import metrics
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.demo.bootstrap import create_ledger_table
    from governor_cli.testing.memory import MemoryDeadLetters

    create_ledger_table("ledger", REGION)
    boto3.client("events", region_name=REGION).create_event_bus(Name="governor")
    kms = boto3.client("kms", region_name=REGION)
    keys = []
    for _ in range(count):
        meta = kms.create_key(Description="bench training-data key")["KeyMetadata"]
        keys.append((meta["KeyId"], meta["Arn"]))
    template = json.loads((ROOT / "tests" / "fixtures" / "keys" / "disable_key_rotation.json").read_text())

    policy = parse_policy({"keys": {"enforce": True}})
    runtime = Runtime(
        policy=policy,
        ledger=DynamoLedger("ledger", region=REGION),
        sink=EventBusSink("governor", REGION),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )
    kms_adapter = KmsKeys(REGION)
    adapters = Adapters(kms=kms_adapter, iam=IamAccessKeys(REGION), secrets=SecretsRotation(REGION))
    events = [_event(template, i, key_id, arn) for i, (key_id, arn) in enumerate(keys)]

    handle(_event(template, 99999, *keys[0]), runtime, adapters)  # warm clients and connections, not timed
    kms_adapter.calls = 0
    latencies: list[float] = []
    started = time.perf_counter()
    for event in events:
        t0 = time.perf_counter()
        result = handle(event, runtime, adapters)
        latencies.append((time.perf_counter() - t0) * 1000)
        metrics.clear_metrics()  # what log_metrics does after each invocation, minus printing the EMF blob
        if result.get("status") != "ok":
            raise SystemExit(f"event {event['id']} not handled: {result}")
    wall = time.perf_counter() - started
    enabled = sum(kms.get_key_rotation_status(KeyId=k)["KeyRotationEnabled"] for k, _ in keys)

    print(f"keys latency: {count} DisableKeyRotation events -> EnableKeyRotation(RotationPeriodInDays=90)")
    print("  emulator: moto ThreadedMotoServer(port=0); ledger on DynamoDB, findings on EventBridge (emulated)")
    print(f"  rotation enabled afterwards: {enabled}/{count} keys")
    print(
        f"  latency ms: p50 {statistics.median(latencies):.1f}  p99 {_percentile(latencies, 0.99):.1f}  "
        f"max {max(latencies):.1f}  mean {statistics.fmean(latencies):.1f}"
    )
    tenth = max(1, count // 10)
    print(
        f"  p50 of the first {tenth} events {statistics.median(latencies[:tenth]):.1f} ms, "
        f"of the last {tenth} {statistics.median(latencies[-tenth:]):.1f} ms"
    )
    print(
        f"  KMS API calls per event: {kms_adapter.calls / count:.1f}  (DescribeKey, GetKeyRotationStatus, "
        "ListResourceTags, EnableKeyRotation)"
    )
    print(f"  throughput: {count / wall:.0f} events/s in one thread ({wall:.1f} s)")
    load = os.getloadavg()[0]
    print(
        f"  host: {os.cpu_count()} CPUs, 1-minute load average {load:.1f} at the end (client and emulator share them)"
    )


if __name__ == "__main__":
    main()
