"""The ``notifier`` function: findings from the ``governor`` bus to Slack and email, routed, merged, within limits.

Enforcers never talk to people; this function does. Each finding is routed by severity and team, merged with recent
findings about the same resource and rule (state in the ledger), rendered, and delivered. Report-only
(``notifications.enforce: false``) renders and logs without sending. A delivery that still fails after its retries
raises, so Lambda retries the event and finally parks it in the DLQ; channels already delivered are not repeated.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from governor.adapters.aws import per_session
from governor.adapters.delivery import DELIVERY_KIND, AwsOutbox, Outbox, UndeliverableError
from governor.adapters.slack import MessageGone, SlackBot
from governor.domain.decision import Finding
from governor.domain.messages import MAX_BLOCKS, Block, Email, Message
from governor.domain.times import parse_time
from governor.events.envelopes import parse_model
from governor.events.findings import DETAIL_TYPE as DETAIL_TYPE
from governor.events.findings import SOURCE as SOURCE
from governor.events.findings import FindingEvent, parse_finding_event
from governor.notifier.domain import (
    BOT_CHANNEL,
    MERGE_KIND,
    Delivery,
    MergedFinding,
    decide_notification,
    merge_key,
    owner_address,
    plan_deliveries,
)
from governor.notifier.flush import SCHEDULE_SOURCE, DigestTick, flush, hold
from governor.notifier.render import email_for, slack_messages, slack_people
from governor.observability import logger, metrics
from governor.registry import REGISTRY
from governor.runtime import Handler, Invocation, Runtime

#: How long a message's buttons work: a warning's instance is long stopped or kept by then.
BUTTON_TTL = dt.timedelta(days=7)


@per_session
def _outbox(region: str | None, sender: str | None) -> AwsOutbox:
    return AwsOutbox(region, sender)


def parse(raw: Any, account: str | None = None) -> FindingEvent:
    """Only findings from the governor itself, in its own account (``governor.events.findings``)."""
    return parse_finding_event(raw, account, "notifier")


def with_buttons(item: MergedFinding, runtime: Runtime, now: dt.datetime) -> MergedFinding:
    """The buttons of the capabilities that answer clicks (registry ``buttons``: Keep 4 h / Keep until tomorrow / Stop
    now on idle warnings, Acknowledge on Spot and security findings, while ``interactions.buttons`` is on). A button
    carries an opaque token; what it stands for stays in the ledger."""
    if item.finding.members:  # an owner's digest: each instance its own buttons, as if it were posted alone
        member_buttons = tuple(_buttons(m, runtime, now) for m in item.finding.members)
        return replace(item, member_buttons=member_buttons) if any(member_buttons) else item
    buttons = _buttons(item.finding, runtime, now)
    return replace(item, buttons=buttons) if buttons is not None else item


def _buttons(finding: Finding, runtime: Runtime, now: dt.datetime) -> dict[str, Any] | None:
    expires_at = int((now + BUTTON_TTL).timestamp())
    for make in REGISTRY.button_makers():
        made = make(finding, runtime.policy, expires_at)
        if made is not None:
            runtime.ledger.put_item(made.kind, made.key, made.record)
            return made.block
    return None


@functools.lru_cache(maxsize=2048)
def _looked_up(region: str | None, secret: str, email: str) -> str | None:
    """One ``users.lookupByEmail`` per owner per container (found or not): a sweep's warnings about one owner's ten
    instances ask Slack once. A failure (no token, Slack down) is not cached as an answer and pings nobody."""
    from governor.adapters.slack_app import SlackDirectory, SlackSecrets

    return SlackDirectory(SlackSecrets(region).value(secret)).user_id(email)


def people_for(finding: Finding, runtime: Runtime) -> dict[str, str]:
    """Email -> Slack user id for the mentions of this finding's message: ``interactions.slack_users`` first; an owner
    it does not list is looked up with ``users.lookupByEmail`` when the policy names a bot token
    (``interactions.bot_token_secret_name``). Only an owner address in ``notifications.owner_email_domains`` is looked
    up: a tag any account user can set never chooses whom an unvetted address pings."""
    app = REGISTRY.slack_app(runtime.policy)
    people, secret = slack_people(app.people), app.bot_token_secret_name
    address = owner_address(finding.owner, runtime.policy.notifications)
    if not secret or not address or address.lower() in people:
        return people
    try:
        user = _looked_up(runtime.region, secret, address.lower())
    except Exception as error:  # a mention is a courtesy: the message goes out without it
        logger.warning("Slack user lookup failed", extra={"error": type(error).__name__})
        return people
    return {**people, address.lower(): user} if user else people


#: The ledger kind holding, per instance (key: instance id), the Slack message of its current idle episode:
#: ``channel``, ``ts`` and whether it is an owner's digest. Written only when the bot posts (a webhook gives no ts).
THREAD_KIND = "notify-thread"


@functools.lru_cache(maxsize=8)
def _bot(region: str | None, secret: str) -> SlackBot:
    from governor.adapters.slack_app import SlackSecrets

    return SlackBot(SlackSecrets(region).value(secret))


def _bot_for(runtime: Runtime) -> SlackBot:
    secret = REGISTRY.slack_app(runtime.policy).bot_token_secret_name
    if not secret:  # the policy refuses a slack_channel without it; a hand-built runtime gets a clear answer
        raise UndeliverableError("notifications.slack_channel needs interactions.bot_token_secret_name")
    return _bot(runtime.region, secret)


def post_by_bot(
    bot: SlackBot, channel: str, messages: list[Message], finding: Finding, runtime: Runtime, now: dt.datetime
) -> str:
    """One message per idle episode. A warning (or an owner's digest) is a new post whose ``ts`` is kept per instance;
    a later finding about the same instance's episode (stopped, reported, …) updates that message in place with
    ``chat.update``, or, when the message is an owner's digest of several instances, replies in its thread (an
    update would rewrite the other instances' rows and could bring back buttons already clicked). A message that is
    gone or can no longer be edited (``message_not_found``, ``cant_update_message``, ``edit_window_closed``) gets a
    new post instead. Returns how it went: ``posted``, ``updated`` or ``replied``."""
    first, rest = messages[0], messages[1:]
    thread = None
    starts = _episode_starts(finding.policy)
    if starts and finding.rule not in starts and not finding.members:
        thread = runtime.ledger.get_item(THREAD_KIND, finding.resource)
        if thread and (thread.get("channel") != channel or thread.get("withdrawn_at")):
            thread = None
    how = "posted"
    ts = ""
    if thread:
        try:
            if thread.get("digest"):
                bot.post(channel, first, thread_ts=str(thread["ts"]))
                ts, how = str(thread["ts"]), "replied"
            else:
                ts = bot.update(channel, str(thread["ts"]), _updated(first, thread))
                how = "updated"
        except MessageGone as gone:
            logger.info("episode message gone: posting anew", extra={"reason": str(gone)})
            ts, how = "", "posted"
    if how == "posted":
        ts = bot.post(channel, first)
        episodes = [m.resource for m in finding.members] if finding.members else [finding.resource]
        if starts and ts:
            expires = int((now + BUTTON_TTL).timestamp())
            for resource in episodes:
                record = {"channel": channel, "ts": ts, "digest": bool(finding.members), "expires_at": expires}
                runtime.ledger.put_item(THREAD_KIND, resource, {**record, "posted_at": now.isoformat()})
    for part in rest:  # the later parts of a long message go into its thread
        bot.post(channel, part, thread_ts=ts or None)
    metrics.add_metric(name=f"SlackMessages{how.capitalize()}", unit="Count", value=1)
    return how


def _episode_starts(policy: str) -> frozenset[str]:
    """The rules that open an episode for the capability whose findings carry ``policy`` (registry:
    ``episode_starts``); empty when its findings are not threaded per episode."""
    return frozenset(rule for c in REGISTRY.values() if policy in c.policies for rule in c.episode_starts)


def _updated(message: Message, thread: dict[str, Any]) -> Message:
    """The new content, with a line saying it replaced the episode's earlier message (the warning)."""
    posted = parse_time(thread.get("posted_at"))
    when = f" posted {posted:%Y-%m-%d %H:%M} UTC" if posted else ""
    note = {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f"Updated in place: this was the idle warning{when}."}],
    }
    blocks = list(message.get("blocks") or [])
    return {**message, "blocks": [*blocks, note] if len(blocks) < MAX_BLOCKS else blocks}


