"""The ``spot`` function: Spot and capacity interruption warnings, rebalance recommendations and their aftermath,
and the capacity lifecycle (a Capacity Block delivered, a reservation's state, lent capacity reclaimed).

On a warning the critical path is one DescribeInstances, a few DynamoDB writes and one SSM SendCommand: the
checkpoint goes out within seconds of the event. Deregistration, Auto Scaling and relaunch follow; their failures are
recorded and reported, and a retried invocation resumes from the interruption record instead of signalling twice.
A capacity event is first checked against the reservation EC2 reports (``spot/capacity.py``): one that disagrees is
refused with its reason, and nothing is sent.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Any

from governor import runner
from governor.domain.actions import Outcome
from governor.domain.capacity import ReservationReader
from governor.domain.decision import Action, Decision, Finding
from governor.domain.fleet import Instance
from governor.domain.interruptions import FINAL_COMMAND_STATUSES, RECORD_KIND, InterruptionRecord, interruption_key
from governor.domain.once import IN_FLIGHT, first_claimant, held_elsewhere
from governor.domain.tagging import bounded_instance
from governor.domain.times import utc
from governor.observability import metrics
from governor.outbox import Outbox
from governor.registry import REGISTRY
from governor.runtime import Handler, Invocation, Runtime, default_runtime
from governor.spot import capacity_acts, records
from governor.spot.capacity import (
    RULE_DELIVERED,
    RULE_RECLAIMED,
    RULE_STATE,
    UNREAD,
    ReclamationDetail,
    Refusal,
    check_block_expiry,
    check_delivered,
    check_reclamation,
    check_reservation_warning,
    check_state,
    decide_delivered,
    decide_reclamation,
    decide_reservation_state,
)
from governor.spot.domain import (
    REBALANCE_KIND,
    Notice,
    block_notice,
    decide_command_status,
    decide_rebalance,
    decide_state_change,
    decide_warning,
    elsewhere,
    reservation_notice,
    spot_notice,
    start_record,
)
from governor.spot.events import (
    BlockExpiryEvent,
    CapacityEvent,
    CommandStatusEvent,
    DeliveredEvent,
    RebalanceEvent,
    ReclamationEvent,
    ReservationStateEvent,
    ReservationWarningEvent,
    SpotEvent,
    StateChangeEvent,
    WarningEvent,
    parse,
)
from governor.spot.ports import CheckpointSender, InstanceReader, SpotRecovery


@dataclass
class Adapters:
    """The AWS-facing pieces the Spot handler acts through; tests pass fakes or moto-backed adapters."""

    reader: InstanceReader
    commands: CheckpointSender
    recovery: SpotRecovery
    #: Where the adapters read and act (None: the function's own account, from its context; its own region).
    account: str | None = None
    region: str | None = None
    #: DescribeCapacityReservations, read before any capacity event is acted on (None: every one is refused).
    reservations: ReservationReader | None = None


def _member_ports(
    region: str | None, endpoint: str | None, account: str | None = None, event_id: str | None = None
) -> Adapters:
    from governor.adapters.capacity import CapacityReservations
    from governor.adapters.ec2 import Ec2Reader
    from governor.adapters.ssm import SsmCommands
    from governor.spot.recovery import SpotRecoveryActions

    where: dict[str, Any] = {"account": account, "event_id": event_id}
    return Adapters(
        Ec2Reader(region, **where),
        SsmCommands(region, **where),
        SpotRecoveryActions(region, **where),
        account=account,
        region=region,
        reservations=CapacityReservations(region, **where),
    )


_ports = cache(_member_ports)


def default_ports(event: Any = None) -> Adapters:
    """Built once per container (per region and endpoint, so a local emulator restart gets fresh clients).

    In organisation mode an event from a member account gets ports on the spoke role in its account and region,
    built per event (the clients and credentials behind them are cached until near expiry).
    """
    from governor.adapters.aws import member_target

    runtime, endpoint, member = default_runtime(), os.environ.get("AWS_ENDPOINT_URL"), member_target(event)
    if member is not None:
        return _member_ports(member[1] or runtime.region, endpoint, member[0], member[2])
    return _ports(runtime.region, endpoint)


def _when(event: SpotEvent) -> dt.datetime:
    return utc(event.time)


def _result(status: str, event: SpotEvent, decision: Decision, **extra: Any) -> dict[str, Any]:
    return {
        "status": status,
        "event_id": event.id,
        "instance_id": getattr(event.detail, "instance_id", decision.resource),
        "verdict": decision.verdict,
        **extra,
    }


#: Spot's recovery after the checkpoint: a failure is recorded and reported, not retried.
RECOVERY = ("deregister", "complete_lifecycle_action", "replace")


def _bounded(instance: Instance | None, runtime: Runtime, at: dt.datetime) -> Instance | None:
    """``exempt=true`` read as its end, and a ``spot.exemptions.tags`` match honoured only while a person is recorded
    setting it (``governor.domain.tagging``): no exemption lasts for ever, and a tag anyone can set on another team's
    instance cannot spare it its checkpoint."""
    if instance is None:
        return None
    policy = runtime.policy
    return bounded_instance(instance, policy.fleet, runtime.ledger, at, exemptions=policy.spot.exemptions)


def _misplaced(
    event: WarningEvent | RebalanceEvent | ReservationWarningEvent | BlockExpiryEvent | CapacityEvent,
    runtime: Runtime,
    ports: Adapters,
    rule: str,
    resource: str | None = None,
) -> dict[str, Any] | None:
    """An event naming another account or region than the adapters read: recorded, nothing read or done."""
    why = elsewhere(event.account, event.region, ports.account, ports.region or runtime.region)
    if why is None:
        return None
    decision = Decision(
        policy="spot",
        verdict="ignored",
        resource=resource or getattr(event.detail, "instance_id", None) or event.detail.capacity_reservation_id,  # type: ignore[union-attr]
        reasons=[f"not acted on: {why}"],
        evidence={"event_account": event.account, "event_region": event.region},
        severity="warning",
        rule=rule,
    )
    runtime.ledger.record(decision, event_id=event.id, at=_when(event))
    return _result("ignored", event, decision, reason=decision.reasons[0])


def _block_expiry(event: BlockExpiryEvent, runtime: Runtime, ports: Adapters, now: dt.datetime) -> dict[str, Any]:
    """A Capacity Block about to end, as EC2 reports it (its state, type and end; the event only names it): every
    running instance EC2 lists in it takes the warning's checkpoint path, each under an event id derived from this
    event's (a retry resumes each instance's record, never signals twice). An event EC2 contradicts is refused."""
    detail = event.detail
    rid = detail.capacity_reservation_id
    misplaced = _misplaced(event, runtime, ports, "capacity-block-expiry", rid)
    if misplaced is not None:
        return misplaced
    block = capacity_acts.reservation(ports, rid)
    refusal = check_block_expiry(rid, utc(detail.end_date), block, now)
    if refusal is not None or block is None or block.end_date is None:
        return capacity_acts.refuse(event, runtime, rid, refusal or UNREAD, "capacity-block-expiry")
    notice = block_notice(rid, block.end_date)
    members = sorted(i.id for i in ports.reader.in_reservation(rid))
    results = [_warning(event, runtime, ports, notice, (i, f"{event.id}#{i}")) for i in members]
    if not members:
        decision = Decision(
            policy="spot",
            verdict="ok",
            resource=rid,
            reasons=[f"Capacity Block {rid} ends with no running instance in it"],
            evidence=notice.evidence(_when(event)),
            rule=notice.rule,
        )
        runtime.ledger.record(decision, event_id=event.id, at=_when(event))
    return {
        "status": "acted" if runtime.policy.spot.enforce and results else "reported",
        "event_id": event.id,
        "reservation_id": rid,
        "notice": notice.evidence(_when(event)),
        "instances": {r["instance_id"]: r for r in results},
    }


def _capacity(event: CapacityEvent, runtime: Runtime, ports: Adapters, now: dt.datetime) -> dict[str, Any]:
    """The capacity lifecycle: the reservation the event names is read, and only if EC2 agrees is the decision
    recorded and its owners told (a delivered block's end also on each instance EC2 lists in it)."""
    detail = event.detail
    rid = detail.source_reservation_id if isinstance(detail, ReclamationDetail) else detail.capacity_reservation_id
    rule = {DeliveredEvent: RULE_DELIVERED, ReservationStateEvent: RULE_STATE}.get(type(event), RULE_RECLAIMED)
    misplaced = _misplaced(event, runtime, ports, rule, rid)
    if misplaced is not None:
        return misplaced
    found = capacity_acts.reservation(ports, rid)
    if isinstance(event, DeliveredEvent):
        refusal = check_delivered(rid, utc(event.detail.end_date), found, now)
    elif isinstance(event, ReservationStateEvent):
        refusal = check_state(rid, event.detail.state, found)
    else:
        refusal = check_reclamation(event.detail, found, event.account)
    if refusal is not None or found is None:
        return capacity_acts.refuse(event, runtime, rid, refusal or UNREAD, rule)
    at = _when(event)
    if isinstance(event, DeliveredEvent):
        decision = decide_delivered(found, ports.reader.in_reservation(rid), runtime.policy, at)
        items = capacity_acts.block_items(decision, event.id, at)
        title = f"Capacity Block {rid} delivered, ends {found.end_date or at:%Y-%m-%d %H:%M} UTC"
        return capacity_acts.tell(event, runtime, ports, decision, title, items)
    if isinstance(event, ReservationStateEvent):
        decision = decide_reservation_state(found, event.detail.state, runtime.policy)
        return capacity_acts.tell(event, runtime, ports, decision, f"Capacity reservation {rid} {event.detail.state}")
    decision = decide_reclamation(event.detail, found, runtime.policy)
    return capacity_acts.tell(event, runtime, ports, decision, f"Lent capacity is back in {rid}")


#: How the warning's checkpoint command names itself (its at-most-once Comment starts with it).
CHECKPOINT_LABEL = "spot checkpoint"


class CheckpointInFlight(RuntimeError):
    """Another live invocation of this warning (the first delivery, still sending, while Lambda's retry or a duplicate
    runs) holds the checkpoint's claim. Recording "in flight" as the checkpoint's outcome would overwrite the holder's
    command id in the interruption record and publish the warning's finding saying "in flight" under the id the
    holder's finding then finds already sent. This attempt fails instead: Lambda retries it after the holder has
    finished, and the retry resumes from the holder's record (or takes a dead holder's claim over: ``domain/once``)."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(f"checkpoint of {instance_id} is being sent by another invocation; retry later")


def _warning(
    event: WarningEvent | ReservationWarningEvent | BlockExpiryEvent,
    runtime: Runtime,
    ports: Adapters,
    notice: Notice | None = None,
    target: tuple[str, str] | None = None,
    check: Callable[[Instance], Refusal | None] | None = None,
) -> dict[str, Any]:
    """One instance's warning: Spot's, an interruptible reservation's, or (``target``: the instance and the event id
    derived for it) one instance of a Capacity Block about to end. Every notice takes the same checkpoint path;
    ``check`` holds the event against EC2's record of the instance's reservation before anything is sent."""
    at = _when(event)
    instance_id, event_id = target or (event.detail.instance_id, event.id)  # type: ignore[union-attr]
    action = getattr(event.detail, "instance_action", "terminate")
    notice = notice or spot_notice(at)
    misplaced = _misplaced(event, runtime, ports, notice.rule, instance_id)
    if misplaced is not None:
        return misplaced
    instance = _bounded(ports.reader.instance(instance_id), runtime, at)
    decision = decide_warning(instance_id, instance, action, runtime.policy, at, notice)
    if decision.verdict != "act" or instance is None:
        runtime.ledger.record(decision, event_id=event_id, at=at)
        _outbox(runtime, event_id).flush()  # what an earlier attempt staged before the instance went away
        return _result("ignored", event, decision, reason=decision.reasons[0], instance_id=instance_id)
    refusal = check(instance) if check is not None else None
    if refusal is not None:
        return capacity_acts.refuse(event, runtime, instance.id, refusal, notice.rule, event_id)
    # One checkpoint per interruption (the instance's run, as EC2 and the ledger say), not per event: the first event
    # about it owns it, any other is recorded as its duplicate. A retry of the owner (after a failed write or publish
    # further down) resumes from what was recorded: the checkpoint is never sent twice, nor a second replacement.
    existing = InterruptionRecord.from_item(runtime.ledger.get_item(RECORD_KIND, instance.id))
    scope = existing.next_key(instance.launch_time) if existing else interruption_key(instance.id, instance.launch_time)
    owner = existing.event_id if existing and existing.same_run(instance.launch_time) else None
    owner = owner or first_claimant(runtime.ledger, scope, event_id, at)
    if owner != event_id:
        same = records.duplicate(decision, owner, scope, existing)
        runtime.ledger.record(same, event_id=event_id, at=at)
        return _result("duplicate", event, same, reason=same.reasons[0], instance_id=instance_id, duplicate_of=owner)
    if existing is not None and existing.event_id == event_id:
        record = existing
    else:
        record = start_record(decision, instance, event_id, at, action, scope)
        if existing is not None:  # a stopped instance interrupted again: keep the earlier record under its own key
            runtime.ledger.put_item(RECORD_KIND, f"{existing.instance_id}#{existing.event_id}", existing.to_item())

    def before(action: Action) -> Outcome | None:
        if action.type == "checkpoint" and (record.command_id or record.checkpoint_error):
            # an earlier attempt sent it (or failed to): its outcome, never a second send
            return records.sent(record.checkpoint_delivered, record.command_id, record.checkpoint_error)
        if action.type == "checkpoint" and held_elsewhere(
            runtime.ledger, scope, instance.id, commands=ports.commands, what=CHECKPOINT_LABEL
        ):
            raise CheckpointInFlight(instance.id)
        if action.type in RECOVERY and record.recovered:
            return Outcome(ok=True, data={"resumed": True})
        if action.type == "complete_lifecycle_action" and record.checkpoint_delivered:
            return Outcome(ok=True, data={"note": "pending"})  # released when SSM reports the checkpoint finished
        return None

    def after(action: Action, outcome: Outcome) -> None:
        if action.type == "checkpoint" and (outcome.data or {}).get("error") == IN_FLIGHT:
            raise CheckpointInFlight(instance.id)  # claimed between the check above and this attempt's claim
        records.keep(record, action, outcome)
        if action.type == "checkpoint":
            runtime.ledger.put_item(RECORD_KIND, instance.id, record.to_item())

    box = _outbox(runtime, event_id)
    run = runner.Run(event_id, runtime.ledger, runtime.policy, ports, box, at=at, label=CHECKPOINT_LABEL, intent=scope)
    run.settle(
        decision,
        findings=lambda decided, _: records.warning_findings(decided, record, event, notice),
        before=before,
        after=after,
        contain=lambda action: action.type in RECOVERY,
        live=instance,
    )
    record.recovered = True
    runtime.ledger.put_item(RECORD_KIND, instance.id, record.to_item())
    box.flush()
    return _result(
        "acted" if runtime.policy.spot.enforce else "reported",
        event,
        decision,
        instance_id=instance_id,
        notice=notice.evidence(at),
        checkpoint={
            "attempted": record.checkpoint_attempted,
            "delivered": record.checkpoint_delivered,
            "command_id": record.command_id,
            "error": record.checkpoint_error,
        },
        target_groups=record.target_groups,
        lifecycle_action=record.lifecycle_action,
        replacement_id=record.replacement_id,
        errors=record.errors,
    )


def _outbox(runtime: Runtime, event_id: str) -> Outbox:
    """This event's outbox, holding what an earlier attempt staged and never got accepted."""
    box = Outbox(runtime.ledger, runtime.sink, event_id=event_id)
    box.resume()
    return box


