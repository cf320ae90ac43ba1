"""The channel's digest: what the notifier held back, posted as one message per channel every ``digest_hours``.

A channel that gets a post per finding grows with the fleet and is muted within a week. Findings that are not due
(``governor.notifier.domain.due``: nothing will happen soon that a person can still change) are held in the ledger
(kind ``notify-held``, one item per channel, rule and resource, so a repeat counts instead of adding a line) and
posted together when the notifier's schedule ticks: new or still open first, then what was fixed or done since the
last digest (a warning withdrawn because the instance works again, a stop or revoke performed). Held idle warnings
keep their Keep / Stop now buttons in the digest, so a report-only warning can still be answered.

Pure: the handler (``governor.notifier.flush``) reads the held items, renders them here, posts, and marks them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from governor.domain.decision import Finding
from governor.domain.escape import slack_text
from governor.domain.messages import MAX_BLOCKS, MAX_FALLBACK_CHARS, MAX_HEADER_CHARS, Block, Message, split_text
from governor.notifier.domain import SEVERITY_RANK, WITHDRAWALS
from governor.notifier.render import QUIET_ACTIONS, action_sentence, owner_text

HELD_KIND = "notify-held"
#: How a digest's header (and its notification text) starts.
DIGEST_TITLE = "GPU Fleet Governor digest"
_ICON = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}


def held_key(target: str, finding: Finding) -> str:
    """One held item per channel, rule and resource: a repeat before the digest is counted on the same line."""
    return f"{target}#{finding.rule}#{finding.resource}"


def held_item(
    target: str, finding: Finding, previous: Mapping[str, Any] | None, now: dt.datetime, expires_at: int
) -> dict[str, Any]:
    """The ledger item holding ``finding`` for ``target``'s next digest; a repeat of an item not yet posted counts
    one more and keeps the first time it was held."""
    pending = previous is not None and not previous.get("flushed_at")
    return {
        "key": held_key(target, finding),
        "target": target,
        "finding": finding.model_dump(mode="json"),
        "count": int(previous.get("count", 1)) + 1 if pending and previous else 1,
        "held_at": str(previous.get("held_at")) if pending and previous else now.isoformat(),
        "expires_at": expires_at,
    }


def fixed(finding: Finding) -> bool:
    """What the digest lists under "fixed or done": a withdrawn warning, or something actually done."""
    if finding.rule in WITHDRAWALS:
        return True
    return any(a.get("enforced") and a.get("type") not in {*QUIET_ACTIONS, "warn"} for a in finding.actions)


@dataclass(frozen=True)
class Held:
    """One held item as the digest shows it: the latest finding and how many times it was found since the last."""

    finding: Finding
    count: int = 1
    #: (instance, its actions block) for each warning held with buttons (an owner's digest: one per member).
    buttons: tuple[tuple[str, Block], ...] = ()


def _line(item: Held, people: Mapping[str, str]) -> str:
    f = item.finding
    owner = f" — {owner_text(f.owner, people)}" if f.owner else ""
    repeat = f" ({item.count} times)" if item.count > 1 else ""
    said = next((s for s in (action_sentence(a) for a in f.actions) if s), "")
    first = said.split(". ")[0].rstrip(".") if said else ""
    what = f": {first}" if first and fixed(f) else ""
    return f"{_ICON[f.severity]} {slack_text(plain(f.title))}{owner}{repeat}{slack_text(what)}"


def plain(text: str) -> str:
    return " ".join(text.split())


def digest_messages(
    items: Sequence[Held], since: dt.datetime | None, now: dt.datetime, people: Mapping[str, str] | None = None
) -> list[Message]:
    """One message within Slack's limits (50 blocks, 3,000 characters a section): a line per held finding, the
    most severe first; what was fixed or done since; the held warnings' buttons while blocks remain."""
    people = people or {}
    ordered = sorted(items, key=lambda i: (-SEVERITY_RANK[i.finding.severity], i.finding.title))
    open_ = [i for i in ordered if not fixed(i.finding)]
    done = [i for i in ordered if fixed(i.finding)]
    when = f"since {since:%Y-%m-%d %H:%M} UTC" if since else f"until {now:%Y-%m-%d %H:%M} UTC"
    title = f"{DIGEST_TITLE}: {len(open_)} to look at, {len(done)} fixed or done {when}"
    blocks: list[Block] = [{"type": "header", "text": {"type": "plain_text", "text": title[:MAX_HEADER_CHARS]}}]
    for label, group in (("*To look at*", open_), ("*Fixed or done since the last digest*", done)):
        if group:
            text = "\n".join([label, *(_line(i, people) for i in group)])
            blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": chunk}} for chunk in split_text(text)]
    reserve = 1  # the closing note
    answered = 0
    for item in open_:
        for resource, buttons in item.buttons:
            if len(blocks) + 2 + reserve > MAX_BLOCKS:
                break
            note = f"`{slack_text(resource)}`: {slack_text(plain(item.finding.title))}"
            blocks += [{"type": "context", "elements": [{"type": "mrkdwn", "text": note}]}, buttons]
            answered += 1
    waiting = sum(len(i.buttons) for i in open_) - answered
    more = f" {waiting} more warnings have no buttons here (Slack's 50 blocks): tag to keep." if waiting > 0 else ""
    close = f"Held back from posting one by one (notifications.immediate); the daily report has every finding.{more}"
    blocks = blocks[: MAX_BLOCKS - 1]
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": close}]})
    return [{"text": title[:MAX_FALLBACK_CHARS], "blocks": blocks}]
