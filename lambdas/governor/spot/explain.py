"""``governor explain`` for Spot: the handler's decisions on the state explain assumes instead of reading it.

``decide_warning`` and ``decide_rebalance`` on an assumed instance, ``decide_state_change`` and
``decide_command_status`` on an assumed ledger (no interruption record), and the capacity events' checks and
decisions (``spot/capacity.py``) on the reservation assumed as EC2 would report it when it agrees with the event, at
the event's time (the handler judges at its own clock). Not runtime code: the code asset leaves every ``explain``
module out (``infra/asset.py``).
"""

from __future__ import annotations

import datetime as dt

from governor.domain.capacity import Reservation
from governor.domain.decision import Decision
from governor.domain.explain import Assumed, detail_type, explainer
from governor.domain.fleet import Instance, Lifecycle
from governor.domain.interruptions import InterruptionRecord
from governor.domain.times import utc
from governor.events.envelopes import InboundEvent, parse_model
from governor.policy import Policy
from governor.spot import capacity, domain
from governor.spot.capacity import DELIVERED, RECLAMATION, STATE_EVENTS, ReclamationDetail, ReservationStateDetail
from governor.spot.domain import FINAL_STATES, POLICY
from governor.spot.events import (
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

_LIVE = "explain reads nothing from AWS"
_PURCHASE = {
    "spot": "Spot",
    "interruptible-capacity-reservation": "interruptible-capacity-reservation",
    "capacity-block": "Capacity Block",
}
ASSUMED_TEMPLATE = ("(the instance's launch template)", "(the version it was launched with)")


def assumed_instance(
    instance_id: str,
    policy: Policy,
    at: dt.datetime,
    lifecycle: Lifecycle = "spot",
    reservation_id: str | None = None,
    instance_type: str | None = None,
) -> Assumed[Instance]:
    """The instance as the handler would re-read it when it is ours to protect: running, a GPU type of the fleet,
    carrying ``fleet.fleet_tags``, no exemption, no Auto Scaling group or EC2 fleet, launched from a template, of the
    purchase model the notice concerns (``lifecycle``, in ``reservation_id`` for a Capacity Block)."""
    fleet = policy.fleet
    family = fleet.gpu_families[0] if fleet.gpu_families else "g"
    tags = {**fleet.fleet_tags, fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"}
    instance = Instance(
        id=instance_id,
        type=instance_type or f"{family}-family GPU instance",
        state="running",
        launch_time=at,
        tags=tags,
        lifecycle=lifecycle,
        capacity_reservation_id=reservation_id,
        launch_template_id=ASSUMED_TEMPLATE[0],
        launch_template_version=ASSUMED_TEMPLATE[1],
    )
    assumptions = [
        f"{instance_id} is a running GPU {_PURCHASE.get(lifecycle, lifecycle)} instance of the fleet, not exempt "
        f"({_LIVE}; the handler re-reads it and records gone, non-GPU, exempt or differently bought instances as "
        "ignored)",
        f"it carries fleet.fleet_tags and no {fleet.checkpoint_command_tag} tag, so the checkpoint is the policy's "
        "command; a tag may name another entry of fleet.checkpoint_commands",
        "it runs the SSM agent (else the checkpoint is recorded as not delivered)",
        "it belongs to no Auto Scaling group or EC2/Spot fleet (with one, the handler completes a held lifecycle "
        "action after the checkpoint and launches no replacement) and was launched from a launch template",
    ]
    return Assumed(instance, tuple(assumptions))


@explainer(POLICY, detail_type(SOURCE, WARNING), decides=(domain.decide_warning,))
def explain_warning(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The warning's decision, by ``decide_warning``, for the instance as :func:`assumed_instance` assumes it."""
    detail = parse_model(WarningDetail, event.detail)
    at = _event_time(event)
    assumed = assumed_instance(detail.instance_id, policy, at)
    return [assumed.on(domain.decide_warning(detail.instance_id, assumed.state, detail.instance_action, policy, at))]


_CLOCK = "the handler judges the event at its own clock; explain at the event's time"
LENT = "(its interruptible reservation)"


def assumed_block(reservation_id: str, end: dt.datetime, policy: Policy) -> Assumed[Reservation]:
    """The Capacity Block as EC2 would report it when it agrees with the event: active, ending at the event's end."""
    fleet = policy.fleet
    block = Reservation(
        id=reservation_id,
        instance_type="(the block's instance type)",
        reservation_type="capacity-block",
        state="active",
        end_date=end,
        tags={fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"},
    )
    said = (
        f"EC2 reports {reservation_id} as an active Capacity Block ending {end.isoformat()} ({_LIVE}; the handler "
        "reads DescribeCapacityReservations and refuses the event, sending nothing, when EC2's block, state or end "
        f"disagree with it; {_CLOCK})"
    )
    return Assumed(block, (said,))


def _refused_or(refusal: capacity.Refusal | None, resource: str, rule: str, what: str) -> Decision | None:
    return None if refusal is None else capacity.refused(resource, refusal, rule, what)


@explainer(
    POLICY,
    detail_type(SOURCE, RESERVATION_WARNING),
    decides=(domain.decide_warning, capacity.check_reservation_warning),
)
def explain_reservation_warning(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The interruptible reservation's warning, by ``decide_warning``, for an instance lent that capacity, after
    ``check_reservation_warning`` on the reservation as EC2 would report it when it agrees."""
    detail = parse_model(ReservationWarningDetail, event.detail)
    at = _event_time(event)
    assumed = assumed_instance(detail.instance_id, policy, at, "interruptible-capacity-reservation", LENT)
    reservation = Reservation(id=LENT, instance_type=assumed.state.type, interruptible=True, zone_id=detail.az_id)
    zone = detail.az_id or "(the instance's)"
    said = (
        f"EC2 reports {LENT} as interruptible, in zone {zone} ({_LIVE}; the handler "
        f"reads DescribeCapacityReservations and refuses the event when they disagree; {_CLOCK})"
    )
    assumed = Assumed(assumed.state, (*assumed.assumptions, said))
    notice = domain.reservation_notice(at, detail.instance_termination_time)
    refusal = capacity.check_reservation_warning(assumed.state, reservation, notice.deadline, detail.az_id, at)
    shown = _refused_or(refusal, detail.instance_id, notice.rule, RESERVATION_WARNING)
    decision = shown or domain.decide_warning(
        detail.instance_id, assumed.state, detail.instance_action, policy, at, notice
    )
    return [assumed.on(decision)]


@explainer(POLICY, detail_type(SOURCE, *BLOCK_EXPIRY), decides=(domain.decide_warning, capacity.check_block_expiry))
def explain_block_expiry(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The Capacity Block's expiry, by ``check_block_expiry`` on the block as EC2 would report it, then
    ``decide_warning`` for one instance assumed running in it (the handler lists every running instance EC2 has in
    the block and decides each the same way)."""
    detail = parse_model(BlockExpiryDetail, event.detail)
    at = _event_time(event)
    rid = detail.capacity_reservation_id
    block = assumed_block(rid, utc(detail.end_date), policy)
    refused = _refused_or(
        capacity.check_block_expiry(rid, utc(detail.end_date), block.state, at),
        rid,
        "capacity-block-expiry",
        event.detail_type,
    )
    if refused is not None:
        return [block.on(refused)]
    assumed = assumed_instance(f"(an instance in {rid})", policy, at, "capacity-block", rid)
    assumed = Assumed(
        assumed.state,
        (
            *block.assumptions,
            *assumed.assumptions,
            f"the handler checkpoints every running instance EC2 lists in {rid}; explain shows one",
        ),
    )
    notice = domain.block_notice(rid, utc(detail.end_date))
    decision = domain.decide_warning(assumed.state.id, assumed.state, "terminate", policy, at, notice)
    return [assumed.on(decision)]


@explainer(POLICY, detail_type(SOURCE, *DELIVERED), decides=(capacity.check_delivered, capacity.decide_delivered))
def explain_block_delivered(event: InboundEvent, policy: Policy) -> list[Decision]:
    """A Capacity Block delivered: ``check_delivered`` on the block as EC2 would report it, then ``decide_delivered``
    with one instance assumed running in it (its end recorded on it, its owner told)."""
    detail = parse_model(BlockExpiryDetail, event.detail)
    at = _event_time(event)
    rid = detail.capacity_reservation_id
    block = assumed_block(rid, utc(detail.end_date), policy)
    refused = _refused_or(
        capacity.check_delivered(rid, utc(detail.end_date), block.state, at),
        rid,
        capacity.RULE_DELIVERED,
        event.detail_type,
    )
    if refused is not None:
        return [block.on(refused)]
    member = assumed_instance(f"(an instance in {rid})", policy, at, "capacity-block", rid)
    told = (
        f"one instance runs in {rid}, tagged with its owner and team; the handler records the end on every running "
        f"instance EC2 lists in it (DescribeInstances) and tells each owner, or with none the block's own owner and "
        "team tags"
    )
    decision = capacity.decide_delivered(block.state, [member.state], policy, at)
    return [Assumed(None, (*block.assumptions, told)).on(decision)]


@explainer(
    POLICY, detail_type(SOURCE, *STATE_EVENTS), decides=(capacity.check_state, capacity.decide_reservation_state)
)
def explain_reservation_state(event: InboundEvent, policy: Policy) -> list[Decision]:
    """A reservation's state change, by ``decide_reservation_state`` on the reservation as EC2 would report it."""
    detail = parse_model(ReservationStateDetail, event.detail)
    rid = detail.capacity_reservation_id
    fleet = policy.fleet
    found = Reservation(
        id=rid,
        instance_type="(its instance type)",
        state=detail.state,
        tags={fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"},
    )
    said = (
        f"EC2 reports {rid} {detail.state} ({_LIVE}; the handler reads DescribeCapacityReservations and refuses the "
        "event when EC2's state is neither the event's nor one step before or after it)"
    )
    refusal = capacity.check_state(rid, detail.state, found)
    decision = _refused_or(refusal, rid, capacity.RULE_STATE, event.detail_type)
    return [Assumed(found, (said,)).on(decision or capacity.decide_reservation_state(found, detail.state, policy))]


@explainer(POLICY, detail_type(SOURCE, RECLAMATION), decides=(capacity.check_reclamation, capacity.decide_reclamation))
def explain_reclamation(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Lent capacity back in its source, by ``decide_reclamation`` on the source as EC2 would report it."""
    detail = parse_model(ReclamationDetail, event.detail)
    fleet = policy.fleet
    source = Reservation(
        id=detail.source_reservation_id,
        instance_type=detail.instance_type or "(its instance type)",
        zone_id=detail.zone_id,
        owner_id=event.account,
        tags={fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"},
    )
    said = (
        f"EC2 reports {source.id} as this account's reservation of {source.instance_type} in the event's zone "
        f"({_LIVE}; the handler reads DescribeCapacityReservations and refuses the event when they disagree)"
    )
    refusal = capacity.check_reclamation(detail, source, event.account or "")
    decision = _refused_or(refusal, source.id, capacity.RULE_RECLAIMED, event.detail_type)
    return [Assumed(source, (said,)).on(decision or capacity.decide_reclamation(detail, source, policy))]


@explainer(POLICY, detail_type(SOURCE, REBALANCE), decides=(domain.decide_rebalance,))
def explain_rebalance(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The rebalance decision, by ``decide_rebalance``, for the instance as :func:`assumed_instance` assumes it."""
    detail = parse_model(RebalanceDetail, event.detail)
    at = _event_time(event)
    assumed = assumed_instance(detail.instance_id, policy, at)
    return [assumed.on(domain.decide_rebalance(detail.instance_id, assumed.state, policy, at))]


def _no_record(instance_id: str) -> Assumed[InterruptionRecord | None]:
    return Assumed(
        None,
        (
            f"the ledger holds no interruption record for {instance_id} ({_LIVE} nor the ledger); had the governor "
            "handled a warning for it, the record would now be completed",
        ),
    )


@explainer(POLICY, detail_type(SOURCE, STATE_CHANGE), decides=(domain.decide_state_change,))
def explain_state_change(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Without the ledger, a stop or termination concerns no known interruption: ``ignored``, with the assumption."""
    detail = parse_model(StateChangeDetail, event.detail)
    # only a stop or termination looks the record up; other states are decided from the event alone
    assumed = _no_record(detail.instance_id) if detail.state in FINAL_STATES else Assumed(None, ())
    return [assumed.on(domain.decide_state_change(detail.instance_id, detail.state, assumed.state, policy))]


@explainer(POLICY, detail_type(SSM_SOURCE, COMMAND_STATUS), decides=(domain.decide_command_status,))
def explain_command_status(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Without the ledger, a command status matches no checkpoint the governor sent: ``ignored``."""
    detail = parse_model(CommandStatusDetail, event.detail)
    assumed = _no_record(detail.instance_id)
    decision = domain.decide_command_status(detail.instance_id, detail.command_id, detail.status, assumed.state, policy)
    return [assumed.on(decision)]


def _event_time(event: InboundEvent) -> dt.datetime:
    return utc(event.time or dt.datetime.now(dt.UTC))