def withdraw(
    parsed: FindingEvent, raw: Any, thread: Mapping[str, Any], runtime: Runtime, now: dt.datetime
) -> dict[str, Any]:
    """A withdrawn warning corrects its episode's message and posts nothing new: the warning is updated in place
    (``chat.update``, its buttons gone), or an owner's digest gets a reply in its thread (an update would rewrite the
    other instances' rows). A message that is gone needs no correction. The episode's record is then closed, so a
    later finding about the resource does not update a withdrawn warning."""
    finding: Finding = parsed.detail
    channel, ts = str(thread["channel"]), str(thread["ts"])
    if not runtime.policy.notifications.enforce:
        logger.info("report-only: not sent", extra={"channel": "slack", "target": [f"{BOT_CHANNEL}{channel}"]})
        return {"status": "report-only", "withdraw": ts}
    marker = f"{finding.id or parsed.id}#withdraw"
    if runtime.ledger.get_item(DELIVERY_KIND, marker):
        return {"status": "sent", "sent": 0}
    first = slack_messages([MergedFinding(finding)])[0]
    try:
        bot = _bot_for(runtime)
        if thread.get("digest"):
            bot.post(channel, first, thread_ts=ts)
            how = "replied"
        else:
            bot.update(channel, ts, _updated(first, dict(thread)))
            how = "updated"
    except MessageGone as gone:
        logger.info("withdrawn warning's message gone: nothing to correct", extra={"reason": str(gone)})
        how = "gone"
    except Exception as error:
        reason = undeliverable_reason(error)
        if reason is None:  # a retry may work: the invocation fails, the event is retried, then DLQ'd
            metrics.add_metric(name="NotificationFailures", unit="Count", value=1)
            raise DeliveryFailed(f"slack: {error}") from None
        logger.error("channel unusable", extra={"channel": "slack", "reason": reason})
        metrics.add_metric(name="NotificationsUndeliverable", unit="Count", value=1)
        runtime.dead_letters.send(raw, f"undeliverable: {reason}")
        return {"status": "undeliverable", "undeliverable": [reason]}
    runtime.ledger.put_item(THREAD_KIND, finding.resource, {**thread, "withdrawn_at": now.isoformat()})
    runtime.ledger.put_item(DELIVERY_KIND, marker, {"event_id": parsed.id, "channel": "slack", "to": [channel]})
    metrics.add_metric(name=f"SlackMessages{how.capitalize()}", unit="Count", value=1)
    return {"status": "withdrawn", "how": how}


