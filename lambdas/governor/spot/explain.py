"""``governor explain`` for Spot: the handler's decisions on the state explain assumes instead of reading it.

``decide_warning`` and ``decide_rebalance`` on an assumed instance, ``decide_state_change`` and
``decide_command_status`` on an assumed ledger (no interruption record). Not runtime code: the code asset leaves
every ``explain`` module out (``infra/asset.py``).
"""

from __future__ import annotations

import datetime as dt

from governor.domain.decision import Decision
from governor.domain.explain import Assumed, detail_type, explainer
from governor.domain.fleet import Instance, Lifecycle
from governor.domain.interruptions import InterruptionRecord
from governor.domain.times import utc
from governor.events.envelopes import InboundEvent, parse_model
from governor.policy import Policy
from governor.spot import domain
from governor.spot.domain import (
    BLOCK_EXPIRY,
    COMMAND_STATUS,
    FINAL_STATES,
    POLICY,
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
) -> Assumed[Instance]:
    """The instance as the handler would re-read it when it is ours to protect: running, a GPU type of the fleet,
    carrying ``fleet.fleet_tags``, no exemption, no Auto Scaling group or EC2 fleet, launched from a template, of the
    purchase model the notice concerns (``lifecycle``, in ``reservation_id`` for a Capacity Block)."""
    fleet = policy.fleet
    family = fleet.gpu_families[0] if fleet.gpu_families else "g"
    tags = {**fleet.fleet_tags, fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"}
    instance = Instance(
        id=instance_id,
        type=f"{family}-family GPU instance",
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


@explainer(POLICY, detail_type(SOURCE, RESERVATION_WARNING), decides=(domain.decide_warning,))
def explain_reservation_warning(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The interruptible reservation's warning, by ``decide_warning``, for an instance lent that capacity."""
    detail = parse_model(ReservationWarningDetail, event.detail)
    at = _event_time(event)
    assumed = assumed_instance(detail.instance_id, policy, at, "interruptible-capacity-reservation")
    notice = domain.reservation_notice(at, detail.instance_termination_time)
    decision = domain.decide_warning(detail.instance_id, assumed.state, detail.instance_action, policy, at, notice)
    return [assumed.on(decision)]


@explainer(POLICY, detail_type(SOURCE, *BLOCK_EXPIRY), decides=(domain.decide_warning,))
def explain_block_expiry(event: InboundEvent, policy: Policy) -> list[Decision]:
    """The Capacity Block's expiry, by ``decide_warning``, for one instance assumed running in the block (the
    handler lists every running instance in it and decides each the same way)."""
    detail = parse_model(BlockExpiryDetail, event.detail)
    at = _event_time(event)
    rid = detail.capacity_reservation_id
    assumed = assumed_instance(f"(an instance in {rid})", policy, at, "capacity-block", rid)
    assumed = Assumed(
        assumed.state,
        (*assumed.assumptions, f"the handler checkpoints every running instance in {rid}; explain shows one"),
    )
    notice = domain.block_notice(rid, utc(detail.end_date))
    decision = domain.decide_warning(assumed.state.id, assumed.state, "terminate", policy, at, notice)
    return [assumed.on(decision)]


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
