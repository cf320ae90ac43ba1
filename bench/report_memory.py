"""Peak memory of building one weekly report from N idle decisions (issue 50): the ledger read as it was, side by
side with the ledger read as it is.

``python -m bench.report_memory [--decisions 100000 1000000]`` runs each case in a fresh process and prints its peak
resident set (``ru_maxrss``) less the process's size before the read, and the CPU time of read + build. The
decisions are the idle sweep's (one per instance per 15-minute sweep, ``bench.report_render.fleet``'s shape plus the
ledger's own fields), in DynamoDB's wire format, served page by page by a fake ``Query`` that makes each 1 MB page
when asked, so the fake holds no more than a page; the code under test is ``report.handler.ledger_items`` and
``build_report``. ``before``: every item kept as read (the previous version's ``ledger_items``); ``after``: the
version in the tree. Not part of the test run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import time
from typing import Any

from bench.common import PY, ROOT

END = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)  # a Monday: the weekly report of the week before
START = END - dt.timedelta(days=7)
SWEEP = dt.timedelta(minutes=15)
PAGE_BYTES = 1_000_000  # DynamoDB returns at most 1 MB a Query page
PERIOD_SWEEPS = 2 * 7 * 24 * 4  # the weekly report reads two weeks of decisions


def _utilisation(n: int, sweep: int, idle: bool) -> float:
    """A busy instance's busiest GPU between 40 and 100 %, an idle one's under 1 %, varying sweep to sweep as
    measured values do (no two neighbouring decisions alike)."""
    spread = (n * 7919 + sweep * 104729) % 6000
    return round(spread / 6000, 3) if idle else round(40 + spread / 100, 2)


def decision(n: int, sweep: int) -> dict[str, Any]:
    """The idle sweep's decision for instance ``n`` at ``sweep`` (15 minutes each since the previous period's start):
    a third busy, a third idle from 06:00 each day (warned at 07:00), a third busy on another team."""
    at = START - dt.timedelta(days=7) + SWEEP * sweep
    instance = f"i-{n:017x}"
    idle = n % 3 == 1 and at.hour >= 6
    status = "busy" if not idle else ("warned" if at.hour == 7 and at.minute == 0 else "idle")
    event_id = f"sweep-{at:%Y%m%dT%H%M}"
    return {
        "pk": f"decision#{instance}",
        "sk": f"idle#{event_id}",
        "kind": "decision",
        "at": at.isoformat(),
        "event_id": event_id,
        "expires_at": int(at.timestamp()) + 400 * 86400,
        "account": "123456789012",
        "region": "us-east-1",
        "policy": "idle",
        "verdict": "act" if status == "warned" else "ok",
        "resource": instance,
        "actions": [{"type": "warn", "enforced": False, "owner": f"user{n % 300}@example.com"}]
        if status == "warned"
        else [],
        "reasons": [
            f"busiest GPU at {_utilisation(n, sweep, idle):.1f}% over the last 60 minutes"
            + ("; idle since 06:00, a warning first" if idle else "; in use")
        ],
        "evidence": {
            "status": status,
            "max_gpu_utilization": _utilisation(n, sweep, idle),
            "window_minutes": 60,
            "samples": 60,
            "last_sample_at": (at - dt.timedelta(minutes=1)).isoformat(),
            "instance_type": "g5.12xlarge",
            "gpus": 4,
            "team": f"team-{n % 40}",
            "purchase": {"kind": "on-demand"},
            "metric_sources": {"judged_by": ["cloudwatch-agent"], "signals": ["utilization", "memory"]},
            **({"idle_since": at.replace(hour=6, minute=0).isoformat()} if idle else {}),
        },
        "severity": "warning" if status == "warned" else "info",
        "rule": f"idle.{status}",
    }


def session(n: int) -> dict[str, Any]:
    begun = START - dt.timedelta(days=7)
    return {
        "pk": f"session#i-{n:017x}#{begun.isoformat()}",
        "sk": "item",
        "kind": "session",
        "at": begun.isoformat(),
        "session_key": f"i-{n:017x}#{begun.isoformat()}",
        "instance_id": f"i-{n:017x}",
        "instance_type": "g5.12xlarge",
        "gpus": 4,
        "team": f"team-{n % 40}",
        "owner": f"user{n % 300}@example.com",
        "start": begun.isoformat(),
        "end": None,
        "price_per_hour": 5.672,
        "on_demand_per_hour": 5.672,
        "account": "123456789012",
        "region": "us-east-1",
    }


class PagedLedgerClient:
    """DynamoDB's ``query`` for the report's reads, one 1 MB page at a time, each made when asked."""

    def __init__(self, instances: int) -> None:
        from boto3.dynamodb.types import TypeSerializer

        self.instances = instances
        self._serializer = TypeSerializer()
        self.pages = 0

    def _wire(self, item: dict[str, Any]) -> dict[str, Any]:
        from governor.adapters.ledger import _to_dynamo

        return {k: self._serializer.serialize(v) for k, v in _to_dynamo(item).items()}

    def _item(self, kind: str, index: int) -> dict[str, Any] | None:
        """The ``index``-th item of ``kind`` (decisions in the order of ``at``, as the by-kind index returns them)."""
        if kind == "decision" and index < PERIOD_SWEEPS * self.instances:
            sweep, n = divmod(index, self.instances)
            return decision(n, sweep)
        if kind == "session" and index < self.instances:
            return session(index)
        return None

    def query(self, **kwargs: Any) -> dict[str, Any]:
        kind = kwargs["ExpressionAttributeValues"][":kind"]["S"]
        index = int((kwargs.get("ExclusiveStartKey") or {}).get("n", {"N": "0"})["N"])
        page: list[dict[str, Any]] = []
        size = 0
        self.pages += 1
        while (item := self._item(kind, index)) is not None:
            if size >= PAGE_BYTES:
                return {"Items": page, "LastEvaluatedKey": {"n": {"N": str(index)}}}
            page.append(self._wire(item))
            size += len(json.dumps(item))
            index += 1
        return {"Items": page}


def _before(runtime: Any, start: dt.datetime) -> list[dict[str, Any]]:
    """The previous version's ``ledger_items``: every item of the two periods in one list, as read."""
    from governor.report.handler import LEDGER_KINDS, LEDGER_LOOKBACK

    items: list[dict[str, Any]] = list(runtime.ledger.query_kind("decision", since=start))
    for kind in LEDGER_KINDS:
        if kind != "decision":
            items.extend(runtime.ledger.query_kind(kind, since=start - LEDGER_LOOKBACK))
    known = {item.get("session_key") for item in items if item.get("kind") == "session"}
    for open_session in runtime.ledger.query_kind("open-session"):
        if open_session.get("open") and open_session.get("session_key") not in known:
            items.append({**open_session, "kind": "session"})
    return items


