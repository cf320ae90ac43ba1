"""The Athena adapter: parameters, backoff, paging, and failures (the bytes-scanned limit included) as results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from governor.audit.queries import QUERIES_DIR, list_queries, scan_parameters, to_positional
from governor.report.athena import AthenaQueries

SQL = "SELECT eventid FROM cloudtrail_logs WHERE eventtime >= :start AND eventtime < :end AND x = ':start'"


class StubAthena:
    """Scripted Athena: a sequence of execution states, then result pages."""

    def __init__(self, states: list[dict[str, Any]], pages: list[dict[str, Any]] | None = None) -> None:
        self.states = list(states)
        self.pages = list(pages or [])
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def start_query_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("start", kwargs))
        return {"QueryExecutionId": "q-1"}

    def get_query_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get", kwargs))
        return {"QueryExecution": self.states.pop(0) if len(self.states) > 1 else self.states[0]}

    def get_query_results(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("results", kwargs))
        return self.pages.pop(0)

    def stop_query_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("stop", kwargs))
        return {}


def _state(state: str, reason: str | None = None, scanned: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"State": state}
    if reason:
        status["StateChangeReason"] = reason
    return {"QueryExecutionId": "q-1", "Status": status, "Statistics": {"DataScannedInBytes": scanned}}


COLUMNS = [{"Name": "eventid", "Type": "varchar"}, {"Name": "instances", "Type": "bigint"}]


def _row(*values: str | None) -> dict[str, Any]:
    return {"Data": [{"VarCharValue": v} if v is not None else {} for v in values]}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def _queries(stub: StubAthena, clock: Clock, **kwargs: Any) -> AthenaQueries:
    return AthenaQueries("wg", "db", athena=stub, sleep=clock.sleep, clock=clock, **kwargs)


def test_parameters_become_positional_execution_parameters_outside_strings() -> None:
    stub = StubAthena([_state("SUCCEEDED")], [{"ResultSet": {"Rows": [], "ResultSetMetadata": {"ColumnInfo": []}}}])
    result = _queries(stub, Clock()).run("q", SQL, {"start": "2024-05-01", "end": "2024-05-02T00:00:00+02:00"})
    assert result.ok
    start = stub.calls[0][1]
    assert start["QueryString"].count("?") == 2 and "':start'" in start["QueryString"]
    assert start["ExecutionParameters"] == ["'2024-05-01T00:00:00Z'", "'2024-05-01T22:00:00Z'"]
    assert start["WorkGroup"] == "wg" and start["QueryExecutionContext"] == {"Database": "db"}


def test_polls_with_capped_exponential_backoff() -> None:
    clock = Clock()
    states = [_state("QUEUED"), *[_state("RUNNING")] * 6, _state("SUCCEEDED")]
    stub = StubAthena(states, [{"ResultSet": {"Rows": [], "ResultSetMetadata": {"ColumnInfo": COLUMNS}}}])
    assert (
        _queries(stub, clock, first_delay=0.5, max_delay=4.0)
        .run("q", SQL, {"start": "2024-05-01", "end": "2024-05-02"})
        .ok
    )
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


def test_pages_through_results_dropping_the_header_and_typing_values() -> None:
    pages = [
        {
            "ResultSet": {
                "Rows": [_row("eventid", "instances"), _row("e1", "2")],
                "ResultSetMetadata": {"ColumnInfo": COLUMNS},
            },
            "NextToken": "t1",
        },
        {"ResultSet": {"Rows": [_row("e2", None), _row("e3", "5")], "ResultSetMetadata": {"ColumnInfo": COLUMNS}}},
    ]
    stub = StubAthena([_state("SUCCEEDED", scanned=1234)], pages)
    result = _queries(stub, Clock()).run("gpu", SQL, {"start": "2024-05-01", "end": "2024-05-02"})
    assert result.as_result() == {
        "count": 3,
        "rows": [
            {"eventid": "e1", "instances": 2},
            {"eventid": "e2", "instances": None},
            {"eventid": "e3", "instances": 5},
        ],
    }
    assert [c[1].get("NextToken") for c in stub.calls if c[0] == "results"] == [None, "t1"]
    assert result.bytes_scanned == 1234 and result.problem() is None


def test_bytes_scanned_cutoff_is_a_result_naming_the_limit() -> None:
    stub = StubAthena([_state("CANCELLED", "Query cancelled: bytes scanned limit was exceeded", scanned=11 * 1024**3)])
    result = _queries(stub, Clock(), bytes_cutoff=10 * 1024**3).run(
        "root_account_usage", SQL, {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert not result.ok and result.bytes_cutoff
    assert "bytes-scanned limit" in (result.problem() or "") and "root_account_usage" in (result.problem() or "")


def test_cancel_after_scanning_the_cutoff_counts_as_the_limit_even_without_a_reason() -> None:
    stub = StubAthena([_state("CANCELLED", scanned=10 * 1024**3)])
    result = _queries(stub, Clock(), bytes_cutoff=10 * 1024**3).run(
        "q", SQL, {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert result.bytes_cutoff


def test_failed_query_reports_athenas_reason() -> None:
    stub = StubAthena([_state("FAILED", "SYNTAX_ERROR: line 1:8: Column 'x' cannot be resolved")])
    result = _queries(stub, Clock()).run("q", SQL, {"start": "2024-05-01", "end": "2024-05-02"})
    assert result.state == "FAILED" and not result.bytes_cutoff
    assert result.problem() == "query q failed: SYNTAX_ERROR: line 1:8: Column 'x' cannot be resolved"


def test_timeout_stops_the_query() -> None:
    clock = Clock()
    stub = StubAthena([_state("RUNNING")])
    result = _queries(stub, clock, timeout_seconds=10).run("q", SQL, {"start": "2024-05-01", "end": "2024-05-02"})
    assert result.state == "TIMEOUT"
    assert ("stop", {"QueryExecutionId": "q-1"}) in stub.calls
    assert sum(clock.sleeps) <= 10


def test_missing_parameter_fails_without_calling_athena() -> None:
    stub = StubAthena([_state("SUCCEEDED")])
    result = _queries(stub, Clock()).run("q", SQL, {"start": "2024-05-01"})
    assert result.state == "FAILED" and "end" in (result.reason or "") and stub.calls == []


@mock_aws
def test_the_shipped_library_and_a_round_trip_on_moto() -> None:
    """The report's SQL is the library shipped with its code (``QUERIES_DIR``, what ``governor audit`` reads): no
    named query exists in this workgroup and every query still runs."""
    athena = boto3.client("athena", region_name="us-east-1")
    athena.create_work_group(Name="wg", Configuration={"ResultConfiguration": {"OutputLocation": "s3://results/"}})
    specs = list_queries()
    queries = AthenaQueries("wg", "db", athena=athena, sleep=lambda _: None)
    library = queries.library()
    assert library == {spec.name: spec.sql for spec in specs} and queries.refused == {}
    assert {spec.path.parent for spec in specs} == {QUERIES_DIR}
    result = queries.run(
        "world_open_ingress", library["world_open_ingress"], {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert result.ok and result.execution_id
    execution = athena.get_query_execution(QueryExecutionId=result.execution_id)["QueryExecution"]
    assert scan_parameters(execution["Query"]) == []  # every :name outside comments became a ?
    assert execution["Query"] == to_positional(library["world_open_ingress"])[0]
    assert execution["ExecutionParameters"][:2] == ["'2024-05-01T00:00:00Z'", "'2024-05-02T00:00:00Z'"]


def test_a_library_file_that_does_not_parse_is_refused_the_others_kept_and_an_empty_library_says_so(
    tmp_path: Path,
) -> None:
    good = "-- name: a_query\n-- purpose: p\n-- parameters: :start, :end\nSELECT :start, :end\n"
    (tmp_path / "a_query.sql").write_text(good, encoding="utf-8")
    (tmp_path / "b_query.sql").write_text(good.replace("a_query", "other_name"), encoding="utf-8")
    queries = AthenaQueries("wg", "db", athena=StubAthena([]), queries_dir=tmp_path)
    assert queries.library() == {"a_query": good}
    assert set(queries.refused) == {"b_query"}
    assert queries.refused["b_query"].startswith("query b_query refused: ")
    assert "header name 'other_name' must equal the file name" in queries.refused["b_query"]
    empty = AthenaQueries("wg", "db", athena=StubAthena([]), queries_dir=tmp_path / "missing")
    assert empty.library() == {} and "holds no .sql file" in empty.refused["query_library"]


def test_pages_to_the_end_then_refuses_an_answer_longer_than_the_limit() -> None:
    page = {"ResultSet": {"Rows": [_row("e", "1")] * 3, "ResultSetMetadata": {"ColumnInfo": COLUMNS}}, "NextToken": "t"}
    last = {"ResultSet": {"Rows": [_row("e", "1")] * 3, "ResultSetMetadata": {"ColumnInfo": COLUMNS}}}
    whole = _queries(StubAthena([_state("SUCCEEDED")], [page, last]), Clock(), max_rows=6).run(
        "q", SQL, {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert whole.ok and len(whole.rows) == 6
    cut = _queries(StubAthena([_state("SUCCEEDED")], [page, last]), Clock(), max_rows=5).run(
        "q", SQL, {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert not cut.ok and cut.truncated and cut.rows == []
    assert cut.problem() == (
        "query q returned more than 5 rows, the most the report reads: its answer is not used (a part of it would "
        "give wrong counts and prices); narrow the period or the query"
    )