def _describe(delivery: Delivery) -> dict[str, Any]:
    """What a log line may say about a destination: the secret's name and the recipients, never the webhook URL."""
    return {"channel": delivery.channel, "target": list(delivery.target)}


def _send(
    delivery: Delivery,
    content: list[Message] | Email,
    finding: Finding,
    runtime: Runtime,
    outbox: Outbox,
    now: dt.datetime,
) -> None:
    """One destination: a channel id through the bot (threaded per episode), a webhook, or email through SES."""
    if isinstance(content, list) and delivery.target[0].startswith(BOT_CHANNEL):
        post_by_bot(_bot_for(runtime), delivery.target[0].removeprefix(BOT_CHANNEL), content, finding, runtime, now)
    elif isinstance(content, list):
        outbox.post_slack(delivery.target[0], content)
    else:
        outbox.send_email(delivery.target, content)


def _failed(delivery: Delivery, error: Exception) -> tuple[str | None, str | None]:
    """A destination that failed, logged: ``(why it can never take the message, None)`` or ``(None, retryable)``."""
    if (reason := undeliverable_reason(error)) is not None:
        logger.error("channel unusable", extra={**_describe(delivery), "reason": reason})
        return reason, None
    logger.error("delivery failed", extra={**_describe(delivery), "reason": str(error)})
    return None, f"{delivery.channel}: {error}"


