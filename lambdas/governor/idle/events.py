"""What the idle function takes, parsed at the edge: its schedule's Scheduled Event, or Stop now handed over by the
interactions function after it verified and authorised the click. Anything else goes to the DLQ with the reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from governor.domain.model import Model
from governor.events.envelopes import GovernorEvent, InvalidEventError, parse_model
from governor.events.names import INTERACTIONS_SOURCE, STOP_REQUESTED

SCHEDULED = "Scheduled Event"
SCHEDULE_SOURCES = ("aws.scheduler", "aws.events")


class StopRequest(Model):
    """Stop now, as the interactions function hands it over after verifying and authorising the click."""

    instance_id: str = Field(pattern=r"^i-[0-9a-f]{8,17}$")
    requested_by: str | None = Field(None, max_length=254)
    slack_user: str = Field(pattern=r"^[UW][A-Z0-9]{2,30}$")
    response_url: str = Field(max_length=2000)
    token: str = Field(pattern=r"^[0-9a-f]{32}$")
    message_blocks: list[dict[str, Any]] = Field(default_factory=list, max_length=50)


class StopRequestEvent(GovernorEvent):
    detail: StopRequest  # type: ignore[assignment]


def parse(raw: Any) -> GovernorEvent:
    """The sweep's Scheduled Event, or Stop now from the interactions function (only its role may invoke this one);
    anything else goes to the DLQ with the reason."""
    event = parse_model(GovernorEvent, raw)
    if event.source == INTERACTIONS_SOURCE and event.detail_type == STOP_REQUESTED:
        return parse_model(StopRequestEvent, raw)
    if event.detail_type != SCHEDULED or event.source not in SCHEDULE_SOURCES:
        raise InvalidEventError(
            f"unsupported event {event.source}/{event.detail_type!r}: the idle function runs on its schedule only",
            event.id,
        )
    return event
