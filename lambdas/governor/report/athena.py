"""Athena: run a library query with its time range, wait with backoff, page through the rows.

Failures never raise: a failed, cancelled (the workgroup's bytes-scanned cutoff included) or timed-out query comes
back as an :class:`AthenaResult` with ``ok`` false and a reason, which the report turns into a finding. So does an
answer longer than :data:`MAX_ROWS`: a partial answer is never used as if it were whole.

Only the named queries the stack deployed run, each read by its id (``ATHENA_QUERIES``: ``name=id`` pairs the stack
writes, ``audit.queries.deployed_variable``): anyone with ``athena:CreateNamedQuery`` can add a query to the
workgroup, or one with a deployed query's name, and listing the workgroup would run it with the report's role and
put its rows in the report.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from governor.adapters.aws import client
from governor.audit.queries import iso, parse_time, positional

IAM_ACTIONS = frozenset(
    {
        "athena:StartQueryExecution",
        "athena:GetQueryExecution",
        "athena:GetQueryResults",
        "athena:StopQueryExecution",
        "athena:GetNamedQuery",
    }
)
# Athena reads the table and writes results with the caller's permissions: these are needed on the lake's resources.
DATA_ACTIONS = frozenset(
    {
        "glue:GetDatabase",
        "glue:GetTable",
        "glue:GetPartition",
        "glue:GetPartitions",
        "s3:GetObject",
        "s3:ListBucket",
        "s3:GetBucketLocation",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }
)
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_CUTOFF = re.compile(r"bytes.scanned|data.?scanned|scan(ned)? limit|data usage limit|exceeded.*limit", re.IGNORECASE)
_INTEGER = frozenset({"tinyint", "smallint", "integer", "int", "bigint"})
_FLOAT = frozenset({"double", "float", "real", "decimal"})
#: The most rows the report reads of one answer (GetQueryResults pages of 1,000, followed with NextToken to the end):
#: a longer answer is refused whole, with a note, rather than used in part.
MAX_ROWS = 50_000


@dataclass
class AthenaResult:
    """One query's outcome: rows on success, otherwise the state and the reason (``bytes_cutoff`` for the limit)."""

    name: str
    state: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    execution_id: str | None = None
    reason: str | None = None
    bytes_scanned: int | None = None
    bytes_cutoff: bool = False
    truncated: bool = False
    #: The most rows read (``truncated``: the answer had more, so none of it is used).
    row_limit: int = MAX_ROWS

    @property
    def ok(self) -> bool:
        """Succeeded and read whole: a truncated answer is not ok (its counts and rates would be wrong)."""
        return self.state == "SUCCEEDED" and not self.truncated

    def as_result(self) -> dict[str, Any]:
        """The same ``{"count", "rows"}`` shape the local engine returns."""
        return {"count": len(self.rows), "rows": self.rows}

    def problem(self) -> str | None:
        """A one-line description of a failure for a finding, ``None`` when the query succeeded."""
        if self.ok:
            return None
        if self.truncated:
            return (
                f"query {self.name} returned more than {self.row_limit:,} rows, the most the report reads: its answer "
                "is not used (a part of it would give wrong counts and prices); narrow the period or the query"
            )
        if self.bytes_cutoff:
            return (
                f"query {self.name} stopped at the workgroup's bytes-scanned limit "
                f"({self.bytes_scanned or 0} bytes scanned): narrow the range or raise "
                "audit.bytes_scanned_cutoff_per_query"
            )
        return f"query {self.name} {self.state.lower()}: {self.reason or 'no reason given'}"


def _convert(value: str | None, kind: str) -> Any:
    if value is None:
        return None
    base = kind.lower().split("(")[0]
    try:
        if base in _INTEGER:
            return int(value)
        if base in _FLOAT:
            return float(value)
    except ValueError:
        return value
    if base == "boolean":
        return value.lower() == "true"
    return value


