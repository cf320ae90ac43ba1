"""The decision ledger on DynamoDB: one item per decision, plus small keyed items (marks, sessions, records).

Keys are deterministic, so a retried delivery of the same event overwrites its own entry instead of adding one.
Layout: ``pk`` / ``sk``; the ``by-kind`` index (``kind``, ``at``) serves the reports' period queries.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from governor.adapters.aws import RETRIES
from governor.domain.decision import Decision

IAM_ACTIONS = frozenset({"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"})
KIND_INDEX = "by-kind"


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

    def __init__(self, table_name: str, retention_days: int = 400, region: str | None = None) -> None:
        self._table = boto3.resource("dynamodb", region_name=region, config=RETRIES).Table(table_name)
        self._retention = dt.timedelta(days=retention_days)

    def _expiry(self, at: dt.datetime) -> int:
        return int((at + self._retention).timestamp())

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None) -> str:
        when = at or dt.datetime.now(dt.UTC)
        pk, sk = decision_key(decision, event_id)
        item = {
            "pk": pk,
            "sk": sk,
            "kind": "decision",
            "at": when.isoformat(),
            "event_id": event_id,
            "expires_at": self._expiry(when),
            **decision.model_dump(mode="json"),
        }
        if decision.verdict == "act":
            self._table.put_item(Item=_to_dynamo(item))
            return f"{pk}|{sk}"
        try:
            # A retry of the same event that finds the resource already fixed must not erase the decision that
            # fixed it: an "act" entry for this event, policy and resource is kept.
            self._table.put_item(
                Item=_to_dynamo(item),
                ConditionExpression="attribute_not_exists(pk) OR verdict <> :act",
                ExpressionAttributeValues={":act": "act"},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
        return f"{pk}|{sk}"

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        now = dt.datetime.now(dt.UTC)
        body = {"at": now.isoformat(), **item, "pk": f"{kind}#{key}", "sk": "item", "kind": kind}
        body.setdefault("expires_at", self._expiry(now))
        self._table.put_item(Item=_to_dynamo(body))

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        found = self._table.get_item(Key={"pk": f"{kind}#{key}", "sk": "item"}, ConsistentRead=True).get("Item")
        return _from_dynamo(found) if found else None

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        condition = Key("kind").eq(kind)
        if since is not None:
            condition = condition & Key("at").gte(since.isoformat())
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"IndexName": KIND_INDEX, "KeyConditionExpression": condition}
        while True:
            page = self._table.query(**kwargs)
            items.extend(_from_dynamo(item) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