@dataclass
class _Delivered:
    """How one finding's deliveries went: how many were sent, which destinations can never take it, which failed."""

    sent: int = 0
    undeliverable: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _deliver(
    parsed: FindingEvent,
    rendered: Mapping[Any, list[Message] | Email],
    deliveries: list[Delivery],
    runtime: Runtime,
    outbox: Outbox,
    now: dt.datetime,
) -> _Delivered:
    """Each destination once per finding id (a marker in the ledger after it took the message); every failure is
    logged and kept, so the others are still tried."""
    finding: Finding = parsed.detail
    done = _Delivered()
    for delivery in deliveries:
        # A finding re-published by an outbox keeps its id: it is delivered once per channel, whatever event carried it.
        marker = f"{finding.id or parsed.id}#{delivery.key}"
        if runtime.ledger.get_item(DELIVERY_KIND, marker):
            continue
        try:
            _send(delivery, rendered[delivery.key], finding, runtime, outbox, now)
        except Exception as error:  # every failure is logged, then raised by the caller so the event is retried
            reason, failure = _failed(delivery, error)
            done.undeliverable += [reason] if reason is not None else []
            done.failures += [failure] if failure is not None else []
            continue
        # "to", not "target": a top-level ``target`` is the by-target index's key (a string, ``account#region``)
        sent = {"event_id": parsed.id, "channel": delivery.channel, "to": list(delivery.target)}
        runtime.ledger.put_item(DELIVERY_KIND, marker, sent)
        metrics.add_metric(name="NotificationsSent", unit="Count", value=1)
        done.sent += 1
    return done


def notify(parsed: FindingEvent, raw: Any, runtime: Runtime, outbox: Outbox, now: dt.datetime) -> dict[str, Any]:
    """Route, merge, record, then deliver; merge state advances only once every channel has the message."""
    policy = runtime.policy.notifications
    finding: Finding = parsed.detail
    key = merge_key(finding)
    plan = decide_notification(
        finding,
        policy,
        lambda: runtime.ledger.get_item(MERGE_KIND, key),
        now,
        lambda: runtime.ledger.get_item(THREAD_KIND, finding.resource),
    )
    runtime.ledger.record(plan.decision, event_id=parsed.id)
    if plan.withdraw is not None:
        return withdraw(parsed, raw, plan.withdraw, runtime, now)
    step = plan.step
    if plan.digest:
        if plan.held_for:
            hold(finding, plan.held_for, runtime, now)
        return {"status": "digest", "reason": plan.decision.reasons[0]}
    if step is None:
        return {"status": "not-sent", "reason": plan.decision.reasons[0]}
    if not step.send:
        runtime.ledger.put_item(MERGE_KIND, key, step.state)
        metrics.add_metric(name="FindingsMerged", unit="Count", value=1)
        return {"status": "merged", "merged": step.item.merged}
    item = with_buttons(step.item, runtime, now)
    deliveries = plan_deliveries([item], policy)
    people = people_for(finding, runtime)
    rendered: dict[Any, list[Message] | Email] = {
        d.key: (slack_messages(d.items, people) if d.channel == "slack" else email_for(d.items, d.target))
        for d in deliveries
    }
    if not policy.enforce:
        for delivery in deliveries:
            content = rendered[delivery.key]
            size = len(content) if isinstance(content, list) else 1
            logger.info("report-only: not sent", extra={**_describe(delivery), "messages": size})
        runtime.ledger.put_item(MERGE_KIND, key, step.state)
        return {"status": "report-only", "deliveries": [_describe(d) for d in deliveries]}
    done = _deliver(parsed, rendered, deliveries, runtime, outbox, now)
    if done.undeliverable:
        metrics.add_metric(name="NotificationsUndeliverable", unit="Count", value=len(done.undeliverable))
        runtime.dead_letters.send(raw, "undeliverable: " + "; ".join(done.undeliverable))
    if done.failures:
        metrics.add_metric(name="NotificationFailures", unit="Count", value=len(done.failures))
        raise DeliveryFailed("; ".join(done.failures))
    if not done.undeliverable:
        # A channel that could not be used parked the event: its replay (once the configuration is fixed) must find
        # the merge state as it was, or it would take its own finding for a repeat and send nothing.
        runtime.ledger.put_item(MERGE_KIND, key, step.state)
    status = "sent" if not done.undeliverable else "partly-undeliverable" if done.sent else "undeliverable"
    return {"status": status, "sent": done.sent, "undeliverable": done.undeliverable}


