"""The Athena adapter: parameters, backoff, paging, and failures (the bytes-scanned limit included) as results."""

from __future__ import annotations

from typing import Any

import boto3
from moto import mock_aws

from governor.audit.queries import list_queries, scan_parameters, to_positional
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
def test_named_queries_and_a_round_trip_on_moto() -> None:
    athena = boto3.client("athena", region_name="us-east-1")
    athena.create_work_group(Name="wg", Configuration={"ResultConfiguration": {"OutputLocation": "s3://results/"}})
    specs = list_queries()
    ids = {
        spec.name: athena.create_named_query(Name=spec.name, Database="db", QueryString=spec.sql, WorkGroup="wg")[
            "NamedQueryId"
        ]
        for spec in specs
    }
    queries = AthenaQueries("wg", "db", athena=athena, deployed=ids, sleep=lambda _: None)
    named = queries.named_queries()
    assert named == {spec.name: spec.sql for spec in specs} and queries.refused == {}
    result = queries.run(
        "world_open_ingress", named["world_open_ingress"], {"start": "2024-05-01", "end": "2024-05-02"}
    )
    assert result.ok and result.execution_id
    execution = athena.get_query_execution(QueryExecutionId=result.execution_id)["QueryExecution"]
    assert scan_parameters(execution["Query"]) == []  # every :name outside comments became a ?
    assert execution["Query"] == to_positional(named["world_open_ingress"])[0]


class NamedQueries:
    """GetNamedQuery only: the report never lists the workgroup (ListNamedQueries is not even granted)."""

    def __init__(self, queries: dict[str, dict[str, Any]]) -> None:
        self.queries = queries
        self.asked: list[str] = []

    def get_named_query(self, NamedQueryId: str) -> dict[str, Any]:
        self.asked.append(NamedQueryId)
        if NamedQueryId not in self.queries:
            from botocore.exceptions import ClientError

            error = {"Error": {"Code": "InvalidRequestException", "Message": "NamedQuery not found"}}
            raise ClientError(error, "GetNamedQuery")
        return {"NamedQuery": self.queries[NamedQueryId]}


ID_A, ID_B, ID_C = (f"{n}" * 8 + "-1111-2222-3333-444455556666" for n in (1, 2, 3))


def test_each_deployed_query_is_read_by_its_id_and_refused_when_gone_moved_or_renamed() -> None:
    stub = NamedQueries(
        {
            ID_A: {"Name": "a_query", "WorkGroup": "wg", "QueryString": "SELECT 1"},
            ID_B: {"Name": "b_query", "WorkGroup": "primary", "QueryString": "SELECT 2"},
            ID_C: {"Name": "zz_cost_dump", "WorkGroup": "wg", "QueryString": "SELECT 3"},
        }
    )
    deployed = {"a_query": ID_A, "b_query": ID_B, "c_query": ID_C, "d_query": "9" * 8 + ID_A[8:]}
    queries = AthenaQueries("wg", "db", athena=stub, deployed=deployed)
    assert queries.named_queries() == {"a_query": "SELECT 1"}
    assert queries.named_queries() == {"a_query": "SELECT 1"} and len(stub.asked) == 4  # read once per invocation
    assert queries.refused == {
        "b_query": f"query b_query refused: named query {ID_B} is in workgroup 'primary', not 'wg'; deploy the stack "
        "again",
        "c_query": f"query c_query refused: named query {ID_C} is now called 'zz_cost_dump'; deploy the stack again",
        "d_query": f"query d_query refused: its deployed named query {'9' * 8 + ID_A[8:]} cannot be read "
        "(InvalidRequestException); deploy the stack again",
    }


def test_the_stack_s_list_of_queries_refuses_a_name_or_an_id_given_twice() -> None:
    from governor.audit.queries import deployed_variable, parse_deployed

    text = deployed_variable({"a_query": ID_A, "b_query": ID_B}) + f",a_query={ID_C},c_query={ID_B},bad name=x"
    deployed, refused = parse_deployed(text)
    assert deployed == {}
    assert set(refused) == {"a_query", "b_query", "c_query", "bad name"}
    assert "more than once" in refused["a_query"] and "more than once" in refused["c_query"]
    assert parse_deployed(deployed_variable({"a_query": ID_A})) == ({"a_query": ID_A}, {})
    assert parse_deployed(None) == ({}, {})


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