def _send(runtime: Runtime, event_id: str, findings: list[Finding]) -> None:
    """Through the outbox: staged, published, marked sent once accepted; a retry publishes what is left."""
    box = _outbox(runtime, event_id)
    box.add(findings)
    box.flush()


def _rebalance(event: RebalanceEvent, runtime: Runtime, ports: Adapters) -> dict[str, Any]:
    at = _when(event)
    misplaced = _misplaced(event, runtime, ports, "spot-rebalance")
    if misplaced is not None:
        return misplaced
    instance = _bounded(ports.reader.instance(event.detail.instance_id), runtime, at)
    decision = decide_rebalance(event.detail.instance_id, instance, runtime.policy, at)
    if decision.verdict != "act" or instance is None:
        runtime.ledger.record(decision, event_id=event.id, at=at)
        return _result("ignored", event, decision, reason=decision.reasons[0])
    # One early checkpoint per run of the instance: a recommendation delivered again under another id is a duplicate.
    # A Spot warning after it is another matter (the job has moved on since): it checkpoints again.
    scope = f"rebalance:{instance.id}:{instance.launch_time.isoformat()}"
    owner = first_claimant(runtime.ledger, scope, event.id, at)
    if owner != event.id:
        same = records.duplicate(decision, owner, scope, None)
        runtime.ledger.record(same, event_id=event.id, at=at)
        return _result("duplicate", event, same, reason=same.reasons[0], duplicate_of=owner)
    checkpoint: dict[str, Any] = {"attempted": False}

    def before(action: Action) -> Outcome | None:
        earlier = runtime.ledger.get_item(REBALANCE_KIND, instance.id)
        if earlier is not None and earlier.get("event_id") == event.id:  # a retry: the command already left
            sent = dict(earlier["checkpoint"])
            return records.sent(bool(sent.get("delivered")), sent.get("command_id"), sent.get("error"))
        return None

    def after(action: Action, outcome: Outcome) -> None:
        checkpoint.update(attempted=True, **outcome.data)
        runtime.ledger.put_item(
            REBALANCE_KIND, instance.id, {"event_id": event.id, "at": at.isoformat(), "checkpoint": checkpoint}
        )

    def findings(decided: Decision, results: Sequence[tuple[Action, Outcome]] | None) -> list[Finding]:
        outcome = "report-only: nothing was sent" if not runtime.policy.spot.enforce else "recorded"
        if runtime.policy.spot.enforce and records.blocked(decided):
            outcome = f"checkpoint not sent: {records.blocked(decided)}"
        if checkpoint["attempted"]:
            outcome = (
                f"early checkpoint sent ({checkpoint['command_id']})"
                if checkpoint["delivered"]
                else f"early checkpoint NOT delivered: {checkpoint['error']}"
            )
        title = f"Spot rebalance recommendation: {instance.type} {instance.id}"
        evidence = decided.evidence
        detail = "; ".join([*decided.reasons, outcome])
        return [records.finding(decided, event, title, detail, owner=evidence.get("owner"), team=evidence.get("team"))]

    box = _outbox(runtime, event.id)
    run = runner.Run(
        event.id, runtime.ledger, runtime.policy, ports, box, at=at, label="spot rebalance checkpoint", intent=scope
    )
    run.settle(decision, findings=findings, before=before, after=after, live=instance)
    box.flush()
    return _result("acted" if runtime.policy.spot.enforce else "reported", event, decision, checkpoint=checkpoint)


