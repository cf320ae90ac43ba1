"""One Stop now hand-over per message at a time: a conditional write keyed on the message's Stop now button.

Every click is a new Slack action (a new ``action_ts``), so the worker's idempotency on the click's id holds back only
the same click delivered again, never a second click: a person whose first click seemed to fail (the endpoint
answered 502 after its hand-over's answer was lost) clicks again, and before this the second click invoked the idle
function a second time. Now the worker claims the message's Stop now (kind :data:`CLAIM_KIND`, key ``<token>#stop``)
before it invokes anything: while the claim's click is live (its record's lifetime, minutes), a second click on the
same message hands nothing over and is told so; the same click retried by Lambda finds its own claim and goes on (its
Invoke carries the same id, which the idle function drops when it ran already). Once the idle function has answered
the claim's click (its record is marked used) with anything but "stopped" / "terminated", or the click has expired, a
new click takes the claim over (compare-and-set on the click it names): "click Stop now again once the checkpoint has
finished" works.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from governor.domain.ports import Ledger
from governor.events.stop_request import KEPT_AFTER_EXPIRY, LIFETIME, STOP_REQUEST_KIND

CLAIM_KIND = "stop-now-claim"
#: What the idle function answered a click with that leaves nothing for a later click on the message to do.
DONE = frozenset({"stopped", "terminated"})


@dataclass(frozen=True)
class Claimed:
    """This click holds the message's Stop now; ``handed_over`` when an earlier attempt of it already invoked idle."""

    key: str
    item: dict[str, Any]
    handed_over: bool = False


def _key(token: str) -> str:
    return f"{token}#stop"


def claim(ledger: Ledger, *, token: str, click: str, clicked_at: dt.datetime, who: str) -> Claimed | str:
    """Claim the message's Stop now for the click ``click`` (its id): :class:`Claimed`, or why another holds it."""
    until = clicked_at + LIFETIME
    item = {
        "token": token,
        "click": click,
        "by": who,
        "clicked_at": clicked_at.isoformat(),
        "until": until.isoformat(),
        "expires_at": int((until + KEPT_AFTER_EXPIRY).timestamp()),
    }
    key = _key(token)
    if ledger.claim(CLAIM_KIND, key, item):
        return Claimed(key, item)
    found = ledger.get_item(CLAIM_KIND, key) or {}
    holder = str(found.get("click") or "")
    if holder == click:  # this click's own claim: Lambda's retry of the worker, or a lost answer resent
        return Claimed(key, {**item, **_kept(found)}, handed_over=bool(found.get("invoked_at")))
    held_until = _time(found.get("until"))
    answer = ledger.get_item(STOP_REQUEST_KIND, holder) or {} if holder else {}
    outcome = str(answer.get("outcome") or "")
    if answer.get("used_at") and outcome in DONE:
        return f"this message's instance was already {outcome} on a Stop now by {found.get('by') or 'someone'}"
    if held_until is not None and clicked_at <= held_until and not answer.get("used_at"):
        return (
            f"Stop now was already requested on this message by {found.get('by') or 'someone'} at "
            f"{found.get('clicked_at')}; this message will say what came of it"
        )
    if ledger.claim(CLAIM_KIND, key, item, replacing=("click", holder or None)):
        return Claimed(key, item)
    return "another Stop now click on this message is being handed over right now"


def handed_over(ledger: Ledger, claimed: Claimed, now: dt.datetime) -> None:
    """Note on the claim that the idle function was invoked for its click (a retry of the click invokes nothing)."""
    done = {**claimed.item, "invoked_at": now.isoformat()}
    ledger.claim(CLAIM_KIND, claimed.key, done, replacing=("click", claimed.item["click"]))


def _kept(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("pk", "sk", "kind", "at")}


def _time(value: Any) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
