"""The Slack interaction endpoint's AWS and Slack calls: its secrets, the snooze tag, async invokes, Slack answers.

The secrets and invoker classes declare their IAM actions (the snooze tag is the Tag action's); the role grants
exactly those (the snooze tag only on GPU instances carrying the fleet tags, invokes only of itself and the idle
function, the two Slack secrets only).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.observability import logger

#: Slack shows the clicking user an error unless the endpoint answers within 3 s. Its two calls (the signing secret,
#: cached per container, and the asynchronous hand-over) each get one attempt with these timeouts, so even a cold
#: container whose calls both hang answers in 2 x (1 + 1.2) = 4.4 s at worst and a warm one in 2.2 s; the shared
#: clients (5 attempts, 3 s + 15 s each) could take 105 s per call. A hand-over whose answer was lost is answered
#: 502 and the user clicks again: the worker's idempotency on the click's key holds a second click back.
ENDPOINT_CONNECT_SECONDS = 1.0
ENDPOINT_READ_SECONDS = 1.2


def endpoint_client(service: str, region: str | None = None) -> Any:
    """A client for the Function URL path: one attempt, short timeouts (see ``ENDPOINT_*``)."""
    from botocore.config import Config

    from governor.adapters.aws import retries

    config = retries().merge(
        Config(
            connect_timeout=ENDPOINT_CONNECT_SECONDS,
            read_timeout=ENDPOINT_READ_SECONDS,
            retries={"mode": "standard", "total_max_attempts": 1},
        )
    )
    return client.session().client(service, region_name=region, config=config)


def endpoint_worst_seconds(calls: int = 2) -> float:
    """How long the endpoint's ``calls`` calls take at worst before it answers Slack."""
    return calls * (ENDPOINT_CONNECT_SECONDS + ENDPOINT_READ_SECONDS)


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


class SnoozeTagger:
    """Writes the snooze tag; the role allows only that key, only on GPU instances carrying the fleet tags."""

    def __init__(self, region: str | None = None, ec2: Any = None) -> None:
        self._ec2 = ec2 or client("ec2", region)

    def snooze(self, instance_id: str, tag: str, value: str) -> None:
        self._ec2.create_tags(Resources=[instance_id], Tags=[{"Key": tag, "Value": value}])


class AsyncInvoker:
    """Lambda's asynchronous invoke: the endpoint hands a verified click to its worker, and Stop now to idle."""

    IAM_ACTIONS = frozenset({"lambda:InvokeFunction"})

    def __init__(self, region: str | None = None, lambda_client: Any = None) -> None:
        self._lambda = lambda_client or client("lambda", region)

    def invoke(self, function: str, event: dict[str, Any]) -> None:
        self._lambda.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(event).encode())


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
