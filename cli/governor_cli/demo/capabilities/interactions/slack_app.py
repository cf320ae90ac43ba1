"""The demo's stand-in for Slack's side of a button click: it signs and POSTs clicks as Slack would.

The demo stores a signing secret in the emulated Secrets Manager, picks idle warnings the notifier really posted (with
their buttons) from the capture endpoint, and clicks them as the instance's owner: a form-encoded ``payload=`` body,
signed v0 with the secret, delivered to the ``interactions`` handler as a Function URL request. What the handler hands
on asynchronously (to itself, and Stop now to idle) is queued and run after its answer, as Lambda's async invoke does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

SLACK_WORKSPACE = "T0DEMO"


def slack_user(person: str) -> str:
    """The demo's Slack user id for a person (``ana`` → ``UDEMOANA``)."""
    return f"UDEMO{person.upper()}"


@dataclass
class QueuedInvoker:
    """Lambda's asynchronous invoke for the demo: (function, event) queued, run by the caller after the answer."""

    queue: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def invoke(self, function: str, event: dict[str, Any]) -> None:
        """``function``: the function's name or ARN (``...:function:<stack>-<name>``); queued under its registry name
        (the worker invokes itself, and hands Stop now to the function that stops)."""
        from governor.registry import REGISTRY

        deployed = function.rsplit(":", 1)[-1]
        name = next(n for n in REGISTRY if deployed.endswith(n))
        self.queue.append((name, json.loads(json.dumps(event))))


def new_signing_secret() -> str:
    return secrets.token_hex(16)


def buttons_in(message: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The governor token and button ids of each actions block of a posted message (an owner's digest has one per
    instance), in the message's order."""
    found = []
    for block in message.get("blocks") or []:
        if block.get("type") == "actions" and str(block.get("block_id", "")).startswith("governor:"):
            elements = block.get("elements") or []
            token = str(elements[0].get("value")) if elements else ""
            found.append((token, [str(e.get("action_id")) for e in elements]))
    return found


def buttons_of(message: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The governor token and button ids of a posted message's first actions block, or None when it has none."""
    found = buttons_in(message)
    return found[0] if found else None


def click_request(
    message: dict[str, Any],
    token: str,
    action_id: str,
    user: str,
    response_url: str,
    now: dt.datetime,
    secret: str,
) -> dict[str, Any]:
    """A Function URL event carrying a click exactly as Slack sends it: form body, ``payload=`` JSON, v0 signature."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": SLACK_WORKSPACE},
        "team": {"id": SLACK_WORKSPACE, "domain": "demo"},
        "api_app_id": "A0DEMO",
        "trigger_id": f"{int(now.timestamp())}.1.demo",
        "response_url": response_url,
        "container": {"type": "message", "is_ephemeral": False},
        "message": {"type": "message", "blocks": message.get("blocks") or [], "text": message.get("text", "")},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": f"governor:{token}",
                "value": token,
                "action_ts": f"{now.timestamp():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(now.timestamp()))
    signature = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "user-agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
            "x-slack-request-timestamp": timestamp,
            "x-slack-signature": f"v0={signature}",
        },
        "requestContext": {"http": {"method": "POST", "path": "/", "sourceIp": "127.0.0.1"}},
        "body": body,
        "isBase64Encoded": False,
    }


def drain(invoker: QueuedInvoker, run: Callable[[str, dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Run every queued asynchronous invocation (which may queue more), in order; their results."""
    results = []
    while invoker.queue:
        function, event = invoker.queue.pop(0)
        results.append(run(function, event))
    return results
