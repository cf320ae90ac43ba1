"""Athena: run a library query with its time range, wait with backoff, page through the rows.

Failures never raise: a failed, cancelled (the workgroup's bytes-scanned cutoff included) or timed-out query comes
back as an :class:`AthenaResult` with ``ok`` false and a reason, which the report turns into a finding.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
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
        "athena:ListNamedQueries",
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

    @property
    def ok(self) -> bool:
        return self.state == "SUCCEEDED"

    def as_result(self) -> dict[str, Any]:
        """The same ``{"count", "rows"}`` shape the local engine returns."""
        return {"count": len(self.rows), "rows": self.rows}

    def problem(self) -> str | None:
        """A one-line description of a failure for a finding, ``None`` when the query succeeded."""
        if self.ok:
            return None
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
        max_rows: int = 50_000,
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

    def named_queries(self) -> dict[str, str]:
        """The workgroup's named queries (the deployed ``queries/*.sql``): name -> SQL."""
        ids: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"WorkGroup": self.workgroup, "MaxResults": 50}
            if token:
                kwargs["NextToken"] = token
            page = self._call("list_named_queries", **kwargs)
            ids.extend(page.get("NamedQueryIds", []))
            token = page.get("NextToken")
            if not token:
                break
        found: dict[str, str] = {}
        for query_id in ids:
            query = self._call("get_named_query", NamedQueryId=query_id)["NamedQuery"]
            found[query["Name"]] = query["QueryString"]
        return found

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
            name, state, rows=rows, execution_id=execution_id, bytes_scanned=scanned, truncated=truncated
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
        """Every result row (GetQueryResults pages via NextToken); the header row of the first page is dropped."""
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
                rows.append({name: _convert(value, kind) for (name, kind), value in zip(columns, cells, strict=False)})
                if len(rows) >= self.max_rows:
                    return rows, True
            token = page.get("NextToken")
            if not token:
                return rows, False
