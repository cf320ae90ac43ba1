"""The Slack interaction endpoint's own AWS calls: its quick clients, the snooze tag, async invokes. The Slack app's
secrets and Web API calls are shared with the other functions that talk to Slack (``governor.adapters.slack_app``).

The invoker declares its IAM actions (the snooze tag is the Tag action's); the role grants exactly those (the snooze
tag only on GPU instances carrying the fleet tags, invokes only of itself and the function Stop now is delegated to).
"""

from __future__ import annotations

import json
from typing import Any

from governor.adapters.aws import client

#: Slack shows the clicking user an error unless the endpoint answers within 3 s. Its two calls (the signing secret,
#: cached per container, and the asynchronous hand-over) each get one attempt with these timeouts, so even a cold
#: container whose calls both hang answers in 2 x (1 + 1.2) = 4.4 s at worst and a warm one in 2.2 s; the shared
#: clients (5 attempts, 3 s + 15 s each) could take 105 s per call. A hand-over whose answer was lost is answered
#: 502 and the user may click again. The worker's idempotency holds back only the same click delivered twice (a
#: second click is a new Slack action, a new key); what holds back a second Stop now on the message is the worker's
#: conditional write on the message's Stop now (``interactions/stop_claim.py``): one hand-over to idle per message
#: until the idle function has answered it. A second Keep writes the same tag again.
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
