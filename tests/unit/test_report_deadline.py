"""The report's overall deadline: the queries that do not fit the invocation are reported as not run, never left to
time the function out (which retried it and parked it in the DLQ with no report)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from governor.report.handler import MIN_QUERY_SECONDS, RESERVE_SECONDS, Deadline, run_queries

START = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
END = START + dt.timedelta(days=1)


@dataclass
class Outcome:
    ok: bool = True

    def as_result(self) -> dict[str, Any]:
        return {"count": 0, "rows": []}

    def problem(self) -> str | None:
        return None


@dataclass
class Clock:
    """The Lambda context's remaining time, spent by the slow fake queries."""

    remaining_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class SlowAthena:
    clock: Clock
    seconds_each: float
    timeout_seconds: float = 240.0
    timeouts_seen: list[float] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def library(self) -> dict[str, str]:
        return {f"q{n:02d}": "SELECT 1" for n in range(20)}

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> Outcome:
        self.ran.append(name)
        self.timeouts_seen.append(self.timeout_seconds)
        self.clock.remaining_ms -= int(self.seconds_each * 1000)
        return Outcome()


def test_queries_stop_before_the_function_times_out() -> None:
    clock = Clock(remaining_ms=600_000)
    athena = SlowAthena(clock, seconds_each=60)
    results, errors = run_queries(athena, START, END, Deadline(clock))
    assert len(results) + len(errors) == 20
    assert 0 < len(results) < 20 and len(errors) == 20 - len(results)
    assert all("time budget" in reason for reason in errors.values())
    assert clock.remaining_ms / 1000 >= RESERVE_SECONDS - 60, "time is left for rendering, archive and delivery"
    assert max(athena.timeouts_seen) <= 600 - RESERVE_SECONDS and athena.timeout_seconds == 240.0


def test_each_query_waits_at_most_what_is_left() -> None:
    clock = Clock(remaining_ms=200_000)
    athena = SlowAthena(clock, seconds_each=1)
    run_queries(athena, START, END, Deadline(clock))
    assert athena.timeouts_seen[0] <= 200 - 50  # a quarter of a short invocation is kept back
    assert all(t >= MIN_QUERY_SECONDS for t in athena.timeouts_seen)


def test_without_a_context_every_query_runs() -> None:
    athena = SlowAthena(Clock(remaining_ms=1), seconds_each=1000)
    results, errors = run_queries(athena, START, END, Deadline(None))
    assert len(results) == 20 and not errors and athena.timeouts_seen == [240.0] * 20


def test_a_regional_stack_without_the_audit_lake_reports_without_queries(monkeypatch: Any) -> None:
    from governor.report import handler as report

    monkeypatch.setenv("REPORTS_BUCKET", "reports")
    monkeypatch.delenv("ATHENA_WORKGROUP", raising=False)
    monkeypatch.delenv("ATHENA_DATABASE", raising=False)
    report._environment.cache_clear()
    report._aws.cache_clear()
    try:
        queries = report._aws("eu-west-1", None).queries
        assert isinstance(queries, report.NoQueries)
        assert run_queries(queries, START, END, Deadline(None)) == ({}, {})
    finally:
        report._environment.cache_clear()
        report._aws.cache_clear()
