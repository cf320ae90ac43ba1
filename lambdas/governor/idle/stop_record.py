"""Stop now's record, on the idle function's side: read it and the message it was clicked on, check it at this
function's clock and in this function's account (:func:`governor.events.stop_request.check`), and mark it used once
the click is answered, so the same record never acts twice."""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.messages import NotSlackAddressError, check_response_url
from governor.domain.ports import Ledger
from governor.events import stop_request
from governor.idle.stop_now import VerifiedStop
from governor.observability import logger


def verified(
    ledger: Ledger, event_id: str, asked: dict[str, Any], *, now: dt.datetime, account: str | None
) -> VerifiedStop | str:
    """The click recorded under ``event_id``, as Stop now may act on it now, or why it stops nothing.

    Everything Stop now acts on or writes (the instance, who asked, where to answer) comes from the record; the
    invocation only names it. A direct Invoke with made-up fields finds no record, or one that does not match; a
    replayed one finds it expired or used."""
    item = ledger.get_item(stop_request.STOP_REQUEST_KIND, event_id)
    button = ledger.get_item(stop_request.BUTTON_KIND, str(item.get("token") or "")) if item else None
    checked = stop_request.check(event_id, asked, item, button, now=now, account=account)
    if isinstance(checked, str):
        return checked
    record = checked.item
    try:
        url = check_response_url(str(record.get("response_url") or ""))
    except NotSlackAddressError as error:
        return str(error)
    requested_by = record.get("requested_by")
    return VerifiedStop(
        str(record["instance_id"]),
        str(requested_by) if requested_by else None,
        str(record["slack_user"]),
        url,
        str(record["token"]),
        clicked_at=checked.clicked_at,
        record=checked,
    )


def mark_used(ledger: Ledger, event_id: str, request: VerifiedStop, now: dt.datetime, outcome: str) -> None:
    """One click, one stop: the record is marked used when its click is answered (a conditional write: the first
    answer wins). A later invocation naming it (a replay) is refused before anything is read."""
    if request.record is None:
        return
    marked = stop_request.used(request.record, now, outcome)
    if not ledger.claim(stop_request.STOP_REQUEST_KIND, event_id, marked, replacing=("used_at", None)):
        logger.warning("Stop now record already used", extra={"event_id": event_id, "outcome": outcome})
