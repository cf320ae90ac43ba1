"""A governor finding as the governor bus delivers it, checked at the edge: every subscriber of the bus (the notifier,
the Security Hub export) takes only the governor's own findings, from its own account."""

from __future__ import annotations

from typing import Any

from governor.domain.decision import Finding
from governor.events.envelopes import EventBridgeEnvelope, InvalidEventError, parse_model

SOURCE = "gpu-fleet-governor"
DETAIL_TYPE = "Governor Finding"


class FindingEvent(EventBridgeEnvelope):
    """A finding as the governor bus delivers it."""

    detail: Finding


def parse_finding_event(raw: Any, account: str | None, subscriber: str) -> FindingEvent:
    """Only findings from the governor itself, in its own account; anything else is rejected to the DLQ with its reason.

    The bus policy already lets only the stack's function roles put events; checking the envelope's ``account`` too
    means a finding forwarded from another account's bus (or a test event) is never acted on.
    """
    event = parse_model(FindingEvent, raw)
    if event.source != SOURCE or event.detail_type != DETAIL_TYPE:
        raise InvalidEventError(
            f"unsupported event {event.source}/{event.detail_type!r}: the {subscriber} takes '{DETAIL_TYPE}' events "
            f"from {SOURCE}",
            event.id,
        )
    if account is not None and event.account != account:
        raise InvalidEventError(
            f"finding from account {event.account!r} refused: the {subscriber} takes findings only from its own "
            f"account {account}",
            event.id,
        )
    return event
