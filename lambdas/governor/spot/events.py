"""The events the ``spot`` function takes, as EventBridge delivers them: AWS's EC2 and SSM notices, each with its
typed ``detail``, and the one parse at the edge that picks the model by source and detail-type."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from governor.domain.model import Model
from governor.events.envelopes import EventBridgeEnvelope, GovernorEvent, InvalidEventError, parse_model
from governor.spot.capacity import DELIVERED, RECLAMATION, STATE_EVENTS, ReclamationDetail, ReservationStateDetail

SOURCE = "aws.ec2"
WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
COMMAND_STATUS = "EC2 Command Invocation Status-change Notification"
#: Two minutes before instances in an interruptible capacity reservation are terminated (EC2 User Guide).
RESERVATION_WARNING = "EC2 Capacity Reservation Instance Interruption Warning"
#: 40 minutes before a Capacity Block ends; AWS's documentation spells it both ways, so the rule matches both.
BLOCK_EXPIRY = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")
SSM_SOURCE = "aws.ssm"

InstanceId = Annotated[str, Field(pattern=r"^i-[0-9a-f]{8,32}$")]


class _Detail(Model):
    # AWS's field names only: a detail that says ``instance_id`` is not an EC2 event and is parked, not guessed at
    model_config = ConfigDict(extra="allow", frozen=True)


class WarningDetail(_Detail):
    """``detail`` of "EC2 Spot Instance Interruption Warning" (about two minutes ahead, best effort)."""

    instance_id: InstanceId = Field(alias="instance-id")
    instance_action: Literal["terminate", "stop", "hibernate"] = Field(alias="instance-action")


class ReservationWarningDetail(_Detail):
    """``detail`` of "EC2 Capacity Reservation Instance Interruption Warning" (two minutes' notice)."""

    instance_id: InstanceId = Field(alias="instance-id")
    instance_action: Literal["terminate", "stop", "hibernate"] = Field(alias="instance-action")
    instance_termination_time: dt.datetime | None = Field(None, alias="instance-termination-time")
    az_id: str | None = Field(None, alias="azId")


class BlockExpiryDetail(_Detail):
    """``detail`` of the Capacity Block expiration warning: the reservation, not an instance, and when it ends."""

    capacity_reservation_id: str = Field(alias="capacity-reservation-id", pattern=r"^cr-[0-9a-f]{8,32}$")
    end_date: dt.datetime = Field(alias="end-date")


class RebalanceDetail(_Detail):
    """``detail`` of "EC2 Instance Rebalance Recommendation": elevated risk, no deadline yet."""

    instance_id: InstanceId = Field(alias="instance-id")


class StateChangeDetail(_Detail):
    """``detail`` of "EC2 Instance State-change Notification"."""

    instance_id: InstanceId = Field(alias="instance-id")
    state: Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]


class CommandStatusDetail(_Detail):
    """``detail`` of SSM's "EC2 Command Invocation Status-change Notification" for one instance."""

    command_id: str = Field(alias="command-id", min_length=1)
    instance_id: InstanceId = Field(alias="instance-id")
    status: str = Field(min_length=1)
    document_name: str | None = Field(None, alias="document-name")


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