def one(instances: int, mode: str) -> dict[str, Any]:
    """In this process: read the ledger and build the weekly report; the peak RSS over the size before the read."""
    from governor.adapters.ledger import DynamoLedger
    from governor.policy import Policy
    from governor.report.build import build_report
    from governor.report.handler import ledger_items
    from governor.runtime import Runtime
    from governor_cli.testing.memory import MemoryDeadLetters, MemorySink

    ledger = DynamoLedger.__new__(DynamoLedger)
    client = PagedLedgerClient(instances)
    ledger._client, ledger._name = client, "ledger"
    runtime = Runtime(
        policy=Policy(), ledger=ledger, sink=MemorySink(), dead_letters=MemoryDeadLetters(), region="us-east-1"
    )
    before_start = START - dt.timedelta(days=7)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began, cpu = time.perf_counter(), time.process_time()
    items = _before(runtime, before_start) if mode == "before" else ledger_items(runtime, before_start)
    report = build_report(kind="weekly", start=START, end=END, policy=Policy(), audit={}, ledger_items=items)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "instances": instances,
        "decisions": instances * PERIOD_SWEEPS,
        "mode": mode,
        "pages": client.pages,
        "peak_mib": (peak - base) / 1024,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "report": report.model_dump_json(exclude={"generated_at"}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--decisions", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--one", nargs=2, metavar=("INSTANCES", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return
    print(f"weekly report: {PERIOD_SWEEPS} idle sweeps (two weeks, every 15 minutes) x N instances")
    print(
        f"{'decisions':>10} {'instances':>9} | {'before MiB':>10} {'CPU s':>6} | {'after MiB':>9} {'CPU s':>6} | same"
    )
    for wanted in args.decisions:
        instances = max(1, round(wanted / PERIOD_SWEEPS))
        runs = {}
        for mode in ("before", "after"):
            out = subprocess.run(
                [PY, "-m", "bench.report_memory", "--one", str(instances), mode],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        b, a = runs["before"], runs["after"]
        same = "yes" if a["report"] == b["report"] else "NO"
        print(
            f"{b['decisions']:>10,} {instances:>9,} | {b['peak_mib']:>10,.0f} {b['cpu_seconds']:>6.1f} | "
            f"{a['peak_mib']:>9,.0f} {a['cpu_seconds']:>6.1f} | {same}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
