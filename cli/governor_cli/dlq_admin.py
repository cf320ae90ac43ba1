"""Operators' access to a function's dead-letter queue: find it, read what is parked there and why, re-drive it.

A governor DLQ holds three kinds of message: events rejected at the edge (the event itself, the reason in the
``ErrorMessage`` attribute), Lambda on-failure records of asynchronous invocations whose retries ran out (the event
under ``requestPayload``, the error under ``responsePayload``), and events EventBridge or Scheduler could not deliver
(the event itself, the reason in ``ERROR_CODE`` / ``ERROR_MESSAGE`` attributes). All three are read the same way here.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from governor.adapters.aws import client

IAM_ACTIONS = frozenset(
    {
        "lambda:ListFunctions",
        "lambda:GetFunctionEventInvokeConfig",
        "lambda:InvokeFunction",
        "sqs:GetQueueUrl",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
        "kms:Decrypt",
    }
)


PEEK_VISIBILITY_SECONDS = 60  # how long a listed message is hidden while the rest of the queue is read
REPLAY_VISIBILITY_SECONDS = 120


class DlqLookupError(LookupError):
    """The function or its dead-letter queue cannot be found; the message says what was looked for."""


@dataclass(frozen=True)
class DeadLetter:
    """One parked event: the original event (re-drivable as is), why it is here, and where the reason came from."""

    message_id: str
    receipt_handle: str
    event: Any
    reason: str
    origin: str
    sent_at: str | None = None

    @property
    def event_id(self) -> str | None:
        return self.event.get("id") if isinstance(self.event, dict) and isinstance(self.event.get("id"), str) else None

    @property
    def kind(self) -> str:
        if isinstance(self.event, dict):
            detail = self.event.get("detail")
            if isinstance(detail, dict) and isinstance(detail.get("eventName"), str):
                return str(detail["eventName"])
            if isinstance(self.event.get("detail-type"), str):
                return str(self.event["detail-type"])
        return "unknown"

    def summary(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "event_id": self.event_id,
            "kind": self.kind,
            "origin": self.origin,
            "reason": self.reason,
            "sent_at": self.sent_at,
        }


def _attribute(message: dict[str, Any], name: str) -> str | None:
    value = (message.get("MessageAttributes") or {}).get(name) or {}
    text = value.get("StringValue")
    return str(text) if text is not None else None


def parse_message(message: dict[str, Any]) -> DeadLetter:
    """Recognise the three shapes a governor DLQ receives; anything else is kept as an opaque event."""
    body_text = message.get("Body", "")
    try:
        body: Any = json.loads(body_text)
    except json.JSONDecodeError:
        body = body_text
    sent = (message.get("Attributes") or {}).get("SentTimestamp")
    common = {
        "message_id": message["MessageId"],
        "receipt_handle": message["ReceiptHandle"],
        "sent_at": str(sent) if sent else None,
    }
    if isinstance(body, dict) and isinstance(body.get("requestContext"), dict) and "requestPayload" in body:
        payload = body.get("responsePayload")
        response: dict[str, Any] = payload if isinstance(payload, dict) else {}
        condition = body["requestContext"].get("condition", "failed")
        error = response.get("errorMessage") or (body.get("responseContext") or {}).get("functionError") or ""
        reason = f"{condition}: {error}".rstrip(": ")
        return DeadLetter(event=body["requestPayload"], reason=reason, origin="lambda-on-failure", **common)
    rejected = _attribute(message, "ErrorMessage")
    if rejected is not None:
        origin = _attribute(message, "RejectedBy") or "handler"
        return DeadLetter(event=body, reason=rejected, origin=origin, **common)
    code, text = _attribute(message, "ERROR_CODE"), _attribute(message, "ERROR_MESSAGE")
    if code or text:
        origin = "scheduler" if _attribute(message, "SCHEDULE_ARN") else "eventbridge"
        reason = ": ".join(part for part in (code, text) if part)
        return DeadLetter(event=body, reason=reason, origin=origin, **common)
    return DeadLetter(event=body, reason="no reason recorded", origin="unknown", **common)


class DlqAdmin:
    """Lists and re-drives one function's DLQ. Re-drive = an asynchronous invocation of the function with the
    original event; the message is deleted only after Lambda accepted the invocation."""

    def __init__(
        self, region: str | None = None, *, sqs: Any = None, lambda_client: Any = None, wait_seconds: int = 1
    ) -> None:
        self._wait = wait_seconds  # long polling; 0 only against an emulator, whose empty answers are exact
        self._sqs = sqs or client("sqs", region)
        self._lambda = lambda_client or client("lambda", region)

    def function_name(self, name: str) -> str:
        """``name`` is a Lambda function name or a governor function name (its ``GOVERNOR_FUNCTION`` variable)."""
        matches: list[str] = []
        known: set[str] = set()
        for page in self._lambda.get_paginator("list_functions").paginate():
            for function in page.get("Functions", []):
                variables = (function.get("Environment") or {}).get("Variables") or {}
                if function["FunctionName"] == name:
                    return str(function["FunctionName"])
                if variables.get("GOVERNOR_FUNCTION") == name:
                    matches.append(str(function["FunctionName"]))
                if variables.get("GOVERNOR_FUNCTION"):
                    known.add(str(variables["GOVERNOR_FUNCTION"]))
        if not matches:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise DlqLookupError(f"no Lambda function named {name!r} or with GOVERNOR_FUNCTION={name!r}{hint}")
        if len(matches) > 1:
            raise DlqLookupError(f"{name!r} matches several functions ({', '.join(sorted(matches))}); name one")
        return matches[0]

    def queue_url(self, function_name: str) -> str:
        """The function's on-failure destination, which the governor's factory points at the function's DLQ."""
        try:
            config = self._lambda.get_function_event_invoke_config(FunctionName=function_name)
        except self._lambda.exceptions.ResourceNotFoundException:
            raise DlqLookupError(f"{function_name} has no asynchronous invocation config (no DLQ)") from None
        arn = ((config.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination") or ""
        parts = arn.split(":")
        if len(parts) != 6 or parts[2] != "sqs":
            raise DlqLookupError(f"{function_name}: its on-failure destination is not an SQS queue ({arn or 'none'})")
        return str(self._sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"])

    def _pages(self, queue_url: str, visibility: int, limit: int | None) -> Iterator[list[dict[str, Any]]]:
        """Every message in the queue, ten at a time, until the queue has none left to show (or ``limit``).

        Each received message stays invisible for ``visibility`` seconds, so the next receive returns other ones;
        SQS has no cursor, and a zero visibility timeout would show the same few messages over and over. A receive
        long-polls (``wait_seconds``): it asks every SQS server, so an empty answer means the queue is drained.
        """
        seen: set[str] = set()
        while limit is None or len(seen) < limit:
            wanted = 10 if limit is None else min(10, limit - len(seen))
            response = self._sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=wanted,
                VisibilityTimeout=visibility,
                WaitTimeSeconds=self._wait,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
            )
            fresh = [m for m in response.get("Messages", []) if m["MessageId"] not in seen]
            if not fresh:
                return
            seen.update(m["MessageId"] for m in fresh)
            yield fresh

    def peek(self, queue_url: str, limit: int | None = None) -> list[DeadLetter]:
        """Every parked message (or the first ``limit``), left in the queue: each is made visible again at once."""
        messages = [m for page in self._pages(queue_url, PEEK_VISIBILITY_SECONDS, limit) for m in page]
        self._release_all(queue_url, [m["ReceiptHandle"] for m in messages])
        return [parse_message(m) for m in messages]

    def replay(
        self,
        queue_url: str,
        function_name: str,
        ids: set[str] | None = None,
        limit: int | None = None,
        *,
        dry_run: bool = False,
    ) -> list[tuple[DeadLetter, str | None]]:
        """Re-drive the selected messages (by message id or event id; all when ``ids`` is empty).

        Returns each selected letter with ``None`` when re-driven and deleted, or the error that kept it queued.
        Messages not selected are made visible again once the whole queue has been read. ``dry_run`` selects the same
        letters and returns them with ``None``, invoking and deleting nothing (every message is made visible again).
        """
        results: list[tuple[DeadLetter, str | None]] = []
        others: list[str] = []
        try:
            for page in self._pages(queue_url, REPLAY_VISIBILITY_SECONDS, None if ids else limit):
                for message in page:
                    letter = parse_message(message)
                    if ids and letter.message_id not in ids and letter.event_id not in ids:
                        others.append(letter.receipt_handle)
                        continue
                    if limit is not None and len(results) >= limit:
                        others.append(letter.receipt_handle)
                        continue
                    if dry_run:
                        others.append(letter.receipt_handle)
                        results.append((letter, None))
                        continue
                    error = self._invoke(function_name, letter)
                    if error is None:
                        self._sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=letter.receipt_handle)
                    else:
                        others.append(letter.receipt_handle)
                    results.append((letter, error))
        finally:
            self._release_all(queue_url, others)
        return results

    def _invoke(self, function_name: str, letter: DeadLetter) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._lambda.invoke(
                FunctionName=function_name, InvocationType="Event", Payload=json.dumps(letter.event).encode()
            )
        except (ClientError, BotoCoreError) as error:
            return str(error)
        status = int(response.get("StatusCode", 0))
        return None if status == 202 else f"Lambda answered {status}"

    def _release_all(self, queue_url: str, handles: list[str]) -> None:
        """Make messages visible again, ten per call (ChangeMessageVisibilityBatch's limit)."""
        for low in range(0, len(handles), 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for n, handle in enumerate(handles[low : low + 10])
            ]
            self._sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
