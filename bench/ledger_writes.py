"""Ledger requests per idle sweep: one report-only sweep's decisions written one by one (PutItem) and batched
(BatchWriteItem, with the BatchGetItem that keeps an "act" entry), counted at botocore's ``before-call`` on moto.

    .venv/bin/python -m bench.ledger_writes [--instances 10000]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any


def sweep_requests(instances: int, single: int) -> dict[str, Counter[str]]:
    """Requests by operation for ``instances`` decisions batched and ``single`` decisions written one by one."""
    from moto import mock_aws

    from governor.adapters.aws import client
    from governor.adapters.ledger import DynamoLedger
    from governor.domain.decision import Decision
    from governor_cli.demo.bootstrap import create_ledger_table

    decisions = [
        Decision(policy="idle", verdict="ok", resource=f"i-{n:017x}", reasons=["busy"], evidence={"gpu_max": 71.5})
        for n in range(instances)
    ]
    out: dict[str, Counter[str]] = {}
    with mock_aws():
        client.cache_clear()
        dynamodb = client("dynamodb", "us-east-1")
        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        dynamodb.meta.events.register("before-call.dynamodb", count)
        for label, table in (("batched", "ledger-batched"), ("one by one", "ledger-single")):
            create_ledger_table(table)
            calls.clear()
            ledger = DynamoLedger(table, region="us-east-1")
            if label == "batched":
                ledger.record_many(decisions, event_id="sweep")
            else:
                for decision in decisions[:single]:
                    ledger.record(decision, event_id="sweep")
            out[label] = Counter(calls)
    client.cache_clear()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument(
        "--single", type=int, help="decisions written one by one (default: all; moto answers ~10 PutItem a second here)"
    )
    args = parser.parse_args()
    single = args.single or args.instances
    began = time.perf_counter()
    results = sweep_requests(args.instances, single)
    for label, calls in results.items():
        size = args.instances if label == "batched" else single
        detail = ", ".join(f"{name} {count:,}" for name, count in sorted(calls.items()))
        print(f"{size:,}-instance sweep, ledger writes {label}: {sum(calls.values()):,} requests ({detail})")
    per_single = sum(results["one by one"].values()) / single
    batched = sum(results["batched"].values())
    print(
        f"per {args.instances:,} instances: one by one {per_single * args.instances:,.0f}, batched {batched:,} "
        f"({per_single * args.instances / batched:.1f}x fewer requests; {time.perf_counter() - began:.0f}s)"
    )


if __name__ == "__main__":
    main()
