"""Athena: run a library query with its time range, wait with backoff, page through the rows.

Failures never raise: a failed, cancelled (the workgroup's bytes-scanned cutoff included) or timed-out query comes
back as an :class:`AthenaResult` with ``ok`` false and a reason, which the report turns into a finding. So does an
answer longer than :data:`MAX_ROWS`: a partial answer is never used as if it were whole.

The SQL the report runs is the query library shipped with its code (``governor/audit/sql/*.sql``,
:data:`governor.audit.queries.QUERIES_DIR`), started with StartQueryExecution as a query string: the named queries the
stack also creates are for operators' console, and the report never reads them. Anyone with ``athena:CreateNamedQuery``
could add one to the workgroup, or one with a deployed query's name, and anyone with ``athena:UpdateNamedQuery`` could
change a deployed one's SQL in place; reading them back would run that SQL with the report's role and put its rows in
the report.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from governor.adapters.aws import client
from governor.audit.queries import QUERIES_DIR, QueryError, iso, parse_query, parse_time, positional

IAM_ACTIONS = frozenset(
    {
        "athena:StartQueryExecution",
        "athena:GetQueryExecution",
        "athena:GetQueryResults",
        "athena:StopQueryExecution",
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
        queries_dir: Path = QUERIES_DIR,
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
        self.queries_dir = queries_dir
        self._sql: dict[str, str] | None = None
        #: Shipped queries that will not run, and why in the report's words (filled by :meth:`library`).
        self.refused: dict[str, str] = {}

    def library(self) -> dict[str, str]:
        """The query library shipped with this code, name -> SQL: the only SQL the report runs (read once: the files
        are part of the deployed code). A file that does not parse is refused, named in the report, rather than
        stopping the others."""
        if self._sql is None:
            self._sql = {}
            files = sorted(self.queries_dir.glob("*.sql"))
            if not files:
                self.refused["query_library"] = (
                    f"the query library {self.queries_dir} holds no .sql file: the code asset was built without it"
                )
            for path in files:
                try:
                    spec = parse_query(path)
                except QueryError as error:
                    self.refused[path.stem] = f"query {path.stem} refused: {error}"
                    continue
                self._sql[spec.name] = spec.sql
        return dict(self._sql)

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
