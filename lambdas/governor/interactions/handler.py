"""The ``interactions`` function: Slack's button clicks (Keep 4 h, Keep until tomorrow, Stop now, Acknowledge).

One function, two entries. Behind its Lambda Function URL it answers Slack within the 3-second limit: it verifies the
v0 signature with ``slack_sdk``'s ``SignatureVerifier`` (signing secret from Secrets Manager, requests older than five
minutes refused, constant-time comparison), parses the click, hands it to itself as an asynchronous invocation and
returns 200. The asynchronous invocation does the work once per click (Powertools Idempotency on Slack's action):
it resolves the button's token in the ledger, re-reads the instance, resolves the Slack user to a person, checks they
may act, records the decision with who clicked, acts (the snooze tag; Stop now through the idle function's own act
path), and updates the message through ``response_url``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.adapters.aws import per_session
from governor.adapters.ec2 import Ec2Reader
from governor.adapters.slack_app import SecretUnavailable, SlackDirectory, SlackSecrets, answer
from governor.domain.actions import AnyAction, Record, Tag
from governor.domain.decision import Decision
from governor.domain.fleet import KEEP_KIND, ownership
from governor.domain.ports import utcnow
from governor.events import stop_request as stop_requests
from governor.events.envelopes import GovernorEvent, InvalidEventError, parse_model
from governor.interactions import stop_claim
from governor.interactions.domain import (
    ACKNOWLEDGED_POLICIES,
    BUTTON_KIND,
    CLICKED,
    IDLE_BUTTONS,
    KEEP_HOURS,
    KEEP_MORNING,
    MAX_BODY_BYTES,
    SOURCE,
    STOP_NOW,
    STOP_REQUEST_KIND,
    STOP_REQUESTED,
    Click,
    ClickError,
    Person,
    authorise,
    button_expired,
    ephemeral,
    keep_until,
    ownership_changes,
    parse_click,
    person_from_policy,
    updated_message,
)
from governor.interactions.slack_calls import AsyncInvoker, SnoozeTagger, endpoint_client
from governor.observability import logger, metrics
from governor.policy import Policy
from governor.registry import REGISTRY
from governor.runtime import Handler, Invocation, Runtime

POLICY = "interactions"
#: A click older than this when its worker runs (a retry hours later, a DLQ replay) acts on nothing.
MAX_CLICK_AGE = dt.timedelta(minutes=30)


@dataclass
class Adapters:
    """What the endpoint calls; tests and the demo pass the same classes pointed at moto, or fakes."""

    secrets: SlackSecrets
    instances: Ec2Reader
    tagger: SnoozeTagger
    invoker: AsyncInvoker
    idle_function: str | None = None
    directory: Callable[[str], SlackDirectory] = SlackDirectory
    respond: Callable[[str, dict[str, Any]], bool] = answer
    clock: Callable[[], dt.datetime] = field(default=utcnow)
    #: The endpoint's hand-over to its worker: one quick attempt, so Slack gets its answer within 3 s.
    handover: AsyncInvoker | None = None


@per_session
def _aws(region: str | None) -> Adapters:
    return Adapters(
        SlackSecrets(region, endpoint_client("secretsmanager", region)),
        Ec2Reader(region),
        SnoozeTagger(region),
        AsyncInvoker(region),
        idle_function=os.environ.get("IDLE_FUNCTION") or None,
        handover=AsyncInvoker(region, endpoint_client("lambda", region)),
    )


class ClickEvent(GovernorEvent):
    """A verified click, as the endpoint hands it to its own asynchronous invocation."""

    detail: Click  # type: ignore[assignment]


class _Clock:
    """``SignatureVerifier`` asks a clock for epoch seconds; this one is the handler's (simulated in the demo)."""

    def __init__(self, now: Callable[[], dt.datetime]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now().timestamp()


def _http(status: int, text: str = "") -> dict[str, Any]:
    body = json.dumps({"text": text}) if text else ""
    return {"statusCode": status, "headers": {"Content-Type": "application/json"}, "body": body}


def is_http(event: Any) -> bool:
    """A Function URL request (payload format 2.0) rather than the function's own asynchronous invocation."""
    return (
        isinstance(event, dict) and isinstance(event.get("requestContext"), dict) and "http" in event["requestContext"]
    )


def verified_body(event: dict[str, Any], secret: str, clock: Callable[[], dt.datetime]) -> str | None:
    """The raw body when Slack's v0 signature over it is valid and its timestamp within five minutes, else None."""
    from slack_sdk.signature import SignatureVerifier

    raw = event.get("body") or ""
    try:
        body = base64.b64decode(raw).decode() if event.get("isBase64Encoded") else str(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    if not timestamp or not signature or not timestamp.isdigit():
        return None
    verifier = SignatureVerifier(secret, clock=_Clock(clock))  # type: ignore[arg-type]
    return body if verifier.is_valid(body=body, timestamp=timestamp, signature=signature) else None


def signed_at(event: dict[str, Any]) -> dt.datetime:
    """Slack's request timestamp, once :func:`verified_body` has checked it (digits, signed, within five minutes)."""
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    return dt.datetime.fromtimestamp(int(headers["x-slack-request-timestamp"]), dt.UTC)


def receive(event: dict[str, Any], runtime: Runtime, aws: Adapters, context: Any = None) -> dict[str, Any]:
    """Verify, parse, hand over, answer: nothing is read or changed on Slack's say-so before the signature holds.

    A body too large to be a click is answered 400 before anything is read (base64 adds a third at most).
    """
    if len(str(event.get("body") or "")) > MAX_BODY_BYTES * 4 // 3 + 4:
        metrics.add_metric(name="InteractionsRefused", unit="Count", value=1)
        return _http(400, f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        secret = aws.secrets.value(runtime.policy.interactions.signing_secret_name)
    except SecretUnavailable as error:
        logger.error("signing secret unavailable", extra={"reason": str(error)})
        metrics.add_metric(name="InteractionsRefused", unit="Count", value=1)
        return _http(503, "the governor cannot verify requests: its signing secret is missing")
    body = verified_body(event, secret, aws.clock)
    if body is None:
        logger.warning("interaction refused: bad, stale or missing signature")
        metrics.add_metric(name="InteractionsForged", unit="Count", value=1)
        return _http(401, "invalid or stale signature")
    try:
        click = parse_click(body).model_copy(update={"signed_at": signed_at(event)})
    except ClickError as error:
        logger.warning("interaction refused", extra={"reason": str(error)})
        metrics.add_metric(name="InteractionsRefused", unit="Count", value=1)
        return _http(400, str(error))
    worker = getattr(context, "invoked_function_arn", None) or os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    if not worker:
        raise RuntimeError("no function to hand the click to (no Lambda context)")
    now = aws.clock()
    (aws.handover or aws.invoker).invoke(worker, click_event(click, now, runtime))
    metrics.add_metric(name="InteractionsAccepted", unit="Count", value=1)
    logger.info("click accepted", extra={"action": click.action_id, "slack_user": click.user_id})
    return _http(200)


def click_event(click: Click, now: dt.datetime, runtime: Runtime) -> dict[str, Any]:
    """The worker's event: the click's key is its id, so idempotency holds a retried or replayed click back."""
    return {
        "version": "0",
        "id": click.key,
        "detail-type": CLICKED,
        "source": SOURCE,
        "account": "",
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": runtime.region or "",
        "resources": [],
        "detail": click.model_dump(mode="json"),
    }


def parse(raw: Any) -> ClickEvent:
    """Only the endpoint's own hand-over; anything else goes to the DLQ with the reason."""
    event = parse_model(ClickEvent, raw)
    if event.source != SOURCE or event.detail_type != CLICKED:
        raise InvalidEventError(
            f"unsupported event {event.source}/{event.detail_type!r}: the interactions worker takes '{CLICKED}' "
            "events from its own endpoint",
            event.id,
        )
    return event


def resolve(click: Click, runtime: Runtime, aws: Adapters) -> Person:
    """The policy's ``slack_users`` first; else ``users.info`` with the bot token, when one is configured."""
    known = person_from_policy(click.user_id, runtime.policy)
    if known is not None:
        return known
    token_name = runtime.policy.interactions.bot_token_secret_name
    if token_name:
        try:
            email = aws.directory(aws.secrets.value(token_name)).email(click.user_id)
        except SecretUnavailable as error:
            logger.error("bot token unavailable", extra={"reason": str(error)})
            email = None
        if email:
            return Person(click.user_id, email, "slack")
    return Person(click.user_id, None, "unknown")


def _record(
    runtime: Runtime,
    event: ClickEvent,
    resource: str,
    verdict: Any,
    rule: str,
    reasons: list[str],
    person: Person | None,
    actions: Sequence[AnyAction] | None = None,
    **evidence: Any,
) -> None:
    click = event.detail
    runtime.ledger.record(
        Decision(
            policy=POLICY,
            verdict=verdict,
            resource=resource,
            actions=list(actions or []),
            reasons=reasons,
            evidence={
                "button": click.action_id,
                "token": click.token,
                "slack_user": click.user_id,
                "clicked_by": person.email if person else None,
                "person_source": person.source if person else None,
                "action_ts": click.action_ts,
                **evidence,
            },
            severity="info",
            rule=rule,
        ),
        event_id=event.id,
    )


def _refuse(
    event: ClickEvent,
    runtime: Runtime,
    aws: Adapters,
    resource: str,
    why: str,
    person: Person | None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """A recorded refusal and an answer only the clicking user sees."""
    _record(runtime, event, resource, "ignored", "interactions.refused", [why, *notes], person)
    metrics.add_metric(name="InteractionsRefused", unit="Count", value=1)
    aws.respond(event.detail.response_url, ephemeral(f"Not done: {why}"))
    return {"status": "refused", "reason": why}


def _target_refusal(
    click: Click, record: dict[str, Any], resource: str, aws: Adapters, policy: Policy
) -> tuple[str | None, list[str]]:
    """Why the button's target cannot be acted on now (None when it can), and how its ownership changed since the
    message: an idle button's instance is re-read (running, a GPU fleet instance); an acknowledgement needs a
    finding that takes one."""
    if click.action_id not in IDLE_BUTTONS:
        if record.get("policy") not in ACKNOWLEDGED_POLICIES:
            return "this finding takes no acknowledgement", []
        return None, []
    instance = aws.instances.instance(resource)
    if instance is None or instance.state != "running":
        return f"{resource} is {instance.state if instance else 'gone'} now", []
    if not (policy.fleet.is_gpu_type(instance.type) and policy.fleet.carries_fleet_tags(instance.tags)):
        return f"{resource} is not a GPU fleet instance", []
    return None, ownership_changes(record.get("owner"), record.get("team"), ownership(instance.tags, policy.fleet))


def keep(
    event: ClickEvent,
    runtime: Runtime,
    aws: Adapters,
    now: dt.datetime,
    resource: str,
    person: Person,
    why: str,
    team: str | None,
) -> dict[str, Any]:
    """Keep 4 h / Keep until tomorrow, authorised: the snooze tag when enforcing; report-only remembers the snooze in
    the ledger, so report-only idle sweeps do not say "would be stopped" during the snooze asked for."""
    click = event.detail
    policy = runtime.policy
    enforce = policy.interactions.enforce
    until, what = keep_until(click.action_id, now, team, policy)
    if until is None:
        return _refuse(event, runtime, aws, resource, what, person)
    value = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    tag = policy.fleet.keep_until_tag
    reasons = [f"Keep {what} clicked by {person.label}; {why}", f"snoozed until {value}"]
    actions: list[AnyAction] = [Tag(enforced=enforce, tags={tag: value})]
    _record(runtime, event, resource, "act", "interactions.keep", reasons, person, actions, until=value)
    if enforce:
        aws.tagger.snooze(resource, tag, value)
    else:
        expires = int((until + dt.timedelta(days=1)).timestamp())
        kept = {"instance_id": resource, "until": value, "by": person.label, "expires_at": expires}
        runtime.ledger.put_item(KEEP_KIND, resource, kept)
    suffix = "" if enforce else " (report-only: nothing changed)"
    note = f"Kept until {value} ({what}) by {person.label}{suffix}"
    aws.respond(click.response_url, updated_message(click.message_blocks, click.token, note))
    metrics.add_metric(name="InteractionsKeep", unit="Count", value=1)
    return {"status": "kept" if enforce else "report-only", "instance": resource, "until": value}


def act(event: ClickEvent, runtime: Runtime, aws: Adapters) -> dict[str, Any]:
    """Token → finding → fresh instance → person → authorised? → record → act → update the message."""
    click = event.detail
    policy = runtime.policy
    now = max(aws.clock(), event.time)
    if now - (click.signed_at or event.time) > MAX_CLICK_AGE:
        return _refuse(event, runtime, aws, "gpu-fleet", f"the click is older than {MAX_CLICK_AGE}", None)
    record = runtime.ledger.get_item(BUTTON_KIND, click.token)
    if not record or click.action_id not in (record.get("buttons") or []):
        return _refuse(event, runtime, aws, "gpu-fleet", "this button belongs to no message the governor sent", None)
    resource = str(record.get("resource") or "")
    expired = button_expired(record, now)
    if expired:
        return _refuse(event, runtime, aws, resource, expired, None)
    person = resolve(click, runtime, aws)
    refused, changed = _target_refusal(click, record, resource, aws, policy)
    if refused is not None:
        return _refuse(event, runtime, aws, resource, refused, person)
    # Authorised against the owner and team recorded when the message was sent, never the tags at click time.
    owner, team = record.get("owner"), record.get("team")
    allowed, why = authorise(person, owner, team, policy)
    if not allowed:
        return _refuse(event, runtime, aws, resource, f"not yours: {why}", person, changed)
    why = "; ".join([why, *changed])
    if click.action_id in (KEEP_HOURS, KEEP_MORNING):
        return keep(event, runtime, aws, now, resource, person, why, team)
    if click.action_id == STOP_NOW:
        return stop_now(event, runtime, aws, now, resource, person, why, record)
    reasons = [f"acknowledged by {person.label}; {why}"]
    _record(runtime, event, resource, "act", "interactions.acknowledge", reasons, person, [Record()])
    aws.respond(
        click.response_url, updated_message(click.message_blocks, click.token, f"Acknowledged by {person.label}")
    )
    metrics.add_metric(name="InteractionsAcknowledged", unit="Count", value=1)
    return {"status": "acknowledged", "resource": resource}


def stop_now(
    event: ClickEvent,
    runtime: Runtime,
    aws: Adapters,
    now: dt.datetime,
    resource: str,
    person: Person,
    why: str,
    button: dict[str, Any],
) -> dict[str, Any]:
    """Stop now, authorised: claim the message's Stop now (one hand-over per message at a time, whatever the number
    of clicks: :mod:`governor.interactions.stop_claim`), record, leave the click's record for the idle function (its
    time and expiry: :mod:`governor.events.stop_request`) and invoke it."""
    click = event.detail
    if not aws.idle_function:
        raise RuntimeError("IDLE_FUNCTION is not set: Stop now has nowhere to go")
    enforce = runtime.policy.interactions.enforce
    held: stop_claim.Claimed | None = None
    if enforce:
        if click.signed_at is None:
            why_not = "the click carries no signed time: Stop now acts only on a click verified at the endpoint"
            return _refuse(event, runtime, aws, resource, why_not, person)
        claimed = stop_claim.claim(
            runtime.ledger, token=click.token, click=event.id, clicked_at=click.signed_at, who=person.label
        )
        if isinstance(claimed, str):
            return _refuse(event, runtime, aws, resource, claimed, person)
        held = claimed
    reasons = [f"Stop now clicked by {person.label}; {why}", "handed to the idle function to re-check and stop"]
    actions: list[AnyAction] = [REGISTRY.parse_action({"type": "stop", "enforced": enforce, "via": "idle function"})]
    _record(runtime, event, resource, "act", "interactions.stop-now", reasons, person, actions)
    if held is not None:
        if not held.handed_over:
            # The idle function acts only on what this verified, authorised click recorded under its id: a Stop now
            # invoked by anyone else (a direct Invoke) finds no record, and a replay finds it expired or used.
            team, account = button.get("team"), button.get("account")
            runtime.ledger.put_item(STOP_REQUEST_KIND, event.id, stop_record(event, resource, person, team, account))
            aws.invoker.invoke(aws.idle_function, stop_request(event, resource, person, now))
            stop_claim.handed_over(runtime.ledger, held, now)
        note = f"Stop now requested by {person.label}: re-checking that {resource} is still idle"
    else:
        note = f"Stop now clicked by {person.label} (report-only: nothing changed)"
    aws.respond(click.response_url, updated_message(click.message_blocks, click.token, note))
    metrics.add_metric(name="InteractionsStopNow", unit="Count", value=1)
    return {"status": "stop-requested" if enforce else "report-only", "instance": resource}


def stop_request(event: ClickEvent, instance_id: str, person: Person, now: dt.datetime) -> dict[str, Any]:
    """What the idle function receives: the instance comes from the ledger's button record, never from Slack."""
    click = event.detail
    return {
        "version": "0",
        "id": event.id,
        "detail-type": STOP_REQUESTED,
        "source": SOURCE,
        "account": event.account or "",
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": event.region or "",
        "resources": [],
        "detail": {
            "instance_id": instance_id,
            "requested_by": person.email,
            "slack_user": person.slack_user,
            "response_url": click.response_url,
            "token": click.token,
            "message_blocks": click.message_blocks,
        },
    }


def stop_record(
    event: ClickEvent, instance_id: str, person: Person, team: str | None, account: str | None = None
) -> dict[str, Any]:
    """What the idle function takes Stop now from: who asked (verified and authorised here), for which instance, where
    to answer, the team the warning was sent to, the account it was about, and the click's signed time and expiry."""
    click = event.detail
    return stop_requests.record(
        instance_id=instance_id,
        requested_by=person.email,
        slack_user=person.slack_user,
        response_url=click.response_url,
        token=click.token,
        team=team,
        account=account,
        clicked_at=click.signed_at or event.time,
    )


def process(parsed: ClickEvent, runtime: Runtime, aws: Adapters, call: Invocation) -> dict[str, Any]:
    """Once per click (the event id is Slack's action: action id, token, user and action timestamp)."""
    return act(parsed, runtime, aws)


def front(event: Any, runtime: Runtime, aws: Adapters, context: Any) -> dict[str, Any] | None:
    """Slack's request through the Function URL is answered here; the function's own hand-over goes to the edge."""
    return receive(event, runtime, aws, context) if is_http(event) else None


def handle(event: Any, runtime: Runtime, aws: Adapters | None = None, context: Any = None) -> dict[str, Any]:
    """Slack's request through the Function URL, or the function's own hand-over of a verified click."""
    return HANDLER.handle(event, runtime, aws or _aws(runtime.region), context=context)


#: The Function URL (Slack's interactivity Request URL) and the function's own asynchronous invocations.
HANDLER: Handler[ClickEvent, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=lambda event, runtime: _aws(runtime.region),
    front=front,
)
lambda_handler = HANDLER.lambda_handler()