def _state_change(event: StateChangeEvent, runtime: Runtime, ports: Adapters) -> dict[str, Any]:
    at = _when(event)
    instance_id = event.detail.instance_id
    record = InterruptionRecord.from_item(runtime.ledger.get_item(RECORD_KIND, instance_id))
    decision = decide_state_change(instance_id, event.detail.state, record, runtime.policy)
    runtime.ledger.record(decision, event_id=event.id, at=at)
    if decision.verdict != "act" or record is None:
        return _result("ignored", event, decision, reason=decision.reasons[0])
    record.status = event.detail.state
    record.final_at = at
    if record.command_id and record.checkpoint_status not in FINAL_COMMAND_STATUSES:
        try:
            record.checkpoint_status = ports.commands.status(record.command_id, instance_id)
        except Exception as error:
            record.errors.append(f"checkpoint status: {error}")
    runtime.ledger.put_item(RECORD_KIND, instance_id, record.to_item())
    if record.checkpoint_attempted and record.checkpoint_status != "Success":
        _send(
            runtime,
            event.id,
            [
                records.finding(
                    decision.model_copy(update={"severity": "warning"}),
                    event,
                    f"Spot instance {instance_id} {record.status}; "
                    f"checkpoint {record.checkpoint_status or 'not delivered'}",
                    f"checkpoint command {record.command_id or '(none)'} ended {record.checkpoint_status or 'unknown'}"
                    f"{': ' + record.checkpoint_error if record.checkpoint_error else ''}; the job may resume from an "
                    "older checkpoint",
                    owner=record.owner,
                    team=record.team,
                )
            ],
        )
    return _result("recorded", event, decision, final_status=record.status, checkpoint_status=record.checkpoint_status)


