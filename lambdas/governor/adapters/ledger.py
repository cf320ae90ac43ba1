"""The decision ledger on DynamoDB: one item per decision, plus small keyed items (marks, sessions, records).

Keys are deterministic, so a retried delivery of the same event overwrites its own entry instead of adding one.
Layout: ``pk`` / ``sk``; the ``by-kind`` index (``kind``, ``at``) serves the reports' period queries, and the sparse
``by-target`` index (``target``, ``kind``) one organisation target's own state (marks, outbox, act records): only the
items a target's sweep writes carry ``target`` (``account#region``, stamped by ``fanout.TargetLedger``), so a target
reads its own few items instead of every item of the kind in the organisation.
A sweep records thousands of decisions at once through :meth:`DynamoLedger.record_many`, and its unconditional keyed
items (marks, outbox entries, action outcomes) through :meth:`DynamoLedger.put_many` / :meth:`DynamoLedger.get_many`:
``BatchWriteItem`` (25 items a request) and ``BatchGetItem`` (100 keys), unprocessed items retried with capped
exponential backoff and jitter, as AWS asks of batch callers.
The adapter speaks to the low-level client (the shared one from ``adapters.aws``); ``boto3.resource`` would build a
second resource model on the cold start for nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.domain.decision import Decision
from governor.domain.ports import event_origin

IAM_ACTIONS = frozenset(
    {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem"}
)
KIND_INDEX = "by-kind"
TARGET_INDEX = "by-target"
BATCH_WRITE_ITEMS = 25  # BatchWriteItem's limit per request
BATCH_GET_KEYS = 100  # BatchGetItem's limit per request
BATCH_ATTEMPTS = 8  # a request plus retries of what DynamoDB left unprocessed
BACKOFF_BASE = 0.05
BACKOFF_CAP = 5.0


class UnprocessedItemsError(RuntimeError):
    """DynamoDB still had unprocessed items after every retry; the sweep fails so Lambda retries it."""


def _wire(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer  # boto3 itself is imported with the first client

    serializer = TypeSerializer()
    return {k: serializer.serialize(v) for k, v in item.items()}


def _unwire(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {k: deserializer.deserialize(v) for k, v in item.items()}


def _backoff(attempt: int) -> float:
    """Full jitter: a random wait up to base * 2^attempt, capped (AWS Architecture Blog, "Exponential Backoff")."""
    return random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt))


def _to_dynamo(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str), parse_float=Decimal)


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def decision_key(decision: Decision, event_id: str) -> tuple[str, str]:
    return f"decision#{decision.resource}", f"{decision.policy}#{event_id}"


class DynamoLedger:
    """Implements ``domain.ports.Ledger`` on the ledger table."""

    def __init__(
        self,
        table_name: str,
        retention_days: int = 400,
        region: str | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client("dynamodb", region)
        self._name = table_name
        self._retention = dt.timedelta(days=retention_days)
        self._sleep = sleep

    def _expiry(self, at: dt.datetime) -> int:
        return int((at + self._retention).timestamp())

    def _decision_item(self, decision: Decision, event_id: str, when: dt.datetime) -> dict[str, Any]:
        pk, sk = decision_key(decision, event_id)
        return {
            "pk": pk,
            "sk": sk,
            "kind": "decision",
            "at": when.isoformat(),
            "event_id": event_id,
            "expires_at": self._expiry(when),
            **event_origin(),
            **decision.model_dump(mode="json"),
        }

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None, held: bool = False) -> str:
        when = at or dt.datetime.now(dt.UTC)
        item = self._decision_item(decision, event_id, when)
        ref = f"{item['pk']}|{item['sk']}"
        if decision.verdict == "act":
            self._client.put_item(TableName=self._name, Item=_wire(_to_dynamo(item)))
            return ref
        # A retry of the same event that finds the resource already fixed must not erase the decision that fixed it:
        # an "act" entry for this event, policy and resource is kept. A held-back action (``held``) replaces an "act"
        # entry that records no outcome (``evidence.done``), since nothing was done.
        condition = "attribute_not_exists(pk) OR verdict <> :act"
        if held:
            condition += " OR attribute_not_exists(evidence.done)"
        try:
            self._client.put_item(
                TableName=self._name,
                Item=_wire(_to_dynamo(item)),
                ConditionExpression=condition,
                ExpressionAttributeValues={":act": {"S": "act"}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        return ref

    def record_many(self, decisions: Sequence[Decision], *, event_id: str, at: dt.datetime | None = None) -> list[str]:
        """Record a sweep's decisions in batches, keeping ``record``'s promise that an "act" entry is never erased.

        BatchWriteItem takes no conditions, so the "no action" entries are first looked up (BatchGetItem, verdict
        only, strongly consistent) and an existing "act" entry for the same event is skipped. Only a duplicate of the
        same event could write the same key in between, and idempotency holds those back while this one runs.
        """
        when = at or dt.datetime.now(dt.UTC)
        items: dict[tuple[str, str], dict[str, Any]] = {}
        for decision in decisions:
            item = self._decision_item(decision, event_id, when)
            items[(item["pk"], item["sk"])] = item  # one resource decided twice: the last word, as ``record`` does
        guarded = [key for key, item in items.items() if item["verdict"] != "act"]
        for key in self._acted(guarded):
            del items[key]
        self._write_all(_to_dynamo(item) for item in items.values())
        return [f"{pk}|{sk}" for pk, sk in (decision_key(d, event_id) for d in decisions)]

    def _acted(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """The keys among ``keys`` that already hold an "act" entry."""
        return {
            (str(row["pk"]), str(row["sk"]))
            for row in self._read_all(keys, projection="pk, sk, verdict")
            if row.get("verdict") == "act"
        }

    def _read_all(self, keys: list[tuple[str, str]], *, projection: str | None = None) -> list[dict[str, Any]]:
        """BatchGetItem (strongly consistent) in requests of 100 keys; unprocessed keys resent after a backoff."""
        found: list[dict[str, Any]] = []
        unique = list(dict.fromkeys(keys))  # a key twice in one request is a ValidationException
        for offset in range(0, len(unique), BATCH_GET_KEYS):
            request: dict[str, Any] = {
                "Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in unique[offset : offset + BATCH_GET_KEYS]],
                "ConsistentRead": True,
            }
            if projection:
                request["ProjectionExpression"] = projection
            pending: dict[str, Any] = {self._name: request}
            for attempt in range(BATCH_ATTEMPTS):
                answer = self._client.batch_get_item(RequestItems=pending)
                found.extend(_unwire(raw) for raw in answer.get("Responses", {}).get(self._name, []))
                pending = answer.get("UnprocessedKeys") or {}
                if not pending:
                    break
                self._sleep(_backoff(attempt))
            else:
                raise UnprocessedItemsError(f"{self._name}: DynamoDB left keys unread after {BATCH_ATTEMPTS} attempts")
        return found

    def _write_all(self, items: Iterable[dict[str, Any]]) -> None:
        """BatchWriteItem in requests of 25; what DynamoDB leaves unprocessed is resent after a backoff."""
        batch: list[dict[str, Any]] = []
        for item in items:
            batch.append({"PutRequest": {"Item": _wire(item)}})
            if len(batch) == BATCH_WRITE_ITEMS:
                self._write_batch(batch)
                batch = []
        if batch:
            self._write_batch(batch)

    def _write_batch(self, requests: list[dict[str, Any]]) -> None:
        pending: dict[str, Any] = {self._name: requests}
        for attempt in range(BATCH_ATTEMPTS):
            answer = self._client.batch_write_item(RequestItems=pending)
            pending = answer.get("UnprocessedItems") or {}
            if not pending:
                return
            self._sleep(_backoff(attempt))
        left = len(pending.get(self._name, []))
        raise UnprocessedItemsError(f"{self._name}: {left} items unprocessed after {BATCH_ATTEMPTS} attempts")

    def _body(self, kind: str, key: str, item: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
        body = {"at": now.isoformat(), **item, "pk": f"{kind}#{key}", "sk": "item", "kind": kind}
        body.setdefault("expires_at", self._expiry(now))
        return body

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        body = self._body(kind, key, item, dt.datetime.now(dt.UTC))
        self._client.put_item(TableName=self._name, Item=_wire(_to_dynamo(body)))

    def put_many(self, items: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        """Unconditional puts of (kind, key, item), each as ``put_item`` writes it, in BatchWriteItem requests of 25.

        Each put is atomic, the batch is not: a failure part-way leaves some written, which is what the same puts
        one at a time would leave. The same key twice: the last item wins (one request may not name a key twice).
        """
        now = dt.datetime.now(dt.UTC)
        bodies: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, key, item in items:
            bodies.pop((kind, key), None)  # re-inserted: written in the order of its last put
            bodies[(kind, key)] = self._body(kind, key, item, now)
        self._write_all(_to_dynamo(body) for body in bodies.values())

    def get_many(self, kind: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``get_item`` of many keys of one kind (BatchGetItem, strongly consistent): key -> item, absent keys left
        out."""
        wanted = {f"{kind}#{key}": key for key in keys}
        rows = self._read_all([(pk, "item") for pk in wanted])
        return {wanted[str(row["pk"])]: _from_dynamo(row) for row in rows if str(row.get("pk")) in wanted}

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool:
        """Conditional PutItem (``attribute_not_exists(pk)``): True if this call wrote the item, False if one existed.

        The intent record of a non-idempotent call: only one attempt may claim it. A claim whose answer was lost and
        was resent by botocore finds its own item; callers tell theirs apart by a token they put in ``item``.
        ``replacing=(field, value)``: compare-and-set instead, the item must exist with ``field`` = ``value`` (with
        ``value`` None: exist without ``field``).
        """
        now = dt.datetime.now(dt.UTC)
        body = {"at": now.isoformat(), **item, "pk": f"{kind}#{key}", "sk": "item", "kind": kind}
        body.setdefault("expires_at", self._expiry(now))
        condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        if replacing is not None and replacing[1] is None:  # the item exists and has no such field yet
            condition = {
                "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(#field)",
                "ExpressionAttributeNames": {"#field": replacing[0]},
            }
        elif replacing is not None:
            condition = {
                "ConditionExpression": "#field = :expected",
                "ExpressionAttributeNames": {"#field": replacing[0]},
                "ExpressionAttributeValues": {":expected": _wire({"v": _to_dynamo(replacing[1])})["v"]},
            }
        try:
            self._client.put_item(TableName=self._name, Item=_wire(_to_dynamo(body)), **condition)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self._client.get_item(
            TableName=self._name, Key={"pk": {"S": f"{kind}#{key}"}, "sk": {"S": "item"}}, ConsistentRead=True
        ).get("Item")
        return _from_dynamo(_unwire(found)) if found else None

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        return list(self.iter_kind(kind, since))

    def iter_kind(self, kind: str, since: dt.datetime | None = None) -> Iterator[dict[str, Any]]:
        """:meth:`query_kind` one page at a time: a reader that folds or compacts the items as they come (the
        report's two periods of decisions) never holds the raw list."""
        condition = "#kind = :kind"
        names = {"#kind": "kind"}
        values: dict[str, Any] = {":kind": {"S": kind}}
        if since is not None:
            condition += " AND #at >= :since"
            names["#at"] = "at"
            values[":since"] = {"S": since.isoformat()}
        return self._pages(
            {
                "IndexName": KIND_INDEX,
                "KeyConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        )

    def query_target(self, kind: str, target: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        """The items of ``kind`` one organisation target wrote (``target`` = ``account#region``), from the sparse
        ``by-target`` index: the target's own partition, not every item of the kind. ``since`` filters on ``at``
        (the items are few, and expire)."""
        names = {"#target": "target", "#kind": "kind"}
        values: dict[str, Any] = {":target": {"S": target}, ":kind": {"S": kind}}
        request: dict[str, Any] = {
            "IndexName": TARGET_INDEX,
            "KeyConditionExpression": "#target = :target AND #kind = :kind",
        }
        if since is not None:
            request["FilterExpression"] = "#at >= :since"
            names["#at"] = "at"
            values[":since"] = {"S": since.isoformat()}
        return self._query({**request, "ExpressionAttributeNames": names, "ExpressionAttributeValues": values})

    def _query(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page of one Query."""
        return list(self._pages(request))

    def _pages(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The items of one Query, page by page: the next page is asked for when the last one has been consumed."""
        kwargs: dict[str, Any] = {"TableName": self._name, **request}
        while True:
            page = self._client.query(**kwargs)
            for item in page.get("Items", []):
                yield _from_dynamo(_unwire(item))
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
