"""Count what an invocation is billed for, from the calls it makes: every AWS API call through botocore (its request
and answer), the lines its logger and metrics write, and the CPU it spends itself.

AWS bills most of the governor's work per request, per item size or per metric, so a meter around botocore's
``_make_api_call`` sees everything a bill would: DynamoDB write and read request units from the size of each item
written or read (the documented rules: an item's size is its attribute names and values; a write costs one unit per
KB and one more per KB of the index entry it changes, a strongly consistent read one unit per 4 KB, an eventually
consistent one half), the metrics each ``GetMetricData`` requests, the entries each ``PutEvents`` sends, and which
calls are CloudTrail management events (the ones a trail records and a second trail bills). What the emulator does
with a request is its own CPU, not the function's: the time spent inside a call is left out of ``cpu_seconds``.
"""

from __future__ import annotations

import io
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from typing import Any

import botocore.client

#: Operations CloudTrail does not record as management events (data events, or not logged at all): item reads and
#: writes, object reads and writes, queue messages, bus events, metric data, Lambda invokes, log events.
DATA_OPERATIONS: dict[str, frozenset[str]] = {
    "dynamodb": frozenset(
        {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "BatchGetItem", "BatchWriteItem", "Query", "Scan"}
    ),
    "s3": frozenset({"GetObject", "PutObject", "HeadObject", "DeleteObject", "ListObjectsV2", "ListObjects"}),
    "sqs": frozenset({"SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch"}),
    "events": frozenset({"PutEvents"}),
    "cloudwatch": frozenset({"GetMetricData", "PutMetricData", "GetMetricStatistics", "ListMetrics"}),
    "lambda": frozenset({"Invoke"}),
    "logs": frozenset({"PutLogEvents"}),
}
#: Item size rules (DynamoDB Developer Guide, "Item sizes and formats"): a write unit per 1 KB, a read unit per 4 KB.
WRITE_UNIT = 1024
READ_UNIT = 4096
#: Storage is billed on the item's raw size plus 100 bytes of indexing overhead per item (table and each index).
ITEM_OVERHEAD = 100
#: The ledger's global secondary index (``by-kind``) is keyed on these; an item holding both has an index entry.
INDEX_KEYS = ("kind", "at")
KEY_NAMES = ("pk", "sk", "id")
#: EventBridge bills a ``PutEvents`` entry per 64 KB chunk; SQS a request per 64 KB chunk.
EVENT_CHUNK = 64 * 1024


