"""The function's dead-letter queue, for events rejected at the edge: the event body plus the reason."""

from __future__ import annotations

import json
from typing import Any

from governor.adapters.aws import client
from governor.domain.ports import note_parked

IAM_ACTIONS = frozenset({"sqs:SendMessage"})


class SqsDeadLetters:
    def __init__(self, queue_url: str, region: str | None = None) -> None:
        self._url = queue_url
        self._sqs = client("sqs", region)

    def send(self, event: Any, reason: str) -> None:
        body = json.dumps(event, default=str)
        if len(body.encode()) > 250_000:
            body = json.dumps({"truncated": True, "head": body[:200_000]})
        self._sqs.send_message(
            QueueUrl=self._url,
            MessageBody=body,
            MessageAttributes={
                "ErrorMessage": {"DataType": "String", "StringValue": reason[:1000] or "unknown"},
                "RejectedBy": {"DataType": "String", "StringValue": "governor-validation"},
            },
        )
        note_parked(reason)