def _command_status(event: CommandStatusEvent, runtime: Runtime, ports: Adapters) -> dict[str, Any]:
    at = _when(event)
    detail = event.detail
    record = InterruptionRecord.from_item(runtime.ledger.get_item(RECORD_KIND, detail.instance_id))
    decision = decide_command_status(detail.instance_id, detail.command_id, detail.status, record, runtime.policy)
    if decision.verdict != "act" or record is None:
        runtime.ledger.record(decision, event_id=event.id, at=at)
        return _result("ignored" if decision.verdict == "ignored" else "waiting", event, decision)
    record.checkpoint_status = detail.status

    def findings(decided: Decision, _: Any) -> list[Finding]:
        if detail.status == "Success":
            return []
        title = f"Spot checkpoint {detail.status} on {record.instance_type} {detail.instance_id}"
        text = (
            f"checkpoint command {detail.command_id} ended {detail.status}; the job may resume from an older checkpoint"
        )
        return [records.finding(decided, event, title, text, owner=record.owner, team=record.team)]

    box = _outbox(runtime, event.id)
    run = runner.Run(event.id, runtime.ledger, runtime.policy, ports, box, at=at)
    run.settle(decision, findings=findings, after=partial(records.keep, record), contain=lambda action: True)
    runtime.ledger.put_item(RECORD_KIND, detail.instance_id, record.to_item())
    box.flush()
    return _result(
        "recorded", event, decision, checkpoint_status=detail.status, lifecycle_action=record.lifecycle_action
    )


