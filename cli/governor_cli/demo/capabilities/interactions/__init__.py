"""Interactions' scenarios: Slack's clicks on a warning's buttons, verified at the endpoint and acted on once by the
worker; in the demo, the owners who click them (``click``) and the demo's Slack app (``slack_app``)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from governor.adapters.ledger import DynamoLedger
from governor.interactions.domain import (
    BUTTON_KIND,
    CLICKED,
    KEEP_HOURS,
    SOURCE,
    STOP_NOW,
    button_record,
    button_token,
    parse_click,
)
from governor.interactions.policy import TeamMembers
from governor_cli.demo.hooks import provided
from governor_cli.testing.deployment import LEDGER_TABLE, REGION, SLACK_SIGNING_SECRET
from governor_cli.testing.events import envelope
from governor_cli.testing.scenarios import CLICKER, RESPONSE_URL, Case

if TYPE_CHECKING:
    from governor.policy import Policy
    from governor_cli.demo.run import DemoResult, Simulation
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True, "buttons": True, "slack_users": {CLICKER: "alice@example.com"}}


def _button(instance: str) -> str:
    """What the notifier leaves behind when it sends a warning with buttons: the token's ledger record."""
    finding = provided("warning_finding")(instance)
    token = button_token(finding)
    DynamoLedger(LEDGER_TABLE, region=REGION).put_item(BUTTON_KIND, token, button_record(finding, token))
    return token


def _click_body(token: str, action_id: str) -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": CLICKER, "username": "ana", "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "example"},
        "response_url": RESPONSE_URL,
        "trigger_id": "123.456.abc",
        "message": {"blocks": [{"type": "actions", "block_id": f"governor:{token}", "elements": []}]},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": f"governor:{token}",
                "value": token,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})


def _worker_event(scenarios: Scenarios, action_id: str, index: int, name: str) -> Case:
    instance = scenarios.instance("g5.xlarge")
    signed = dt.datetime.now(dt.UTC).replace(microsecond=0)  # Slack's timestamp, as the endpoint verified it
    click = parse_click(_click_body(_button(instance), action_id)).model_copy(update={"signed_at": signed})
    event = envelope(CLICKED, SOURCE, click.model_dump(mode="json"))
    event["id"] = click.key
    return Case(f"{name} #{index}", "interactions", event, instance)


def interactions_keep_click(scenarios: Scenarios, index: int) -> Case:
    """The worker's hand-over for Keep 4 h: one snooze tag, one decision."""
    return _worker_event(scenarios, KEEP_HOURS, index, "Keep 4 h click")


def interactions_stop_click(scenarios: Scenarios, index: int) -> Case:
    """The worker's hand-over for Stop now: one Stop request to the idle function, one decision."""
    return _worker_event(scenarios, STOP_NOW, index, "Stop now click")


def _request(body: str, secret: str) -> dict[str, Any]:
    timestamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": f"v0={digest}",
    }
    return {
        "version": "2.0",
        "rawPath": "/",
        "headers": headers,
        "requestContext": {"http": {"method": "POST", "path": "/", "sourceIp": "3.3.3.3"}, "timeEpoch": 0},
        "body": body,
        "isBase64Encoded": False,
    }


def interactions_signed_request(scenarios: Scenarios, index: int) -> Case:
    """Slack's POST, signed: answered 200 and handed to the worker exactly once."""
    instance = scenarios.instance("g5.xlarge")
    event = _request(_click_body(_button(instance), STOP_NOW), SLACK_SIGNING_SECRET)
    event["id"] = str(uuid.uuid4())  # the harness's handle on the request; the endpoint ignores it
    return Case(f"signed click request #{index}", "interactions", event, instance, sync=True)