# SESv2 errors that say the message or the account cannot send; throttling and 5xx are absent on purpose
SES_PERMANENT_ERRORS = frozenset(
    {
        "MessageRejected",
        "MailFromDomainNotVerifiedException",
        "AccountSuspendedException",
        "SendingPausedException",
        "NotFoundException",
        "BadRequestException",
    }
)


def undeliverable_reason(error: Exception) -> str | None:
    """Why a delivery can never succeed (Slack 403 ``invalid_token``, 404 ``channel_not_found``, an SES rejection),
    or None when a retry might: retrying the first kind through three Lambda invocations only delays the DLQ."""
    if isinstance(error, UndeliverableError) or getattr(error, "permanent", False):
        return str(error)
    response = getattr(error, "response", None)
    code = ((response or {}).get("Error") or {}).get("Code") if isinstance(response, dict) else None
    if code in SES_PERMANENT_ERRORS:
        message = (response or {}).get("Error", {}).get("Message") or ""
        return f"email refused by SES: {code}: {message}".rstrip(": ")
    return None


class DeliveryFailed(RuntimeError):
    """At least one channel still failed after its retries: the invocation fails so the event is retried, then DLQ'd."""


def process(parsed: FindingEvent | DigestTick, runtime: Runtime, outbox: Outbox, call: Invocation) -> dict[str, Any]:
    """Deliveries run once per event id (Powertools Idempotency when the stack provides the table); the schedule's
    tick posts each channel's digest of what was held back (``governor.notifier.flush``)."""
    if isinstance(parsed, DigestTick):
        buttons = functools.partial(digest_buttons, runtime=runtime, now=call.now)
        people = functools.partial(people_for, runtime=runtime)
        return flush(parsed, runtime, outbox, buttons, _bot_poster(runtime), people)
    return notify(parsed, call.event, runtime, outbox, call.now)


def digest_buttons(finding: Finding, runtime: Runtime, now: dt.datetime) -> tuple[tuple[str, Block], ...]:
    """A held warning's buttons in the digest, each with its instance (an owner's digest: one per member)."""
    members = finding.members or [finding]
    made = ((m.resource, _buttons(m, runtime, now)) for m in members)
    return tuple((resource, block) for resource, block in made if block is not None)


def _bot_poster(runtime: Runtime) -> Callable[[str, list[Message]], None]:
    def post(channel: str, messages: list[Message]) -> None:
        bot = _bot_for(runtime)
        ts = bot.post(channel, messages[0])
        for part in messages[1:]:
            bot.post(channel, part, thread_ts=ts or None)

    return post


def parse_any(raw: Any, account: str | None = None) -> FindingEvent | DigestTick:
    """The schedule's tick (``aws.scheduler``), else only findings from the governor itself, in its own account."""
    if isinstance(raw, dict) and raw.get("source") == SCHEDULE_SOURCE:
        return parse_model(DigestTick, raw)
    return parse(raw, account)


def adapters_for(event: Any, runtime: Runtime) -> Outbox:
    """The notifier's one adapter: its outbox (Slack, SES)."""
    return _outbox(runtime.region, runtime.policy.notifications.email_sender)


def handle(
    event: Any,
    runtime: Runtime,
    outbox: Outbox | None = None,
    now: dt.datetime | None = None,
    context: Any = None,
    account: str | None = None,
) -> dict[str, Any]:
    """Parse at the edge (anything but a governor finding from this account goes to the DLQ), then route and deliver.

    ``account`` defaults to the one in the Lambda context's function ARN, so the check always runs in the cloud.
    """
    return HANDLER.handle(event, runtime, outbox, context=context, now=now, account=account)


#: The governor bus rule (source gpu-fleet-governor, detail-type Governor Finding) lands here.
HANDLER: Handler[FindingEvent | DigestTick, Outbox] = Handler(
    __name__, parse=lambda raw, call: parse_any(raw, call.account), process=process, adapters=adapters_for
)
lambda_handler = HANDLER.lambda_handler()