def process(event: SpotEvent, runtime: Runtime, ports: Adapters, call: Invocation | None = None) -> dict[str, Any]:
    """Decide, record, then act. What an earlier attempt of this event staged and never got accepted is delivered
    by every path: a warning's act path resumes its outbox and its early return (the instance gone) flushes it; the
    other events flush it first. A warning does not flush first: a live invocation of the same warning (Lambda's
    retry overlapping the first delivery after its 40 s in-progress expiry) may have staged its finding moments ago,
    still saying nothing was sent, and publishing that would leave the holder's final finding (same id) unsent."""
    if ports.account is None and call is not None and call.account is not None:
        ports = replace(ports, account=call.account)  # the function's own account, from its ARN
    now = call.now if call is not None else dt.datetime.now(dt.UTC)  # the function's clock, never the event's
    if not isinstance(event, WarningEvent | ReservationWarningEvent):
        _outbox(runtime, event.id).flush()
    if isinstance(event, WarningEvent):
        return _warning(event, runtime, ports)
    if isinstance(event, ReservationWarningEvent):
        detail = event.detail
        notice = reservation_notice(_when(event), detail.instance_termination_time)

        def check(instance: Instance) -> Refusal | None:
            found = capacity_acts.reservation(ports, instance.capacity_reservation_id)
            return check_reservation_warning(instance, found, notice.deadline, detail.az_id, now)

        return _warning(event, runtime, ports, notice, check=check)
    if isinstance(event, BlockExpiryEvent):
        return _block_expiry(event, runtime, ports, now)
    if isinstance(event, DeliveredEvent | ReservationStateEvent | ReclamationEvent):
        return _capacity(event, runtime, ports, now)
    if isinstance(event, RebalanceEvent):
        return _rebalance(event, runtime, ports)
    if isinstance(event, StateChangeEvent):
        return _state_change(event, runtime, ports)
    return _command_status(event, runtime, ports)


def handle(
    event: Any, runtime: Runtime, ports: Adapters, context: Any = None, now: dt.datetime | None = None
) -> dict[str, Any]:
    """Parse at the edge (invalid events go to the DLQ with their reason), then process the event once per event id
    (a duplicate delivery returns the first result); ``now``: a test's clock (else the function's)."""
    return HANDLER.handle(event, runtime, ports, context=context, now=now)


def _count(result: dict[str, Any]) -> None:
    metrics.add_metric(name=f"Spot{str(result.get('status', 'unknown')).capitalize()}", unit="Count", value=1)


#: Spot interruption handling: checkpoint within the warning, record, notify, and optionally relaunch.
HANDLER: Handler[SpotEvent, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=lambda event, runtime: default_ports(event),
    in_progress_seconds=REGISTRY["spot"].in_progress_seconds,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
    counted=_count,
)
lambda_handler = HANDLER.lambda_handler()
