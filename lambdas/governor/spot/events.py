"""The events the ``spot`` function takes, as EventBridge delivers them: AWS's EC2 and SSM notices, each with its
typed ``detail``, and the one parse at the edge that picks the model by source and detail-type."""

from __future__ import annotations

from typing import Any

from governor.events.envelopes import EventBridgeEnvelope, GovernorEvent, InvalidEventError, parse_model
from governor.spot.capacity import DELIVERED, RECLAMATION, STATE_EVENTS, ReclamationDetail, ReservationStateDetail
from governor.spot.domain import (
    BLOCK_EXPIRY,
    COMMAND_STATUS,
    REBALANCE,
    RESERVATION_WARNING,
    SOURCE,
    SSM_SOURCE,
    STATE_CHANGE,
    WARNING,
    BlockExpiryDetail,
    CommandStatusDetail,
    RebalanceDetail,
    ReservationWarningDetail,
    StateChangeDetail,
    WarningDetail,
)


class WarningEvent(EventBridgeEnvelope):
    detail: WarningDetail


class RebalanceEvent(EventBridgeEnvelope):
    detail: RebalanceDetail


class ReservationWarningEvent(EventBridgeEnvelope):
    detail: ReservationWarningDetail


class BlockExpiryEvent(EventBridgeEnvelope):
    detail: BlockExpiryDetail


class DeliveredEvent(EventBridgeEnvelope):
    detail: BlockExpiryDetail  # the same two fields: the block and its end


class ReservationStateEvent(EventBridgeEnvelope):
    detail: ReservationStateDetail


class ReclamationEvent(EventBridgeEnvelope):
    detail: ReclamationDetail


class StateChangeEvent(EventBridgeEnvelope):
    detail: StateChangeDetail


class CommandStatusEvent(EventBridgeEnvelope):
    detail: CommandStatusDetail


CapacityEvent = DeliveredEvent | ReservationStateEvent | ReclamationEvent
SpotEvent = (
    WarningEvent
    | RebalanceEvent
    | StateChangeEvent
    | CommandStatusEvent
    | ReservationWarningEvent
    | BlockExpiryEvent
    | CapacityEvent
)
MODELS: dict[tuple[str, str], type[SpotEvent]] = {
    (SOURCE, WARNING): WarningEvent,
    (SOURCE, RESERVATION_WARNING): ReservationWarningEvent,
    **{(SOURCE, name): BlockExpiryEvent for name in BLOCK_EXPIRY},
    (SOURCE, REBALANCE): RebalanceEvent,
    (SOURCE, STATE_CHANGE): StateChangeEvent,
    (SSM_SOURCE, COMMAND_STATUS): CommandStatusEvent,
    **{(SOURCE, name): DeliveredEvent for name in DELIVERED},
    **{(SOURCE, name): ReservationStateEvent for name in STATE_EVENTS},
    (SOURCE, RECLAMATION): ReclamationEvent,
}


def parse(raw: Any) -> SpotEvent:
    """The envelope first (for the event id in any error), then the typed detail of the one kind it claims to be."""
    envelope = parse_model(GovernorEvent, raw)
    model = MODELS.get((envelope.source, envelope.detail_type))
    if model is None:
        raise InvalidEventError(
            f"the spot function does not handle {envelope.source} '{envelope.detail_type}' events", envelope.id
        )
    parsed = parse_model(model, raw)
    if isinstance(parsed, ReservationStateEvent) and not envelope.detail_type.lower().endswith(parsed.detail.state):
        raise InvalidEventError(f"'{envelope.detail_type}' with state {parsed.detail.state}", envelope.id)
    return parsed