class AthenaQueries:
    """Runs library SQL in the audit workgroup; ``sleep`` and ``clock`` are injectable so tests never wait."""

    IAM_ACTIONS = IAM_ACTIONS

    def __init__(
        self,
        workgroup: str,
        database: str,
        *,
        region: str | None = None,
        athena: Any | None = None,
        bytes_cutoff: int | None = None,
        timeout_seconds: float = 240.0,
        first_delay: float = 0.5,
        max_delay: float = 5.0,
        max_rows: int = MAX_ROWS,
        deployed: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.workgroup = workgroup
        self.database = database
        self.athena = athena or client("athena", region)
        self.bytes_cutoff = bytes_cutoff
        self.timeout_seconds = timeout_seconds
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.max_rows = max_rows
        self._sleep = sleep
        self._clock = clock
        self.api_calls = 0
        self._deployed = dict(deployed or {})
        self._sql: dict[str, str] | None = None
        #: Deployed queries that will not run, and why in the report's words (filled by :meth:`named_queries`).
        self.refused: dict[str, str] = {}

    def named_queries(self) -> dict[str, str]:
        """The deployed ``queries/*.sql``, name -> SQL: each read by the id the stack gave it, never by listing the
        workgroup, and run only if it still has its name and lives in this workgroup (read once per invocation)."""
        if self._sql is None:
            self._sql = {}
            for name, query_id in sorted(self._deployed.items()):
                try:
                    query = self._call("get_named_query", NamedQueryId=query_id)["NamedQuery"]
                except (ClientError, BotoCoreError) as error:
                    code = error.response.get("Error", {}).get("Code") if isinstance(error, ClientError) else None
                    self.refused[name] = (
                        f"query {name} refused: its deployed named query {query_id} cannot be read "
                        f"({code or error.__class__.__name__}); deploy the stack again"
                    )
                    continue
                problem = self._changed(name, query_id, query)
                if problem:
                    self.refused[name] = f"query {name} refused: {problem}; deploy the stack again"
                else:
                    self._sql[name] = str(query["QueryString"])
        return dict(self._sql)

    def _changed(self, name: str, query_id: str, query: Mapping[str, Any]) -> str | None:
        """How the named query ``query_id`` no longer is the one the stack deployed as ``name``, if it is not."""
        if query.get("WorkGroup") != self.workgroup:
            return f"named query {query_id} is in workgroup {query.get('WorkGroup')!r}, not {self.workgroup!r}"
        if query.get("Name") != name:
            return f"named query {query_id} is now called {query.get('Name')!r}"
        if not isinstance(query.get("QueryString"), str):
            return f"named query {query_id} holds no SQL"
        return None

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> AthenaResult:
        """Start ``sql`` with its ``:name`` parameters as execution parameters, wait for it, read every row."""
        statement, names = positional(sql)
        try:
            values = [f"'{iso(parse_time(parameters[p]))}'" for p in names]
        except KeyError as missing:
            return AthenaResult(name, "FAILED", reason=f"no value for parameter :{missing.args[0]}")
        kwargs: dict[str, Any] = {
            "QueryString": statement,
            "QueryExecutionContext": {"Database": self.database},
            "WorkGroup": self.workgroup,
        }
        if values:
            kwargs["ExecutionParameters"] = values
        try:
            execution_id = self._call("start_query_execution", **kwargs)["QueryExecutionId"]
            execution = self._wait(execution_id)
        except (ClientError, BotoCoreError) as error:
            return AthenaResult(name, "FAILED", reason=f"{error.__class__.__name__}: {error}")
        if execution is None:
            self._stop(execution_id)
            return AthenaResult(
                name, "TIMEOUT", execution_id=execution_id, reason=f"still running after {self.timeout_seconds:.0f}s"
            )
        status = execution.get("Status", {})
        state = status.get("State", "FAILED")
        scanned = execution.get("Statistics", {}).get("DataScannedInBytes")
        if state != "SUCCEEDED":
            reason = status.get("StateChangeReason") or status.get("AthenaError", {}).get("ErrorMessage")
            cutoff = state == "CANCELLED" and (
                bool(reason and _CUTOFF.search(reason))
                or (self.bytes_cutoff is not None and scanned is not None and scanned >= self.bytes_cutoff)
            )
            return AthenaResult(
                name, state, execution_id=execution_id, reason=reason, bytes_scanned=scanned, bytes_cutoff=cutoff
            )
        try:
            rows, truncated = self._rows(execution_id)
        except (ClientError, BotoCoreError) as error:
            return AthenaResult(name, "FAILED", execution_id=execution_id, reason=f"reading results: {error}")
        return AthenaResult(
            name,
            state,
            rows=[] if truncated else rows,
            execution_id=execution_id,
            bytes_scanned=scanned,
            truncated=truncated,
            row_limit=self.max_rows,
        )

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        self.api_calls += 1
        response: dict[str, Any] = getattr(self.athena, operation)(**kwargs)
        return response

    def _wait(self, execution_id: str) -> dict[str, Any] | None:
        """Poll with exponential backoff (capped) until the query ends; ``None`` when the timeout passes first."""
        deadline = self._clock() + self.timeout_seconds
        delay = self.first_delay
        while True:
            execution: dict[str, Any] = self._call("get_query_execution", QueryExecutionId=execution_id)[
                "QueryExecution"
            ]
            if execution.get("Status", {}).get("State") in TERMINAL:
                return execution
            if self._clock() + delay > deadline:
                return None
            self._sleep(delay)
            delay = min(delay * 2, self.max_delay)

    def _stop(self, execution_id: str) -> None:
        try:
            self._call("stop_query_execution", QueryExecutionId=execution_id)
        except (ClientError, BotoCoreError):
            return

    def _rows(self, execution_id: str) -> tuple[list[dict[str, Any]], bool]:
        """Every result row (GetQueryResults pages via NextToken, to the last page); the header row of the first page
        is dropped. ``True`` when the answer holds more than ``max_rows`` rows: reading stops there."""
        rows: list[dict[str, Any]] = []
        token: str | None = None
        columns: list[tuple[str, str]] = []
        first = True
        while True:
            kwargs: dict[str, Any] = {"QueryExecutionId": execution_id, "MaxResults": 1000}
            if token:
                kwargs["NextToken"] = token
            page = self._call("get_query_results", **kwargs)
            result_set = page.get("ResultSet", {})
            if not columns:
                columns = [
                    (info["Name"], info.get("Type", "varchar"))
                    for info in result_set.get("ResultSetMetadata", {}).get("ColumnInfo", [])
                ]
            data = result_set.get("Rows", [])
            if (
                first
                and data
                and [cell.get("VarCharValue") for cell in data[0].get("Data", [])] == [name for name, _ in columns]
            ):
                data = data[1:]
            first = False
            for row in data:
                cells = [cell.get("VarCharValue") for cell in row.get("Data", [])]
                if len(rows) == self.max_rows:
                    return rows, True
                rows.append({name: _convert(value, kind) for (name, kind), value in zip(columns, cells, strict=False)})
            token = page.get("NextToken")
            if not token:
                return rows, False
