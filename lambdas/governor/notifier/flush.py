"""Holding findings for the channel's digest, and posting each channel's digest when the notifier's schedule ticks.

At least once, never lost: an item is marked posted (``flushed_at``) only after its channel took the digest; a flush
that fails raises, so the Scheduler's retry (then the DLQ) finds the items still pending. Each digest is posted once
per channel and tick (a delivery marker with the tick's time), so a retry after a post whose marking failed marks
the items without posting again. Items held after the tick wait for the next one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field

from governor.adapters.delivery import DELIVERY_KIND, Outbox
from governor.domain.actions import Notify
from governor.domain.decision import Decision, Finding
from governor.domain.messages import Block
from governor.domain.model import Model
from governor.domain.times import parse_time
from governor.events.envelopes import EventBridgeEnvelope
from governor.notifier.digest import HELD_KIND, Held, digest_messages, held_item, held_key
from governor.notifier.domain import BOT_CHANNEL
from governor.observability import logger, metrics
from governor.runtime import Runtime

#: A held item not posted within this long is still posted by the next tick (the ledger keeps it this long).
HOLD_DAYS = 8
SCHEDULE_SOURCE = "aws.scheduler"


class DigestDetail(Model):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["digest"] = "digest"


class DigestTick(EventBridgeEnvelope):
    """The notifier's schedule (``notifications.digest_schedule``), shaped like a Scheduled Event."""

    detail: DigestDetail = Field(default_factory=DigestDetail)


def hold(finding: Finding, target: str, runtime: Runtime, now: dt.datetime) -> None:
    """Keep the finding for ``target``'s next digest (a repeat counts on its line)."""
    key = held_key(target, finding)
    previous = runtime.ledger.get_item(HELD_KIND, key)
    expires = int((now + dt.timedelta(days=HOLD_DAYS)).timestamp())
    runtime.ledger.put_item(HELD_KIND, key, held_item(target, finding, previous, now, expires))
    metrics.add_metric(name="FindingsHeldForDigest", unit="Count", value=1)


ButtonsOf = Callable[[Finding], tuple[tuple[str, Block], ...]]
Post = Callable[[str, list[dict[str, Any]]], None]
People = Callable[[Finding], Mapping[str, str]]


def flush(
    tick: DigestTick, runtime: Runtime, outbox: Outbox, buttons: ButtonsOf, post: Post, people: People
) -> dict[str, Any]:
    """Each channel's held findings (held up to the tick's time) as one digest; the items marked once posted.

    ``buttons`` makes a held warning's actions blocks (the handler's button makers); ``people`` the Slack ids of a
    finding's owner to mention (the handler's ``people_for``); ``post`` sends to a bot channel (``channel:<id>``);
    a webhook target goes through ``outbox.post_slack``.
    """
    at = tick.time or dt.datetime.now(dt.UTC)
    since = at - dt.timedelta(days=HOLD_DAYS)
    pending = [i for i in runtime.ledger.query_kind(HELD_KIND, since=since) if not i.get("flushed_at")]
    pending = [i for i in pending if (parse_time(i.get("held_at")) or at) <= at]
    by_target: dict[str, list[dict[str, Any]]] = {}
    for item in pending:
        by_target.setdefault(str(item["target"]), []).append(item)
    policy = runtime.policy.notifications
    if not policy.enforce:
        logger.info("report-only: digest not sent", extra={"targets": sorted(by_target), "items": len(pending)})
        return {"status": "report-only", "digests": len(by_target), "items": len(pending)}
    posted, failures = [], []
    for target, items in sorted(by_target.items()):
        findings = [Finding.model_validate(i["finding"]) for i in items]
        held = [Held(f, int(i.get("count", 1)), buttons(f)) for f, i in zip(findings, items, strict=True)]
        mentions = {email: user for f in findings for email, user in people(f).items()}
        first = min((parse_time(i.get("held_at")) for i in items), default=None, key=lambda t: t or at)
        marker = f"digest#{target}#{at.isoformat()}"
        try:
            if not runtime.ledger.get_item(DELIVERY_KIND, marker):
                _send(target, digest_messages(held, first, at, mentions), outbox, post)
                runtime.ledger.put_item(DELIVERY_KIND, marker, {"event_id": tick.id, "channel": "slack"})
        except Exception as error:  # the other channels are still served; this one's items stay pending
            logger.error("digest failed", extra={"target": target, "reason": str(error)})
            failures.append(f"{target}: {error}")
            continue
        runtime.ledger.put_many(
            (HELD_KIND, str(i["key"]), {**i, "flushed_at": at.isoformat(), "digest": marker}) for i in items
        )
        runtime.ledger.record(_posted(target, findings, policy.enforce), event_id=tick.id)
        metrics.add_metric(name="DigestsPosted", unit="Count", value=1)
        posted.append(target)
    if failures:
        raise DigestFailed("; ".join(failures))
    return {"status": "digest-posted", "digests": posted, "items": len(pending)}


def _send(target: str, messages: list[dict[str, Any]], outbox: Outbox, post: Post) -> None:
    """A bot channel (``channel:<id>``) through the bot token; a webhook secret through the outbox."""
    if target.startswith(BOT_CHANNEL):
        post(target.removeprefix(BOT_CHANNEL), messages)
    else:
        outbox.post_slack(target, messages)


def _posted(target: str, findings: list[Finding], enforce: bool) -> Decision:
    return Decision(
        policy="notifications",
        verdict="act",
        resource=f"digest:{target}",
        actions=[Notify(enforced=enforce, channel="slack", target=[target])],
        reasons=[f"the channel's digest of {len(findings)} held finding(s)"],
        evidence={"findings": sorted({f"{f.rule} {f.resource}" for f in findings})[:100]},
        severity="info",
        rule="notifications.digest-posted",
    )


class DigestFailed(RuntimeError):
    """A channel did not take its digest: the invocation fails, the Scheduler retries, its items stay pending."""
