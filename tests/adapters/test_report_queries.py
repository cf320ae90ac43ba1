"""The report function on moto: it runs the query library shipped with its code, never SQL read back from the
workgroup, and never uses a truncated Athena answer as if it were whole (issues 45.6 and 46.5).

moto runs no SQL: ``GetQueryResults`` answers from a queue of canned results (moto's ``query_results_queue``, what its
``/moto-api/static/athena/query-results`` endpoint fills), one per query execution in the order they start.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.athena.models import QueryResults, athena_backends
from moto.core import DEFAULT_ACCOUNT_ID

from governor.audit.queries import console_form, list_queries, to_positional
from governor.policy import parse_policy
from governor.report import handler as report
from governor.report.athena import AthenaQueries
from governor.report.handler import Adapters, handle
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_costs_would_reclaim import DAY, INSTANCE, PRICE, _day
from tests.unit.test_report_handler import RUN_AT, FakeArchive, FakeChart, FakeOutbox, scheduled

REGION = "us-east-1"
WORKGROUP = "GpuFleetGovernor-audit"
DATABASE = "gpufleetgovernor_audit"
BUCKET = "governor-reports"
PLANTED = "SELECT line_item_resource_id, line_item_unblended_cost FROM cur.cur2 -- planted"
PREFIX = "reports/daily/2023-07-10/"
#: The daily report run at RUN_AT: the period (2023-07-10) and the one before, as ExecutionParameters.
PERIODS = (
    ["'2023-07-10T00:00:00Z'", "'2023-07-11T00:00:00Z'"],
    ["'2023-07-09T00:00:00Z'", "'2023-07-10T00:00:00Z'"],
)
#: What the report may never call: it reads no SQL from the workgroup.
NAMED_QUERY_READS = {"GetNamedQuery", "ListNamedQueries", "BatchGetNamedQuery"}


def canned(columns: list[str], rows: list[list[str]]) -> None:
    """The next query execution's answer, as Athena gives it: the header row first, every value as text."""
    info = [{"Name": name, "Type": "varchar"} for name in columns]
    data = [{"Data": [{"VarCharValue": value} for value in row]} for row in [columns, *rows]]
    athena_backends[DEFAULT_ACCOUNT_ID][REGION].query_results_queue.append(QueryResults(data, info))


def executions() -> list[dict[str, Any]]:
    """Every query execution the report started in the workgroup, as GetQueryExecution returns it."""
    athena = boto3.client("athena", region_name=REGION)
    ids = athena.list_query_executions(WorkGroup=WORKGROUP)["QueryExecutionIds"]
    return [athena.get_query_execution(QueryExecutionId=i)["QueryExecution"] for i in ids]


def executed() -> list[str]:
    """The SQL of every query the report started in the workgroup."""
    return [execution["Query"] for execution in executions()]


def shipped_executions() -> Counter[tuple[str, tuple[str, ...]]]:
    """What the report must start: each shipped file's SQL with its ``:name`` parameters as ``?`` and their values,
    for the period and the one before; nothing else."""
    expected: Counter[tuple[str, tuple[str, ...]]] = Counter()
    for spec in list_queries():
        statement, names = to_positional(spec.sql)
        for period in PERIODS:
            expected[(statement, tuple(period[0] if name == "start" else period[1] for name in names))] += 1
    return expected


def archived_report() -> dict[str, Any]:
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=PREFIX + "report.json")["Body"]
    report_json: dict[str, Any] = json.loads(body.read())
    return report_json


