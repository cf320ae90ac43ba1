"""Stop now clicks for the tests and the reliability runs, in the shapes the real functions write them (the package's
hooks provide them to other capabilities' scenarios as the roles ``recorded_stop_click`` and ``stop_now_click``).

* :func:`recorded_click`: what the notifier and the interactions function leave in the ledger for one verified,
  authorised Stop now click (the message's button record, the click's record with its signed time and expiry), and
  the event the interactions function hands on. For runs that start where Stop now is carried out.
* :func:`signed_request`: Slack's POST of a click on a message's button to the interactions Function URL, form-encoded
  and signed v0 with the signing secret, as Slack sends it. For runs that start where Slack does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from governor.domain.ports import Ledger
from governor.events import stop_request
from governor.events.names import INTERACTIONS_SOURCE, STOP_REQUEST_KIND, STOP_REQUESTED
from governor.interactions.domain import BUTTON_KIND, STOP_NOW, button_record
from governor_cli.demo.hooks import provided
from governor_cli.testing.deployment import SLACK_SIGNING_SECRET
from governor_cli.testing.events import ACCOUNT, envelope
from governor_cli.testing.scenarios import CLICKER, RESPONSE_URL

if TYPE_CHECKING:
    from governor_cli.testing.deployment import Delivery, Deployment
    from governor_cli.testing.faults import FaultInjector

OWNER = "alice@example.com"  # the warning's owner (``warning_finding``)


def button(ledger: Ledger, instance_id: str, *, token: str | None = None, account: str | None = ACCOUNT) -> str:
    """What the notifier leaves when it posts the warning about ``instance_id`` with its buttons (Keep 4 h, Keep until
    tomorrow, Stop now): the token's ledger record. Returns the token."""
    finding = provided("warning_finding")(instance_id).model_copy(update={"account": account})
    token = token or uuid.uuid4().hex
    ledger.put_item(BUTTON_KIND, token, button_record(finding, token))
    return token


def recorded_click(
    ledger: Ledger,
    instance_id: str,
    at: dt.datetime,
    *,
    seed: str | None = None,
    requested_by: str = OWNER,
    account: str | None = ACCOUNT,
) -> dict[str, Any]:
    """A verified Stop now click on a fresh warning about ``instance_id``, made at ``at``: the button record, the
    click's record, and the event handed on (named by the click's id). ``seed`` makes the token repeatable."""
    token = uuid.uuid5(uuid.NAMESPACE_URL, seed).hex if seed else uuid.uuid4().hex
    button(ledger, instance_id, token=token, account=account)
    click = stop_request.click_key(token, CLICKER, f"{at.timestamp():.6f}")
    item = stop_request.record(
        instance_id=instance_id,
        requested_by=requested_by,
        slack_user=CLICKER,
        response_url=RESPONSE_URL,
        token=token,
        team="vision",
        account=account,
        clicked_at=at,
    )
    ledger.put_item(STOP_REQUEST_KIND, click, item)
    detail = {
        "instance_id": instance_id,
        "requested_by": requested_by,
        "slack_user": CLICKER,
        "response_url": RESPONSE_URL,
        "token": token,
        "message_blocks": [],
    }
    return envelope(STOP_REQUESTED, INTERACTIONS_SOURCE, detail, event_id=click, account=account or ACCOUNT, time=at)


def signed_request(
    token: str, at: dt.datetime, secret: str, *, user: str = CLICKER, action_id: str = STOP_NOW
) -> dict[str, Any]:
    """Slack's POST of a click on the button ``action_id`` of the message whose buttons carry ``token``, made at
    ``at``: a Lambda Function URL event (payload format 2.0), form body ``payload=``, signed v0 with ``secret``."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "example"},
        "response_url": RESPONSE_URL,
        "trigger_id": f"{int(at.timestamp())}.1.soak",
        "message": {"blocks": [{"type": "actions", "block_id": f"governor:{token}", "elements": []}]},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": f"governor:{token}",
                "value": token,
                "action_ts": f"{at.timestamp():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(at.timestamp()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "version": "2.0",
        "rawPath": "/",
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": timestamp,
            "x-slack-signature": f"v0={digest}",
        },
        "requestContext": {"http": {"method": "POST", "path": "/", "sourceIp": "3.3.3.3"}, "timeEpoch": 0},
        "body": body,
        "isBase64Encoded": False,
    }


@dataclass
class Handed:
    """What a labelled delivery invoked asynchronously, one event per execution that reached Lambda (a lost answer
    resent is two): hand-overs to this function's worker, and Stop now handed on to the function that stops."""

    worker: list[dict[str, Any]] = field(default_factory=list)
    onward: list[dict[str, Any]] = field(default_factory=list)


def handed(injector: FaultInjector, label: str) -> Handed:
    """The asynchronous Invokes made by the delivery labelled ``label`` (all its attempts)."""
    found = Handed()
    for call in list(injector.calls):
        if not (call.label or "").startswith(f"{label}#") or call.operation != "Invoke" or not call.executed:
            continue
        event = json.loads(call.params.get("Payload") or b"{}")
        name = str(call.params.get("FunctionName") or "").rsplit(":", 1)[-1]
        (found.worker if name.endswith(FUNCTION) else found.onward).extend([event] * call.executed)
    return found


#: This function, as the reliability harness deploys it.
FUNCTION = "interactions"


@dataclass
class StopNowClicker:
    """A person answering the warning about one instance with Stop now, for the reliability runs: each click is
    Slack's signed POST to this function's Function URL (answered once, never retried), then its worker's
    asynchronous run; what either invokes is returned for the caller to deliver (Lambda's part)."""

    token: str
    function: str = FUNCTION

    def post(
        self, deployment: Deployment, injector: FaultInjector, at: dt.datetime, label: str
    ) -> tuple[Delivery, Handed]:
        request = signed_request(self.token, at, SLACK_SIGNING_SECRET)
        delivery = deployment.request(self.function, request, injector=injector, label=label)
        return delivery, handed(injector, label)

    def work(
        self, deployment: Deployment, injector: FaultInjector, event: dict[str, Any], label: str
    ) -> tuple[Delivery, Handed]:
        delivery = deployment.deliver(self.function, event, injector=injector, label=label)
        return delivery, handed(injector, label)

    def handed(self, injector: FaultInjector, label: str) -> Handed:
        """What the delivery labelled ``label`` of this function invoked (a replayed worker hands Stop now on)."""
        return handed(injector, label)
