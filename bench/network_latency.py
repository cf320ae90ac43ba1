"""How long from a world-open AuthorizeSecurityGroupIngress event to the rule being revoked, through the real handler.

Each event opens one TCP port to 0.0.0.0/0 on one of a few security groups on the local emulator
(``ThreadedMotoServer(port=0)``); its CloudTrail event (nested shape, rule id in ``responseElements``) goes through
``governor.network.handler.handle`` with enforcement on: parse, DescribeSecurityGroups + DescribeSecurityGroupRules
(re-read), ledger PutItem (DynamoDB), RevokeSecurityGroupIngress by rule id, ledger PutItem with what was done,
PutEvents. The timer starts when the handler gets the event and stops when it returns (the rule is revoked by then).
Prints p50/p99/max and API calls per event, and checks every opened rule is gone.

    .venv/bin/python -m bench.network_latency [--events 1000] [--groups 10]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from typing import Any

from governor_cli.testing import events

REGION = "us-east-1"
ACCOUNT = "123456789012"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _event(index: int, group: str, port: int, rule_id: str) -> dict[str, Any]:
    record = {
        "eventVersion": "1.09",
        "userIdentity": {"type": "AssumedRole", "arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/ml/alice"},
        "eventTime": "2026-11-30T09:15:01Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": "AuthorizeSecurityGroupIngress",
        "awsRegion": REGION,
        "requestParameters": {
            "groupId": group,
            "ipPermissions": {
                "items": [
                    {
                        "ipProtocol": "tcp",
                        "fromPort": port,
                        "toPort": port,
                        "ipRanges": {"items": [{"cidrIp": "0.0.0.0/0"}]},
                    }
                ]
            },
        },
        "responseElements": {
            "_return": True,
            "securityGroupRuleSet": {
                "items": [
                    {
                        "groupId": group,
                        "securityGroupRuleId": rule_id,
                        "isEgress": False,
                        "ipProtocol": "tcp",
                        "fromPort": port,
                        "toPort": port,
                        "cidrIpv4": "0.0.0.0/0",
                    }
                ]
            },
        },
        "eventID": f"bench-{index:05d}",
        "recipientAccountId": ACCOUNT,
    }
    # delivered a second after the call, as EventBridge does
    return events.cloudtrail(record, event_id=f"bench-network-{index:05d}", time="2026-11-30T09:15:02Z")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=10)
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
            "POWERTOOLS_METRICS_NAMESPACE": "GpuFleetGovernor",
        }
    )
    os.environ.pop("IDEMPOTENCY_TABLE", None)
    try:
        run(args.events, args.groups)
    finally:
        server.stop()


def run(count: int, group_count: int) -> None:
    import boto3

    from governor.adapters.bus import EventBusSink
    from governor.adapters.ec2 import Ec2Reader
    from governor.adapters.ledger import DynamoLedger
    from governor.events.envelopes import CloudTrailRecord
    from governor.network.addresses import PublicAddresses
    from governor.network.domain import decide_call
    from governor.network.events import parse_call
    from governor.network.handler import Adapters, handle
    from governor.network.security_groups import SecurityGroups
    from governor.observability import logger, metrics
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.demo.bootstrap import create_ledger_table
    from governor_cli.testing.memory import MemoryDeadLetters

    logger.setLevel(logging.WARNING)
    create_ledger_table("ledger", REGION)
    boto3.client("events", region_name=REGION).create_event_bus(Name="governor")
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    groups = [
        ec2.create_security_group(GroupName=f"gpu-training-{n}", Description="bench", VpcId=vpc)["GroupId"]
        for n in range(group_count)
    ]
    runtime = Runtime(
        policy=parse_policy({"network": {"enforce": True, "scope": "all"}}),  # groups without instances
        ledger=DynamoLedger("ledger", region=REGION),
        sink=EventBusSink("governor", REGION),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )
    aws = Adapters(SecurityGroups(REGION), PublicAddresses(REGION), Ec2Reader(REGION, wildcard_type_filter=False))
    handle(_event(0, groups[0], 1, "sgr-warmup"), runtime, aws)  # imports, clients, first connections

    latencies: list[float] = []
    calls_before = aws.groups.calls
    revoked = 0
    for index in range(count):
        group = groups[index % group_count]
        port = 10000 + index
        opened = ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
            ],
        )
        rule_id = opened["SecurityGroupRules"][0]["SecurityGroupRuleId"]
        event = _event(index + 1, group, port, rule_id)
        started = time.perf_counter()
        result = handle(event, runtime, aws)
        latencies.append((time.perf_counter() - started) * 1000)
        metrics.clear_metrics()  # the Lambda decorator flushes per invocation; nothing to flush here
        revoked += sum(1 for done in result["decisions"][0]["done"] if done.startswith(f"revoked {rule_id}"))

    deciding = []
    for index in range(min(count, 200)):
        record = CloudTrailRecord.model_validate(_event(index, groups[0], 10000 + index, f"sgr-{index:017x}")["detail"])
        started = time.perf_counter()
        decide_call(parse_call(record), runtime.policy, record.event_time)
        deciding.append((time.perf_counter() - started) * 1000)
    round_trips = []
    for _ in range(50):
        started = time.perf_counter()
        ec2.describe_security_groups(GroupIds=[groups[0]])
        round_trips.append((time.perf_counter() - started) * 1000)
    left = [
        rule
        for rule in ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": groups}])[
            "SecurityGroupRules"
        ]
        if not rule["IsEgress"]
    ]
    ec2_calls = (aws.groups.calls - calls_before) / count
    print(f"network latency: {count} world-open AuthorizeSecurityGroupIngress events, {group_count} groups, enforce on")
    print("  emulator: moto ThreadedMotoServer(port=0); ledger on DynamoDB, findings on EventBridge (both emulated)")
    print(
        f"  event -> revocation: p50 {_percentile(latencies, 0.50):.1f} ms, p99 {_percentile(latencies, 0.99):.1f} ms, "
        f"max {max(latencies):.1f} ms, mean {statistics.mean(latencies):.1f} ms"
    )
    print(
        f"  EC2 calls per event: {ec2_calls:.1f} (DescribeSecurityGroups, DescribeSecurityGroupRules, "
        "RevokeSecurityGroupIngress); plus 2 DynamoDB PutItem and 1 PutEvents"
    )
    print(
        f"  of which deciding (parse + policy, no I/O): p50 {_percentile(deciding, 0.5):.2f} ms; one emulator "
        f"round trip (DescribeSecurityGroups): p50 {_percentile(round_trips, 0.5):.1f} ms; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"  revoked: {revoked}/{count}; world-open ingress rules left: {len(left)}")


if __name__ == "__main__":
    main()