def attribute_size(value: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for one attribute value in its wire form (``{"S": "..."}``, ``{"M": {...}}``)."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    return sum(len(str(v).encode()) for v in inner)  # SS, NS, BS


def item_size(item: Mapping[str, Any]) -> int:
    """An item's size: every attribute's name (UTF-8 bytes) and value."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def _key(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple((name, str(item[name])) for name in KEY_NAMES if name in item)


@dataclass
class Table:
    """What the meter knows of one table: the size of every item written, by key (to tell new items from
    overwrites, and to size an update or a delete)."""

    items: dict[tuple[Any, ...], int] = field(default_factory=dict)


@dataclass
class Meter:
    """Billable units of the calls made while :meth:`counting`; see the module docstring for the rules."""

    units: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: Counter[str] = field(default_factory=Counter)
    metric_names: set[str] = field(default_factory=set)
    published: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    active: bool = False
    _inside: float = 0.0

    def reset(self) -> None:
        """Forget the last invocation's units; the metric names seen stay (a world's functions publish them all)."""
        self.units.clear()
        self.calls.clear()
        self.published.clear()

    # -- botocore ---------------------------------------------------------------------------------------------------

    @contextmanager
    def installed(self) -> Iterator[Meter]:
        """Wrap botocore's ``_make_api_call`` for the duration: every call is seen (DynamoDB items are tracked even
        while not counting, so a later overwrite is known as one)."""
        original = botocore.client.BaseClient._make_api_call
        meter = self

        def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            began = time.process_time()
            response: Any = None
            try:
                response = original(client, operation, params)
                return response
            finally:
                meter._inside += time.process_time() - began
                meter.seen(client.meta.service_model.service_name, operation, params, response)

        botocore.client.BaseClient._make_api_call = call
        try:
            yield self
        finally:
            botocore.client.BaseClient._make_api_call = original

    def seen(self, service: str, operation: str, params: Mapping[str, Any], response: Any) -> None:
        """One API call: DynamoDB items are always tracked; units only while counting."""
        counting = self.active
        if service == "dynamodb":
            self._dynamodb(operation, params, response or {}, counting)
        if not counting:
            return
        self.calls[f"{service}.{operation}"] += 1
        self.units["aws_calls"] += 1
        if operation not in DATA_OPERATIONS.get(service, frozenset()):
            self.units["management_events"] += 1
        self._service_units(service, operation, params)

    def _service_units(self, service: str, operation: str, params: Mapping[str, Any]) -> None:
        if service == "cloudwatch" and operation == "GetMetricData":
            self.units["getmetricdata_metrics"] += len(params.get("MetricDataQueries", []))
        elif service == "events" and operation == "PutEvents":
            for entry in params.get("Entries", []):
                size = len(str(entry.get("Detail", "")).encode())
                self.units["events_put"] += max(1, math.ceil(size / EVENT_CHUNK))
                self.units["events_bytes"] += size
                self.published.append(dict(entry))
        elif service == "sqs":
            self.units["sqs_requests"] += 1
        elif service == "secretsmanager":
            self.units["secrets_requests"] += 1
        elif service == "kms":
            self.units["kms_requests"] += 1
        elif service == "s3" and operation == "PutObject":
            body = params.get("Body", b"")
            self.units["s3_put"] += 1
            self.units["s3_new_bytes"] += len(body if isinstance(body, bytes) else str(body).encode())
        elif service == "s3" and operation in ("GetObject", "HeadObject", "ListObjectsV2"):
            self.units["s3_get"] += 1
        elif service == "athena" and operation == "StartQueryExecution":
            self.units["athena_queries"] += 1
        elif service == "securityhub" and operation == "BatchImportFindings":
            self.units["securityhub_findings"] += len(params.get("Findings", []))

    # -- DynamoDB ---------------------------------------------------------------------------------------------------

    def _dynamodb(self, operation: str, params: Mapping[str, Any], response: Mapping[str, Any], counting: bool) -> None:
        if operation == "BatchWriteItem":
            for name, requests in params.get("RequestItems", {}).items():
                for request in requests:
                    if "PutRequest" in request:
                        self._write(name, request["PutRequest"]["Item"], counting)
                    else:
                        self._delete(name, request["DeleteRequest"]["Key"], counting)
        elif operation == "PutItem":
            self._write(params["TableName"], params["Item"], counting)
        elif operation == "UpdateItem":
            self._update(params["TableName"], params["Key"], counting)
        elif operation == "DeleteItem":
            self._delete(params["TableName"], params["Key"], counting)
        elif counting:
            self._read(operation, params, response)

    def _table(self, name: str) -> Table:
        return self.tables.setdefault(name, Table())

    def _write(self, name: str, item: Mapping[str, Any], counting: bool) -> None:
        table = self._table(name)
        size = item_size(item)
        key = _key(item)
        before = table.items.get(key)
        table.items[key] = size
        if not counting:
            return
        units = max(1, math.ceil(size / WRITE_UNIT))
        self.units["dynamodb_wru"] += units
        indexed = all(k in item for k in INDEX_KEYS)
        if indexed:  # the index entry is written too; replacing one (its ``at`` changes) deletes the old entry first
            self.units["dynamodb_wru"] += units * (2 if before is not None else 1)
        if before is None:
            prefix = "ledger" if "pk" in item else "idempotency"
            self.units[f"{prefix}_new_bytes"] += size + ITEM_OVERHEAD
            if indexed:
                self.units[f"{prefix}_index_new_bytes"] += size + ITEM_OVERHEAD
            if "pk" in item:
                kind = str(item.get("kind", {}).get("S", "?"))
                self.units[f"ledger_items.{kind}"] += 1
                self.units[f"ledger_bytes.{kind}"] += size

    def _update(self, name: str, key: Mapping[str, Any], counting: bool) -> None:
        size = self._table(name).items.get(_key(key), WRITE_UNIT)
        if counting:
            self.units["dynamodb_wru"] += max(1, math.ceil(size / WRITE_UNIT))

    def _delete(self, name: str, key: Mapping[str, Any], counting: bool) -> None:
        size = self._table(name).items.pop(_key(key), WRITE_UNIT)
        if counting:
            self.units["dynamodb_wru"] += max(1, math.ceil(size / WRITE_UNIT))

    def _read(self, operation: str, params: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        if operation == "GetItem":
            found = response.get("Item")
            units = math.ceil(item_size(found) / READ_UNIT) if found else 1
            self.units["dynamodb_rru"] += max(1, units) * (1.0 if params.get("ConsistentRead") else 0.5)
        elif operation == "BatchGetItem":
            for name, request in params.get("RequestItems", {}).items():
                rows = response.get("Responses", {}).get(name, [])
                sizes = {_key(row): item_size(self._full(name, row)) for row in rows}
                share = 1.0 if request.get("ConsistentRead") else 0.5
                for key in request.get("Keys", []):
                    size = sizes.get(_key(key), 0)
                    self.units["dynamodb_rru"] += max(1, math.ceil(size / READ_UNIT)) * share
        elif operation in ("Query", "Scan"):
            read = sum(item_size(row) for row in response.get("Items", []))
            half = 1.0 if params.get("ConsistentRead") else 0.5
            paged = max(1, math.ceil(read / READ_UNIT)) * half
            self.units["dynamodb_rru"] += paged
            self.units[f"dynamodb_query_rru.{params.get('IndexName', 'table')}"] += paged

    def _full(self, name: str, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """A projected row read back (``pk, sk, verdict``) is billed at the whole item's size: the size written."""
        size = self._table(name).items.get(_key(row))
        return {"_": {"B": b"x" * size}} if size is not None else row

    # -- the invocation ---------------------------------------------------------------------------------------------

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count one invocation: its calls, its own CPU (calls excluded) and what it prints (log lines, EMF)."""
        from governor.observability import logger

        handler = logger.registered_handler
        captured = io.StringIO()
        saved = handler.stream  # type: ignore[attr-defined]
        handler.stream = captured  # type: ignore[attr-defined]
        self._inside = 0.0
        self.active = True
        began = time.process_time()
        try:
            with redirect_stdout(captured):
                yield
        finally:
            self.active = False
            handler.stream = saved  # type: ignore[attr-defined]
            self.units["cpu_seconds"] += max(0.0, time.process_time() - began - self._inside)
            self.units["invocations"] += 1
            self._logged(captured.getvalue())

    def _logged(self, text: str) -> None:
        import json

        for line in text.splitlines():
            if not line.strip():
                continue
            self.units["log_lines"] += 1
            self.units["log_bytes"] += len(line.encode()) + 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            for directive in (record.get("_aws") or {}).get("CloudWatchMetrics", []):
                self.units["emf_records"] += 1
                for metric in directive.get("Metrics", []):
                    dims = ",".join(sorted(d for group in directive.get("Dimensions", []) for d in group))
                    self.metric_names.add(f"{directive.get('Namespace')}/{metric.get('Name')}[{dims}]")
