"""Issue 50: the report's memory follows the fleet, not the decisions. Two days of 15-minute idle sweeps over a small
fleet are recorded in the ledger table on moto (``record_many``, as the sweep writes them); the report function
reads them compacted as the Query pages arrive, and prints the same report as from the items kept as read.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.aws import client
from governor.adapters.ledger import DynamoLedger
from governor.domain.actions import Warn
from governor.domain.decision import Decision
from governor.policy import parse_policy
from governor.report import handler as report
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.unit.test_report_handler import FakeArchive, FakeAthena, FakeChart, FakeOutbox, scheduled

RUN_AT = dt.datetime(2023, 7, 11, 7, 0, tzinfo=dt.UTC)  # the daily report of 10 July reads 9 and 10 July
INSTANCES = 12
SWEEPS = 2 * 24 * 2  # every 30 minutes


def _decision(n: int, sweep: int, at: dt.datetime) -> Decision:
    instance = f"i-{n:017x}"
    idle = n % 3 == 1 and at.hour >= 6
    warned = idle and at.hour == 7 and at.minute == 0
    utilisation = round(((n * 7919 + sweep * 104729) % 6000) / (6000 if idle else 100) + (0 if idle else 40), 2)
    return Decision(
        policy="idle",
        verdict="act" if warned else "ok",
        resource=instance,
        actions=[Warn(enforced=False)] if warned else [],
        reasons=[f"busiest GPU at {utilisation:.1f}% over the last 60 minutes"],
        evidence={
            "status": "warned" if warned else ("idle" if idle else "busy"),
            "max_gpu_utilization": utilisation,
            "window_minutes": 60,
            "instance_type": "g5.12xlarge",
            "gpus": 4,
            "purchase": {"kind": "on-demand"},
            "metric_sources": {"judged_by": ["cloudwatch-agent"]},
            **({"idle_since": at.replace(hour=6, minute=0).isoformat()} if idle else {}),
        },
        severity="warning" if warned else "info",
        rule="idle.warned" if warned else f"idle.{'idle' if idle else 'busy'}",
    )


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    with mock_aws():
        client.cache_clear()
        ledger = DynamoLedger(create_shared("us-east-1").ledger_table, region="us-east-1")
        first = dt.datetime(2023, 7, 9, tzinfo=dt.UTC)
        for n in range(INSTANCES):
            ledger.put_item(
                "session",
                f"i-{n:017x}#{first.isoformat()}",
                {
                    "at": first.isoformat(),
                    "session_key": f"i-{n:017x}#{first.isoformat()}",
                    "instance_id": f"i-{n:017x}",
                    "instance_type": "g5.12xlarge",
                    "gpus": 4,
                    "team": f"team-{n % 4}",
                    "owner": f"user{n}@example.com",
                    "start": first.isoformat(),
                    "end": None,
                    "price_per_hour": 5.672,
                },
            )
        for sweep in range(SWEEPS):
            at = first + dt.timedelta(minutes=30 * sweep)
            decisions = [_decision(n, sweep, at) for n in range(INSTANCES)]
            ledger.record_many(decisions, event_id=f"sweep-{at:%Y%m%dT%H%M}", at=at)
        yield Runtime(
            policy=parse_policy({"reports": {"enforce": False}}),
            ledger=ledger,
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region="us-east-1",
        )
    client.cache_clear()


def _as_read(runtime: Runtime, start: dt.datetime) -> list[dict[str, Any]]:
    """Every item kept exactly as the ledger returned it (what the report held before)."""
    items = list(runtime.ledger.query_kind("decision", since=start))
    for kind in report.LEDGER_KINDS[1:]:
        items.extend(runtime.ledger.query_kind(kind, since=start - report.LEDGER_LOOKBACK))
    return items


def _report_json(runtime: Runtime) -> dict[str, Any]:
    archive = FakeArchive()
    aws = report.Adapters(queries=FakeAthena({}), chart=FakeChart(), archive=archive, outbox=FakeOutbox())
    answer = report.handle(scheduled("daily"), runtime, aws, now=RUN_AT)
    assert answer["status"] == "archived"
    (key,) = [k for k in archive.objects if k.endswith("/report.json")]
    printed: dict[str, Any] = json.loads(archive.objects[key][0])
    printed.pop("generated_at")
    return printed


def test_the_report_read_compacted_prints_what_the_items_as_read_print(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    compacted = _report_json(runtime)
    monkeypatch.setattr(report, "ledger_items", _as_read)
    as_read = _report_json(runtime)

    assert compacted == as_read
    assert compacted["cost"]["gpu_hours_total"] > 0 and compacted["utilisation"]  # the decisions were read


def held(items: list[dict[str, Any]]) -> int:
    """Bytes the items hold, each object counted once however many items share it."""
    seen: set[int] = set()
    size, stack = 0, [items]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        size += sys.getsizeof(value)
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return size


def test_the_reports_two_days_of_decisions_take_under_two_fifths_of_the_memory_kept_as_read(runtime: Runtime) -> None:
    start = dt.datetime(2023, 7, 9, tzinfo=dt.UTC)

    compacted = report.ledger_items(runtime, start)
    as_read = _as_read(runtime, start)

    decisions = [i for i in compacted if i.get("kind") == "decision"]
    assert len(decisions) == sum(1 for i in as_read if i.get("kind") == "decision") == INSTANCES * SWEEPS
    assert held(compacted) * 5 <= held(as_read) * 2  # about 0.85 KB a decision instead of about 2.4 KB
