"""The governor's Slack app: its secrets (the signing secret, the bot token) and the Web API calls made with them, for
every function that talks to Slack as the app (the notifier's mentions and bot posts, the Slack endpoint, Stop now's
answer). ``slack_sdk`` is imported when a call is made, not with this module: the Slack endpoint answers within 3 s
and the idle sweep never loads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.observability import logger


class SecretUnavailable(RuntimeError):
    """A Slack secret is missing or empty: the endpoint cannot verify anything and refuses every request."""


#: A missing or empty secret is remembered this long: a flood of requests to an endpoint whose secret is missing costs
#: one Secrets Manager read a minute per container, not one per request.
NEGATIVE_CACHE_SECONDS = 60.0


class SlackSecrets:
    """The signing secret and the optional bot token, read once per container (never logged); a secret found missing
    is not asked for again for :data:`NEGATIVE_CACHE_SECONDS`."""

    IAM_ACTIONS = frozenset({"secretsmanager:GetSecretValue"})

    def __init__(
        self, region: str | None = None, secretsmanager: Any = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = secretsmanager or client("secretsmanager", region)
        self._values: dict[str, str] = {}
        self._missing: dict[str, tuple[float, str]] = {}
        self._clock = clock
        self.reads = 0

    def value(self, name: str) -> str:
        """The secret's string (a bare value, or JSON with ``signing_secret`` / ``token``)."""
        if name in self._values:
            return self._values[name]
        missing = self._missing.get(name)
        if missing is not None and self._clock() - missing[0] < NEGATIVE_CACHE_SECONDS:
            raise SecretUnavailable(missing[1])
        try:
            self._values[name] = self._read(name)
        except SecretUnavailable as error:
            self._missing[name] = (self._clock(), str(error))
            raise
        self._missing.pop(name, None)
        return self._values[name]

    def _read(self, name: str) -> str:
        self.reads += 1
        try:
            raw = (self._client.get_secret_value(SecretId=name).get("SecretString") or "").strip()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in {"ResourceNotFoundException", "InvalidRequestException"}:
                raise SecretUnavailable(f"secret '{name}' not found in Secrets Manager ({code})") from None
            raise
        if raw.startswith("{"):
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                raise SecretUnavailable(f"secret '{name}' is not valid JSON") from None
            raw = str(data.get("signing_secret") or data.get("token") or "").strip()
        if not raw:
            raise SecretUnavailable(f"secret '{name}' is empty")
        return raw


class SlackDirectory:
    """``users.info`` with the bot token (scope ``users:read.email``): the email of a clicking Slack user."""

    def __init__(self, token: str, web_client: Any = None) -> None:
        if web_client is None:
            from slack_sdk import WebClient

            web_client = WebClient(token=token, timeout=5)
        self._client = web_client

    def email(self, slack_user: str) -> str | None:
        from slack_sdk.errors import SlackApiError

        try:
            answer = self._client.users_info(user=slack_user)
        except SlackApiError:
            return None
        profile = ((answer.get("user") or {}).get("profile") or {}) if answer.get("ok") else {}
        email = profile.get("email")
        return str(email).lower() if email else None

    def user_id(self, email: str) -> str | None:
        """``users.lookupByEmail`` (scope ``users:read.email``): the Slack user id of a workspace member with this
        email, or None (``users_not_found``, a deactivated member, any API error)."""
        from slack_sdk.errors import SlackApiError

        try:
            answer = self._client.users_lookupByEmail(email=email)
        except SlackApiError:
            return None
        user = (answer.get("user") or {}) if answer.get("ok") else {}
        found = user.get("id")
        return str(found) if found and not user.get("deleted") else None


def answer(response_url: str, message: dict[str, Any], client_factory: Callable[[str], Any] | None = None) -> bool:
    """Post to the click's ``response_url`` (checked to be Slack's when the click was parsed) with ``slack_sdk``'s
    webhook client, which retries connection errors and honours ``Retry-After``. A failure is logged and returned,
    not raised: the effect is done and recorded, only the message update is lost. The URL is never logged."""
    if client_factory is None:
        from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
        from slack_sdk.webhook import WebhookClient

        def client_factory(url: str) -> Any:
            handlers = [ConnectionErrorRetryHandler(max_retry_count=1), RateLimitErrorRetryHandler(max_retry_count=1)]
            return WebhookClient(url, timeout=5, retry_handlers=handlers)

    try:
        response = client_factory(response_url).send_dict(message)
    except Exception as error:  # a lost message update must not undo or repeat a recorded action
        logger.warning("Slack response_url not reached", extra={"error": type(error).__name__})
        return False
    if not 200 <= int(response.status_code) < 300:
        logger.warning("Slack response_url refused the update", extra={"status": response.status_code})
        return False
    return True
