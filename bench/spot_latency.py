"""How fast does a Spot interruption warning become a checkpoint command? p50/p99 over 1,000 events.

Runs the real ``spot`` handler (DynamoDB ledger, Powertools idempotency table, EC2 re-read, SSM SendCommand, ELBv2
look-up, EventBridge findings) against moto's server on a loopback port, with ``spot.enforce: true``. The clock
starts when the handler is called and stops when SendCommand returns; the full handler time is reported too.
Figures measure the governor plus a local emulator, not AWS latency.

    .venv/bin/python -m bench.spot_latency [--events 1000] [--instances 1000]

Each warning is about another instance: the governor checkpoints once per interruption, so a second warning about
the same instance's run is recorded as a duplicate and sends nothing (issue 46.2), which is not what this measures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from governor_cli.demo.emulator import running_emulator
from governor_cli.testing.events import envelope


@dataclass
class TimedCommands:
    """Wraps the SSM adapter: notes the moment each SendCommand returned."""

    inner: Any
    sent_at: list[float] = field(default_factory=list)

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> Any:
        result = self.inner.send(instance_id, command, timeout_seconds, comment)
        self.sent_at.append(time.perf_counter())
        return result

    def status(self, command_id: str, instance_id: str) -> str:
        return str(self.inner.status(command_id, instance_id))


class _Context:
    def get_remaining_time_in_millis(self) -> int:
        return 110_000


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def run(events: int, instances: int) -> dict[str, Any]:
    from governor.adapters.aws import client
    from governor.adapters.bus import EventBusSink
    from governor.adapters.dlq import SqsDeadLetters
    from governor.adapters.ec2 import Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.adapters.ssm import SsmCommands
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor.spot.handler import Adapters, handle
    from governor.spot.recovery import SpotRecoveryActions
    from governor_cli.demo.bootstrap import create_shared

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the emulator's access log
    with running_emulator() as emulator:
        region = emulator.region
        local = create_shared(region)
        os.environ["IDEMPOTENCY_TABLE"] = local.idempotency_table
        ec2 = client("ec2", region)
        image = "ami-12c6146b"  # the emulator loads no AMI catalogue (MOTO_EC2_LOAD_DEFAULT_AMIS=false); any id works
        ids: list[str] = []
        while len(ids) < instances:
            count = min(250, instances - len(ids))
            launched = ec2.run_instances(
                ImageId=image,
                InstanceType="g5.xlarge",
                MinCount=count,
                MaxCount=count,
                InstanceMarketOptions={"MarketType": "spot"},
                TagSpecifications=[
                    {
                        "ResourceType": "instance",
                        "Tags": [  # gpu-fleet=true: SendCommand is granted only on instances with fleet.fleet_tags
                            {"Key": "owner", "Value": "bench"},
                            {"Key": "team", "Value": "vision"},
                            {"Key": "gpu-fleet", "Value": "true"},
                        ],
                    }
                ],
            )
            ids.extend(i["InstanceId"] for i in launched["Instances"])
        runtime = Runtime(
            policy=parse_policy({"spot": {"enforce": True}}),
            ledger=DynamoLedger(local.ledger_table, region=region),
            sink=EventBusSink(local.bus_name, region),
            dead_letters=SqsDeadLetters(local.dlq_urls["spot"], region),
            region=region,
        )
        reader, ssm, recovery = Ec2Reader(region), SsmCommands(region), SpotRecoveryActions(region)
        commands = TimedCommands(ssm)
        ports = Adapters(reader, commands, recovery)
        to_checkpoint: list[float] = []
        total: list[float] = []
        context = _Context()
        for n in range(events):
            event = envelope(
                "EC2 Spot Instance Interruption Warning",
                "aws.ec2",
                {"instance-id": ids[n % len(ids)], "instance-action": "terminate"},
                time="2026-12-01T10:15:00Z",
                region=region,
            )
            start = time.perf_counter()
            result = handle(event, runtime, ports, context)
            end = time.perf_counter()
            if not result.get("checkpoint", {}).get("delivered"):
                raise SystemExit(f"event {n}: checkpoint not delivered: {result}")
            to_checkpoint.append((commands.sent_at[-1] - start) * 1000)
            total.append((end - start) * 1000)
        sent = len(client("ssm", region).list_commands()["Commands"])
        os.environ.pop("IDEMPOTENCY_TABLE", None)
    return {
        "load_average_1m": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "events": events,
        "instances": instances,
        "commands_sent": sent,
        "to_checkpoint_ms": {
            "first": round(to_checkpoint[0], 1),
            "p50": round(statistics.median(to_checkpoint), 1),
            "p99": round(percentile(to_checkpoint, 99), 1),
            "max": round(max(to_checkpoint), 1),
        },
        "handler_ms": {
            "p50": round(statistics.median(total), 1),
            "p99": round(percentile(total, 99), 1),
        },
        "api_calls_per_event": {
            "ec2:DescribeInstances": reader.calls / events,
            "ssm:SendCommand": ssm.calls / events,
            "elasticloadbalancing (deregistration look-up)": recovery.calls / events,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.events > args.instances:
        parser.error("one warning per instance: a second warning about the same interruption sends nothing")
    figures = run(args.events, args.instances)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    cp, handler = figures["to_checkpoint_ms"], figures["handler_ms"]
    print(f"spot warning -> checkpoint command sent, {figures['events']} events over {figures['instances']} instances")
    print(
        f"  to checkpoint: p50 {cp['p50']} ms  p99 {cp['p99']} ms  max {cp['max']} ms  (first, cold: {cp['first']} ms)"
    )
    print(f"  whole handler: p50 {handler['p50']} ms  p99 {handler['p99']} ms")
    print(f"  SSM commands sent: {figures['commands_sent']} (one per event id)")
    for name, calls in figures["api_calls_per_event"].items():
        print(f"  {name}: {calls:.2f} calls/event")
    print(
        f"  host: {figures['cpus']} CPUs, load average {figures['load_average_1m']} at the end (emulator shares them)"
    )


if __name__ == "__main__":
    main()
