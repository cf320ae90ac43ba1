"""Slack incoming webhooks through ``slack_sdk``'s WebhookClient: the URL comes from Secrets Manager and never
appears in a log line or an error.

slack_sdk does the HTTP and the retry loop; our retry handler decides what is retried (HTTP 429 after its
``Retry-After``, capped; 5xx and connection errors with bounded exponential backoff) and how often. A message that
still fails raises :class:`DeliveryError`, so the invocation fails and the event ends in the DLQ.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient, WebhookResponse

from governor.adapters.aws import client

IAM_ACTIONS = frozenset({"secretsmanager:GetSecretValue"})
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class DeliveryError(RuntimeError):
    """A message Slack did not accept after every retry; the message never contains the webhook URL.

    ``permanent`` marks answers that no retry can change (Slack's 4xx: ``invalid_token``, ``channel_not_found``,
    ``channel_is_archived``, ``invalid_payload``...), so the notifier parks the event at once instead of retrying.
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class SecretMissingError(RuntimeError):
    """The webhook secret does not exist, is empty or is not a webhook URL: retrying will not help."""


Opener = Callable[[urllib.request.Request, float], Any]


def _urlopen(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - scheme checked in check_webhook_url


# RFC 3986 characters only: a space, newline or other odd character makes urllib raise InvalidURL with the URL's path
# (the webhook's secret part) in its message, which would then reach logs and the DLQ.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


def check_webhook_url(url: str) -> str:
    """https only (plain http just for a local test server), so a mistyped secret cannot leak messages.

    The error never repeats the value: it is a secret.
    """
    value = url.strip()
    if not _URL_CHARS.fullmatch(value):
        raise SecretMissingError("the webhook secret holds characters a URL cannot contain (space, newline, ...)")
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        raise SecretMissingError("the webhook secret does not hold a well-formed URL") from None
    if parts.scheme == "https" and host:
        return value
    if parts.scheme == "http" and host in _LOCAL_HOSTS:
        return value
    raise SecretMissingError("the webhook secret does not hold an https:// URL")


def webhook_url_from_secret(secret_name: str, region: str | None = None) -> str:
    """The secret may hold the bare URL or JSON with ``url`` / ``webhook_url``."""
    secrets = client("secretsmanager", region)
    try:
        value = secrets.get_secret_value(SecretId=secret_name).get("SecretString") or ""
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in {"ResourceNotFoundException", "InvalidRequestException"}:
            raise SecretMissingError(
                f"Slack webhook secret '{secret_name}' not found in Secrets Manager ({code}); create it with "
                f"aws secretsmanager create-secret --name {secret_name} --secret-string https://hooks.slack.com/..."
            ) from None
        raise
    value = value.strip()
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except json.JSONDecodeError:
            raise SecretMissingError(f"Slack webhook secret '{secret_name}' is not valid JSON") from None
        value = str(data.get("url") or data.get("webhook_url") or "")
    if not value:
        raise SecretMissingError(f"Slack webhook secret '{secret_name}' is empty")
    try:
        return check_webhook_url(value)
    except SecretMissingError as error:
        raise SecretMissingError(f"Slack webhook secret '{secret_name}': {error}") from None


_QUIET = logging.getLogger("governor.slack.transport")
# slack_sdk logs a failed request with the error's text, which can carry the webhook's path (the secret part).
_QUIET.disabled = True
_QUIET.propagate = False


class _BoundedRetry(RetryHandler):
    """slack_sdk retry handler: 429 after ``Retry-After`` (capped), 5xx and connection errors with 1, 2, 4... s.

    Waits go through ``sleep`` (injectable in tests) and are recorded in ``waits``.
    """

    def __init__(self, attempts: int, max_wait: float, sleep: Callable[[float], None], waits: list[float]) -> None:
        super().__init__(max_retry_count=max(0, attempts - 1))
        self._max_wait = max_wait
        self._sleep = sleep
        self._waits = waits

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None:
            return response.status_code == 429 or response.status_code >= 500
        return isinstance(error, urllib.error.URLError | TimeoutError | ConnectionError | OSError)

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        wait = min(2.0**state.current_attempt, self._max_wait)
        if response is not None and response.status_code == 429:
            header = next((v[0] for k, v in response.headers.items() if k.lower() == "retry-after" and v), None)
            wait = _retry_after(header, wait, self._max_wait)
        self._waits.append(wait)
        self._sleep(wait)
        state.next_attempt_requested = True
        state.increment_current_attempt()


class _Client(WebhookClient):
    """slack_sdk's WebhookClient; ``opener`` (tests only) stands in for the socket, everything else is slack_sdk's."""

    def __init__(self, url: str, opener: Opener | None, **options: Any) -> None:
        super().__init__(url, **options)
        self._opener = opener

    def _perform_http_request_internal(self, url: str, req: urllib.request.Request) -> WebhookResponse:
        if self._opener is None:
            response: WebhookResponse = super()._perform_http_request_internal(url, req)
            return response
        with self._opener(req, float(self.timeout)) as answer:
            status = getattr(answer, "status", 200)
            text = answer.read().decode(errors="replace")
        return WebhookResponse(url=url, status_code=status, body=text, headers={})


class SlackWebhook:
    """Posts Block Kit messages to one webhook; ``opener`` and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        url: str,
        *,
        opener: Opener | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 4,
        max_wait_seconds: float = 30.0,
        timeout_seconds: float = 10.0,
        label: str = "slack",
    ) -> None:
        self._attempts = max_attempts
        self.label = label
        self.waits: list[float] = []
        self._client = _Client(
            check_webhook_url(url),
            opener,
            timeout=max(1, math.ceil(timeout_seconds)),
            logger=_QUIET,
            retry_handlers=[_BoundedRetry(max_attempts, max_wait_seconds, sleep, self.waits)],
        )

    def post_all(self, messages: Sequence[dict[str, Any]]) -> int:
        """Post messages in order; returns how many were posted."""
        for message in messages:
            self.post(message)
        return len(messages)

    def post(self, message: dict[str, Any]) -> None:
        try:
            response = self._client.send_dict(dict(message))
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise DeliveryError(
                f"{self.label}: message not delivered after {self._attempts} attempts "
                f"(webhook unreachable ({type(reason).__name__}))"
            ) from None
        except Exception as error:
            raise DeliveryError(f"{self.label}: request failed ({type(error).__name__}); not retried") from None
        status = response.status_code
        if 200 <= status < 300:
            return
        last = f"HTTP {status}: {str(response.body or '')[:200]}".strip()
        if 400 <= status < 500 and status != 429:
            raise DeliveryError(f"{self.label} rejected the message ({last}); not retried", permanent=status != 408)
        raise DeliveryError(f"{self.label}: message not delivered after {self._attempts} attempts ({last})")


def _retry_after(header: str | None, default: float, cap: float) -> float:
    """Slack sends whole seconds; an absent or odd header falls back to the backoff, and a huge one is capped."""
    try:
        seconds = float(header) if header is not None else default
    except ValueError:
        seconds = default
    return max(0.0, min(seconds, cap))


#: ``chat.update`` answers that mean the message to update is no longer there to update: post a new one instead.
#: (Slack's chat.update errors: ``message_not_found``, ``cant_update_message``, ``edit_window_closed``;
#: ``thread_not_found`` / ``message_not_found`` for a reply whose parent is gone.)
GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed", "thread_not_found"})
#: Answers no retry can change: the event goes to the DLQ at once.
PERMANENT = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "channel_not_found",
        "is_archived",
        "not_in_channel",
        "missing_scope",
        "invalid_blocks",
        "msg_too_long",
        "no_text",
    }
)


class MessageGone(RuntimeError):
    """The message an update (or thread reply) was for is gone or can no longer be edited."""


class SlackBot:
    """``chat.postMessage`` / ``chat.update`` with the bot token (scope ``chat:write``) through slack_sdk's WebClient.

    Unlike a webhook, a post answers with the message's ``ts``, so the governor can update an idle episode's message
    in place. 429 is retried by slack_sdk's rate-limit handler (after ``Retry-After``); other failures raise
    :class:`DeliveryError` (``permanent`` for the answers in :data:`PERMANENT`) or :class:`MessageGone`.
    """

    def __init__(self, token: str, *, base_url: str | None = None, web_client: Any = None) -> None:
        if web_client is None:
            from slack_sdk import WebClient
            from slack_sdk.http_retry.builtin_handlers import (
                ConnectionErrorRetryHandler,
                RateLimitErrorRetryHandler,
            )

            options: dict[str, Any] = {"base_url": base_url} if base_url else {}
            web_client = WebClient(
                token=token,
                timeout=10,
                logger=_QUIET,
                retry_handlers=[ConnectionErrorRetryHandler(max_retry_count=2), RateLimitErrorRetryHandler(2)],
                **options,
            )
        self._client = web_client

    def _call(self, method: str, **arguments: Any) -> str:
        from slack_sdk.errors import SlackApiError

        try:
            answer = getattr(self._client, method)(**arguments)
        except SlackApiError as error:
            code = str((error.response.data or {}).get("error") if error.response is not None else "") or "error"
            if code in GONE:
                raise MessageGone(code) from None
            raise DeliveryError(f"Slack {method} refused: {code}", permanent=code in PERMANENT) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
            raise DeliveryError(f"Slack {method}: unreachable ({type(error).__name__})") from None
        return str(answer.get("ts") or arguments.get("ts") or "")

    def post(self, channel: str, message: dict[str, Any], thread_ts: str | None = None) -> str:
        """A new message (or a reply in ``thread_ts``'s thread); returns its ``ts``."""
        extra = {"thread_ts": thread_ts} if thread_ts else {}
        return self._call(
            "chat_postMessage", channel=channel, text=message.get("text", ""), blocks=message.get("blocks"), **extra
        )

    def update(self, channel: str, ts: str, message: dict[str, Any]) -> str:
        """Replace the message ``ts`` in place (its buttons and text); raises :class:`MessageGone` when it is gone."""
        return self._call(
            "chat_update", channel=channel, ts=ts, text=message.get("text", ""), blocks=message.get("blocks")
        )
