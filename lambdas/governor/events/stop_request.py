"""Stop now's record: what the interactions function leaves in the ledger for one verified, authorised click, and the
checks the idle function makes of it before it reads or changes anything. Pure.

The record carries its own time: the click's, as Slack signed it (``X-Slack-Request-Timestamp``, verified within five
minutes of the endpoint's clock), and an expiry minutes later. The idle function judges that time, never the
invocation's ``time``, which whoever invokes it writes: an Invoke replayed a day later with a fresh ``time`` finds an
expired record and stops nothing. A record is used once (one click, one stop): the idle function marks it used when it
has answered the click, and a later invocation naming it is refused. It is bound to what the click was on: its key
is the click's (the Stop now action, the message's token, the Slack user), the message's ledger record (written by the
notifier when it sent the buttons) must name the same instance and offer Stop now, and the account the message was
about must be the one the idle function acts in.

Both functions import this module; neither imports the other's package.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.events.names import BUTTON_KIND as BUTTON_KIND
from governor.events.names import STOP_NOW_ACTION, STOP_REQUEST_KIND

#: How long after the click (Slack's signed timestamp) its record may stop anything: Lambda's asynchronous retries of
#: the idle invocation (about one and three minutes after a failure) fit well inside; a replay, a DLQ replay or an
#: event held back for hours does not.
LIFETIME = dt.timedelta(minutes=15)
#: How far a click's time may lie ahead of the idle function's clock: Slack's own window for a request timestamp.
#: Further ahead, the record's time cannot be the click's (it was written by something else, or a clock is wrong).
CLOCK_SKEW = dt.timedelta(minutes=5)
#: The record itself is kept a while after its expiry (who asked, for which instance, and when it was used).
KEPT_AFTER_EXPIRY = dt.timedelta(days=7)


def click_key(token: str, slack_user: str, action_ts: str) -> str:
    """The click's id, as the interactions endpoint names its worker's event (``Click.key``): the record's key."""
    return f"slack:{STOP_NOW_ACTION}:{token}:{slack_user}:{action_ts}"


def record(
    *,
    instance_id: str,
    requested_by: str | None,
    slack_user: str,
    response_url: str,
    token: str,
    team: str | None,
    account: str | None,
    clicked_at: dt.datetime,
) -> dict[str, Any]:
    """The ledger item for one verified, authorised Stop now click (kind :data:`STOP_REQUEST_KIND`, keyed by the
    click's id): who asked, for which instance, where to answer, and the click's time and expiry."""
    valid_until = clicked_at + LIFETIME
    return {
        "instance_id": instance_id,
        "requested_by": requested_by,
        "slack_user": slack_user,
        "response_url": response_url,
        "token": token,
        "team": team,
        "account": account,
        "clicked_at": clicked_at.isoformat(),
        "valid_until": valid_until.isoformat(),
        "expires_at": int((valid_until + KEPT_AFTER_EXPIRY).timestamp()),
    }


@dataclass(frozen=True)
class Checked:
    """A record that may act now: its click time, when it expires, and the item as stored (to mark it used)."""

    clicked_at: dt.datetime
    valid_until: dt.datetime
    item: Mapping[str, Any]


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def check(
    event_id: str,
    asked: Mapping[str, Any],
    item: Mapping[str, Any] | None,
    button: Mapping[str, Any] | None,
    *,
    now: dt.datetime,
    account: str | None,
) -> Checked | str:
    """The record under ``event_id`` checked against the invocation (``asked``: its instance, Slack user, answer
    address and token), the message's button record and the idle function's clock and account: a :class:`Checked`,
    or why the record stops nothing."""
    if not item:
        return "no verified Slack click is recorded under this request's id"
    why = _mismatch(event_id, asked, item)
    if why:
        return why
    timely = _timely(item, now)
    if isinstance(timely, str):
        return timely
    why = _unbound(item, button, account)
    if why:
        return why
    return Checked(timely[0], timely[1], item)


def _mismatch(event_id: str, asked: Mapping[str, Any], item: Mapping[str, Any]) -> str | None:
    """Why the invocation is not the click the record was written for."""
    fields = ("instance_id", "slack_user", "response_url", "token")
    differ = [name for name in fields if str(item.get(name) or "") != str(asked.get(name) or "")]
    if differ:
        return f"the request's {', '.join(differ)} differ from the verified click's"
    token, user = str(item.get("token") or ""), str(item.get("slack_user") or "")
    if not event_id.startswith(click_key(token, user, "")):
        return "the record is not filed under a Stop now click of its own message and Slack user"
    return None


def _timely(item: Mapping[str, Any], now: dt.datetime) -> tuple[dt.datetime, dt.datetime] | str:
    """(click time, expiry) when the record may act at ``now``, else why not: no time, from the future, expired,
    used."""
    clicked_at = _time(item.get("clicked_at"))
    if clicked_at is None:
        return "the record carries no click time (written before clicks expired, or not by the interactions function)"
    if clicked_at > now + CLOCK_SKEW:
        ahead = f"ahead of this function's clock by more than {CLOCK_SKEW}"
        return f"the click is stamped {clicked_at.isoformat()}, {ahead}"
    # The expiry is the click's time plus the lifetime, whatever a stored ``valid_until`` says (it can only shorten it).
    valid_until = min(clicked_at + LIFETIME, _time(item.get("valid_until")) or clicked_at + LIFETIME)
    if now > valid_until:
        return f"the click expired at {valid_until.isoformat()} ({LIFETIME} after it was made)"
    if item.get("used_at"):
        used = f"{item['used_at']} ({item.get('outcome') or 'answered'})"
        return f"the click was already used at {used}: one click, one stop"
    return clicked_at, valid_until


def _unbound(item: Mapping[str, Any], button: Mapping[str, Any] | None, account: str | None) -> str | None:
    """Why the record is not about what its message was about: another instance, no Stop now, another account."""
    if not button or str(button.get("resource") or "") != str(item.get("instance_id")):
        return "the message the click was on is about another instance (or no longer known)"
    if STOP_NOW_ACTION not in (button.get("buttons") or []):
        return "the message the click was on has no Stop now button"
    where = str(item.get("account") or button.get("account") or "")
    if where and account and where != account:
        return f"the click is about an instance of account {where}; this function acts in {account}"
    return None


def used(checked: Checked, now: dt.datetime, outcome: str) -> dict[str, Any]:
    """The record, marked used by the idle function's answer to the click (written with a condition: once)."""
    kept = {k: v for k, v in checked.item.items() if k not in ("pk", "sk", "kind")}
    return {**kept, "used_at": now.isoformat(), "outcome": outcome}


__all__ = ["BUTTON_KIND", "STOP_REQUEST_KIND", "Checked", "check", "click_key", "record", "used"]
