"""Slack incoming webhooks: the URL comes from Secrets Manager and never appears in a log line or an error.

Posting honours ``Retry-After`` on HTTP 429 and retries 5xx / connection errors with bounded backoff; a message that
still fails raises :class:`DeliveryError`, so the invocation fails and the event ends in the DLQ.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

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


class Response(Protocol):
    status: int

    def read(self) -> bytes: ...


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


class SlackWebhook:
    """Posts Block Kit messages to one webhook; ``opener`` and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        url: str,
        *,
        opener: Opener = _urlopen,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 4,
        max_wait_seconds: float = 30.0,
        timeout_seconds: float = 10.0,
        label: str = "slack",
    ) -> None:
        self._url = check_webhook_url(url)
        self._open = opener
        self._sleep = sleep
        self._attempts = max_attempts
        self._max_wait = max_wait_seconds
        self._timeout = timeout_seconds
        self.label = label
        self.waits: list[float] = []

    def post_all(self, messages: Sequence[dict[str, Any]]) -> int:
        """Post messages in order; returns how many were posted."""
        for message in messages:
            self.post(message)
        return len(messages)

    def post(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        last = "no attempt made"
        for attempt in range(1, self._attempts + 1):
            request = urllib.request.Request(  # noqa: S310 - scheme checked in check_webhook_url
                self._url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            wait = min(2.0 ** (attempt - 1), self._max_wait)
            try:
                with self._open(request, self._timeout) as response:
                    status = getattr(response, "status", 200)
                    text = response.read().decode(errors="replace")[:200]
                if 200 <= status < 300:
                    return
                last = f"HTTP {status}: {text}"
            except urllib.error.HTTPError as error:
                text = error.read().decode(errors="replace")[:200] if error.fp else ""
                last = f"HTTP {error.code}: {text}".strip()
                if error.code == 429:
                    wait = _retry_after(error.headers.get("Retry-After"), wait, self._max_wait)
                elif 400 <= error.code < 500:
                    raise DeliveryError(
                        f"{self.label} rejected the message ({last}); not retried", permanent=error.code != 408
                    ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
                reason = getattr(error, "reason", error)
                last = f"webhook unreachable ({type(reason).__name__})"
            except Exception as error:
                raise DeliveryError(f"{self.label}: request failed ({type(error).__name__}); not retried") from None
            if attempt < self._attempts:
                self.waits.append(wait)
                self._sleep(wait)
        raise DeliveryError(f"{self.label}: message not delivered after {self._attempts} attempts ({last})")


def _retry_after(header: str | None, default: float, cap: float) -> float:
    """Slack sends whole seconds; an absent or odd header falls back to the backoff, and a huge one is capped."""
    try:
        seconds = float(header) if header is not None else default
    except ValueError:
        seconds = default
    return max(0.0, min(seconds, cap))