def runtime(policy: dict[str, Any] | None = None) -> Runtime:
    return Runtime(
        policy=parse_policy({"reports": {"enforce": False}, **(policy or {})}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


@pytest.fixture
def lake(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The audit lake as the stack deploys it (the workgroup, one named query per shipped file, for the console) and
    the report function's environment as the stack writes it; yields the named queries' ``{name: id}``."""
    with mock_aws():
        athena = boto3.client("athena", region_name=REGION)
        athena.create_work_group(
            Name=WORKGROUP, Configuration={"ResultConfiguration": {"OutputLocation": "s3://results/"}}
        )
        ids = {
            spec.name: athena.create_named_query(
                Name=spec.name, Database=DATABASE, QueryString=console_form(spec.sql), WorkGroup=WORKGROUP
            )["NamedQueryId"]
            for spec in list_queries()
        }
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        monkeypatch.setenv("REPORTS_BUCKET", BUCKET)
        monkeypatch.setenv("ATHENA_WORKGROUP", WORKGROUP)
        monkeypatch.setenv("ATHENA_DATABASE", DATABASE)
        report._environment.cache_clear()
        report._aws.cache_clear()
        try:
            yield ids
        finally:
            report._environment.cache_clear()
            report._aws.cache_clear()


def calls_of_the_report() -> list[str]:
    """The Athena operations the report's own client makes from now on (botocore's before-call event)."""
    called: list[str] = []
    client = report._aws(REGION, None).queries.athena  # type: ignore[attr-defined]
    client.meta.events.register("before-call.athena.*", lambda model, **_: called.append(model.name))
    return called


def test_a_query_planted_in_the_workgroup_never_runs_and_its_rows_never_reach_the_report(
    lake: dict[str, str],
) -> None:
    """Someone with athena:CreateNamedQuery adds ``zz_cost_dump`` and a second ``world_open_ingress``: the report runs
    the twenty shipped queries and neither of theirs, and never reads the workgroup's named queries."""
    athena = boto3.client("athena", region_name=REGION)
    for name in ("zz_cost_dump", "world_open_ingress"):
        athena.create_named_query(Name=name, Database=DATABASE, QueryString=PLANTED, WorkGroup=WORKGROUP)
    called = calls_of_the_report()
    result = handle(scheduled(), runtime(), now=RUN_AT)
    assert result["status"] == "archived" and result["query_errors"] == []
    ran = executed()
    assert PLANTED not in ran
    assert len(ran) == 2 * len(lake)  # each shipped query, for the period and the one before
    names = {query["name"] for query in archived_report()["security"]}
    assert "zz_cost_dump" not in names and "world_open_ingress" in names
    assert set(called) & NAMED_QUERY_READS == set() and "StartQueryExecution" in called


def test_a_deployed_query_changed_in_place_never_runs_the_report_runs_the_sql_it_shipped_with(
    lake: dict[str, str],
) -> None:
    """athena:UpdateNamedQuery (which moto lacks: its backend is changed directly) rewrote a deployed query's SQL in
    place, keeping its id, name and workgroup: the report still starts exactly the shipped files' SQL, with their
    parameters (moto answers from canned results, not by running SQL: which SQL starts is what decides the rows)."""
    backend = athena_backends[DEFAULT_ACCOUNT_ID][REGION]
    for query_id in (lake["world_open_ingress"], lake["root_account_usage"]):
        backend.named_queries[query_id].query_string = PLANTED
    result = handle(scheduled(), runtime(), now=RUN_AT)
    assert result["status"] == "archived"
    started = Counter(
        (execution["Query"], tuple(execution.get("ExecutionParameters", []))) for execution in executions()
    )
    assert started == shipped_executions()
    assert PLANTED not in executed()
    assert all(execution["WorkGroup"] == WORKGROUP for execution in executions())


def test_a_shipped_query_file_that_does_not_parse_is_refused_and_said_so_the_others_run(
    lake: dict[str, str], tmp_path: Any
) -> None:
    """A library file with a broken header (a build that shipped one): that query is refused, named in the report
    and raised as a finding; the others run."""
    library = tmp_path / "sql"
    library.mkdir()
    for spec in list_queries():
        text = spec.sql if spec.name != "root_account_usage" else spec.sql.replace("-- name:", "-- nom:")
        (library / spec.path.name).write_text(text, encoding="utf-8")
    report._aws(REGION, None).queries.queries_dir = library  # type: ignore[attr-defined]
    rt = runtime()
    result = handle(scheduled(), rt, now=RUN_AT)
    assert result["query_errors"] == ["root_account_usage"]
    assert len(executed()) == 2 * (len(lake) - 1)
    shown = {query["name"]: query for query in archived_report()["security"]}
    assert shown["root_account_usage"]["error"].startswith("query root_account_usage refused: ")
    assert "no '-- name:' line" in shown["root_account_usage"]["error"]
    assert isinstance(rt.sink, MemorySink)
    (finding,) = [f for f in rt.sink.findings if f.resource == "athena:root_account_usage"]
    assert finding.title == "Audit query root_account_usage was refused for the daily report"


# --- truncated answers --------------------------------------------------------------------------------------------
CUR_COLUMNS = [
    "instance_id",
    "instance_type",
    "hours",
    "effective_cost",
    "savings_plan_hours",
    "reserved_hours",
    "pricing_terms",
]
CUR_POLICY: dict[str, Any] = {
    "pricing": {
        "effective_rates": "cur",
        "cur": {"database": "billing", "table": "cur2", "bucket": "billing-exports", "prefix": "cur2"},
    }
}


def test_a_cur_answer_longer_than_the_report_reads_is_refused_with_a_note_never_priced_from_part_of_it() -> None:
    """The instance past the last row read was priced at its type's average of the rows read (the Savings Plan rate
    of the others, instead of its own On-Demand price); the report now refuses the partial answer, says so, and prices
    from the next source."""
    with mock_aws():
        athena = boto3.client("athena", region_name=REGION)
        athena.create_work_group(
            Name=WORKGROUP, Configuration={"ResultConfiguration": {"OutputLocation": "s3://results/"}}
        )
        rows = [[f"i-0{n:016x}", "g5.12xlarge", "10", "34.0", "10", "0", "SavingsPlan"] for n in range(4)]
        rows.append([INSTANCE.id, "g5.12xlarge", "10", str(10 * PRICE), "0", "0", "OnDemand"])  # row 5 of 5
        for _ in range(2 * len(list_queries())):  # the shipped audit queries start first, for both periods
            canned(["eventid"], [])
        canned(CUR_COLUMNS, rows)
        queries = AthenaQueries(WORKGROUP, DATABASE, athena=athena, max_rows=4, sleep=lambda _: None)
        aws = Adapters(queries=queries, chart=FakeChart(), archive=FakeArchive(), outbox=FakeOutbox())
        rt = runtime(CUR_POLICY)
        for n, item in enumerate(_day(enforce=False)):
            rt.ledger.put_item(item["kind"], f"k{n}", item)
        run_at = (DAY + dt.timedelta(days=1, hours=7)).isoformat()
        handle(events.scheduled({"kind": "daily"}, event_id="sched-cur", time=run_at), rt, aws, now=DAY)
        stored = json.loads(aws.archive.objects[f"reports/daily/{DAY:%Y-%m-%d}/report.json"][0])  # type: ignore[attr-defined]
    cost = stored["cost"]
    # idle from 02:30 (warned at 02:00, 30 minutes' warning) to the end of the day: 21.5 hours the policy would reclaim
    assert "CUR" not in cost["price_sources"]["g5.12xlarge"]  # not "CUR 2.0 (billing.cur2), ... g5.12xlarge average"
    assert cost["would_save_usd"] == round(21.5 * PRICE, 2)  # its own price, not the $3.40 of the rows read
    notes = " ".join(stored["notes"] + cost["notes"])
    assert "query effective_rates_cur returned more than 4 rows, the most the report reads" in notes
    assert "Traceback" not in notes


def test_an_audit_answer_longer_than_the_report_reads_is_refused_not_counted_short(lake: dict[str, str]) -> None:
    """An audit query's partial answer showed its count as the row limit; it is refused with the reason instead. The
    first query to start (access_key_events, in name order) gets six rows; the report reads at most five here."""
    canned(["eventid", "eventname"], [[f"e{n}", "CreateAccessKey"] for n in range(6)])
    report._aws(REGION, None).queries.max_rows = 5  # type: ignore[attr-defined]
    result = handle(scheduled(), runtime(), now=RUN_AT)
    shown = {query["name"]: query for query in archived_report()["security"]}
    assert shown["access_key_events"]["count"] == 0
    assert shown["access_key_events"]["error"].startswith("query access_key_events returned more than 5 rows")
    assert result["query_errors"] == ["access_key_events"]


def test_an_answer_of_exactly_the_limit_is_whole_and_used() -> None:
    with mock_aws():
        athena = boto3.client("athena", region_name=REGION)
        athena.create_work_group(
            Name=WORKGROUP, Configuration={"ResultConfiguration": {"OutputLocation": "s3://results/"}}
        )
        canned(["eventid"], [[f"e{n}"] for n in range(5)])
        queries = AthenaQueries(WORKGROUP, DATABASE, athena=athena, max_rows=5, sleep=lambda _: None)
        period = {"start": "2023-07-10", "end": "2023-07-11"}
        result = queries.run("q", "SELECT eventid FROM t WHERE eventtime >= :start AND eventtime < :end", period)
    assert result.ok and len(result.rows) == 5 and result.problem() is None