def interactions_forged_request(scenarios: Scenarios, index: int) -> Case:
    """The same POST signed with another secret: refused (401), nothing handed over, nothing read."""
    instance = scenarios.instance("g5.xlarge")
    event = _request(_click_body(_button(instance), STOP_NOW), "not-the-signing-secret")
    event["id"] = str(uuid.uuid4())
    return Case(f"forged click request #{index}", "interactions", event, instance, forbidden=True, sync=True)


def recorded_stop_click(ledger: Any, instance_id: str, at: Any, **options: Any) -> dict[str, Any]:
    """Role: a verified Stop now click on ``instance_id`` as this function leaves it for the function that stops
    (:func:`governor_cli.demo.capabilities.interactions.stop_clicks.recorded_click`)."""
    from governor_cli.demo.capabilities.interactions.stop_clicks import recorded_click

    return recorded_click(ledger, instance_id, at, **options)


def stop_now_click(ledger: Any, instance_id: str) -> Any:
    """Role: the warning about ``instance_id`` posted with its buttons (their record in ``ledger``, as the notifier
    writes it) and a person who answers it with Stop now: a
    :class:`governor_cli.demo.capabilities.interactions.stop_clicks.StopNowClicker`."""
    from governor_cli.demo.capabilities.interactions.stop_clicks import StopNowClicker, button

    return StopNowClicker(button(ledger, instance_id))


CASES = (
    (1, interactions_keep_click),
    (1, interactions_stop_click),
    (1, interactions_signed_request),
    (1, interactions_forged_request),
)


def deployed_secrets(policy: Policy) -> dict[str, str]:
    """The Slack app's signing secret, holding Slack's documented example value the soak's requests are signed with."""
    return {policy.interactions.signing_secret_name: SLACK_SIGNING_SECRET}


# --- the demo: the owners' clicks (``clicks``, loaded when the demo calls; it imports the demo's simulation) ------

#: The one demo person ``interactions.slack_users`` does not list: the notifier finds their Slack id with
#: ``users.lookupByEmail`` (bot token), so their warnings mention them as everyone else's do.
LOOKED_UP = "dara"
DEMO_BOT_SECRET = "governor/demo-slack-bot"  # noqa: S105 - a secret's name, not its value


def policy_sections(policy: Policy) -> dict[str, Any]:
    """Its section of the policy the demo runs: buttons on, the demo's people in ``slack_users`` (but one, looked
    up by email) and in their teams, and a bot token, each kept where the chosen policy sets its own."""
    from governor_cli.demo.capabilities.interactions.slack_app import slack_user
    from governor_cli.demo.run import DEMO_DOMAIN, PEOPLE

    chosen = policy.interactions
    return {
        "interactions": chosen.model_copy(
            update={
                "buttons": True,
                "slack_users": {
                    **chosen.slack_users,
                    **{slack_user(p): f"{p}@{DEMO_DOMAIN}" for p in PEOPLE.values() if p != LOOKED_UP},
                },
                # the bot token: users.lookupByEmail for the owner slack_users leaves out, users.info for their clicks
                "bot_token_secret_name": chosen.bot_token_secret_name or DEMO_BOT_SECRET,
                # Owners match only by full identity (the tag is the person's address); each person is also a member
                # of their team, so they may act on their team's instances whoever launched them.
                "teams": {
                    **chosen.teams,
                    **{
                        team: TeamMembers(members=[f"{person}@demo.example"])
                        for team, person in PEOPLE.items()
                        if team not in chosen.teams
                    },
                },
            }
        )
    }


def connect(sim: Simulation) -> None:
    """The Slack app's signing secret, as an operator stores it (docs/slack.md)."""
    from governor_cli.demo.capabilities.interactions import clicks

    clicks.connect(sim)


def respond(sim: Simulation) -> None:
    """After each tick's findings are delivered: the owners click Keep 4 h on one warning, Stop now on another."""
    from governor_cli.demo.capabilities.interactions import clicks

    clicks.respond(sim)


def click_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """The summary's lines about the buttons clicked."""
    from governor_cli.demo.capabilities.interactions import clicks

    return clicks.click_facts(result)
