"""The ``idle`` function: a scheduled sweep that reclaims GPU instances every signal says are idle.

One paginated DescribeInstances, batched GetMetricData, then the pure idle policy for every instance, judged at the
function's own clock (a replayed or late sweep judges now; one older than an interval is skipped). Each verdict is
recorded before anything changes; destructive actions re-read the instance and its metrics first; Auto Scaling
members are reclaimed through their group; warnings and actions go to the ``governor`` bus; the rate limit defers
the surplus and the circuit breaker holds correlated idling with one critical finding per trip.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import Field

from governor import acts, runner
from governor.adapters.aws import per_session
from governor.adapters.capacity import CapacityReservations
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.hyperpod import HyperPodNodes
from governor.adapters.ssm import SsmCommands
from governor.domain.actions import Notify, Outcome, Terminate
from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, LAST_SWEEP_KIND, Breaker, read_breaker, write_breaker
from governor.domain.capacity import (
    HyperPodReader,
    KnownFirst,
    Reservation,
    ReservationReader,
    purchase_model,
    unused_capacity,
    with_hyperpod,
    with_reservations,
)
from governor.domain.costs import PriceBook
from governor.domain.decision import Action, Decision, Finding
from governor.domain.fleet import (
    KEEP_KIND,
    LAUNCH_KIND,
    Instance,
    Ownership,
    checkpoint_choice,
    exemption,
    ownership,
    snoozed_until,
    tag_problems,
)
from governor.domain.model import Model
from governor.domain.ports import utcnow
from governor.domain.tagging import bounded_instance
from governor.events.envelopes import GovernorEvent, InvalidEventError, parse_model
from governor.events.names import INTERACTIONS_SOURCE, STOP_REQUESTED
from governor.idle.act_records import confirm_reclaims
from governor.idle.assessment import assess_signals, power_limit
from governor.idle.autoscaling import AutoScalingGroups
from governor.idle.capacity import OFFERED_STATUS, capacity_offer, unused_reservation_decision
from governor.idle.decide import InstanceOutcome
from governor.idle.digest import digest_warnings, warning_accepted
from governor.idle.domain import (
    CHECKPOINT_DONE,
    MARK_KIND,
    POLICY,
    RESUMED,
    Assessment,
    Mark,
    MetricSource,
    fetched_signals,
    lookback_start,
    mark_tag_problems,
    sweep_interval,
)
from governor.idle.kubernetes.drain_sweep import (
    drain_finding,
    follow_up,
    not_reclaimed,
    through_cluster,
    unfinished_drain,
)
from governor.idle.kubernetes.nodes import KubernetesNodes
from governor.idle.ownership import unproven_claim
from governor.idle.policy import KubernetesCluster
from governor.idle.provenance import annotated, vouch
from governor.idle.purchase import checkpoint_command
from governor.idle.sources import attribution, metric_source
from governor.idle.stop_now import STOP_REQUEST_MAX_AGE as STOP_REQUEST_MAX_AGE
from governor.idle.stop_now import StopFacts, decide_stop_now, too_old
from governor.idle.sweep import SweepPlan, sweep
from governor.observability import logger, metrics
from governor.outbox import Outbox, finding_id
from governor.runtime import Handler, Invocation, Runtime, default_runtime

SCHEDULED = "Scheduled Event"
SCHEDULE_SOURCES = ("aws.scheduler", "aws.events")
MARK_TTL = dt.timedelta(days=2)


def answer(response_url: str, message: dict[str, Any]) -> bool:
    """Update the Slack message behind a Stop now click (:func:`governor.adapters.slack_app.answer`, loaded only when
    there is a click to answer: a scheduled sweep never imports the Slack client)."""
    from governor.adapters.slack_app import answer as post

    return post(response_url, message)


@dataclass
class Adapters:
    """The AWS reads and writes the sweep uses, and its clock; tests pass the same classes pointed at moto, or fakes."""

    instances: Ec2Reader
    actions: Ec2Actions
    metrics: MetricSource
    commands: SsmCommands
    groups: AutoScalingGroups | None = None
    clock: Callable[[], dt.datetime] = field(default=utcnow)
    #: Capacity reservations (end dates, match criteria); None: the instances' own EC2 fields alone hold them.
    reservations: ReservationReader | None = None
    nodes: KubernetesNodes | None = None  # EKS nodes drained through their cluster's API (idle.clusters reclaim)
    #: SageMaker HyperPod clusters' node lists: their nodes are reported only, never stopped through EC2.
    hyperpod: HyperPodReader | None = None
    respond: Callable[[str, dict[str, Any]], bool] = answer


@per_session
def _aws(
    region: str | None,
    memory_unit: str,
    source: str = "cloudwatch_agent",
    clusters: tuple[KubernetesCluster, ...] = (),
) -> Adapters:
    groups = AutoScalingGroups(region)
    drains = any(c.reclaim == "drain" for c in clusters)
    return Adapters(
        Ec2Reader(region),
        Ec2Actions(region),
        metric_source(source, region, memory_unit=memory_unit, clusters=clusters),
        SsmCommands(region),
        groups,
        reservations=CapacityReservations(region),
        nodes=KubernetesNodes(region, groups) if drains else None,
        hyperpod=HyperPodNodes(region),
    )


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


def load_marks(runtime: Runtime) -> dict[str, Mark]:
    """Every live mark in one ledger query (never one read per instance)."""
    marks: dict[str, Mark] = {}
    for item in runtime.ledger.query_kind(MARK_KIND):
        mark = Mark.from_item(item)
        instance_id = item.get("instance_id")
        if mark is not None and isinstance(instance_id, str):
            marks[instance_id] = mark
    return marks


def load_breaker(runtime: Runtime) -> Breaker:
    """The circuit breaker's state (closed when never tripped)."""
    return Breaker.from_item(runtime.ledger.get_item(BREAKER_KIND, BREAKER_KEY))


#: How often a sweep re-reads and re-plans when the breaker changed under it (an operator's re-arm, another sweep).
BREAKER_ATTEMPTS = 5


def _plan_with_breaker(
    instances: list[Instance],
    signals: Any,
    marks: dict[str, Mark],
    runtime: Runtime,
    now: dt.datetime,
    interval: dt.timedelta,
) -> SweepPlan:
    """The sweep's plan, its breaker state written with a conditional write on the version it was planned from.

    A write that loses (``governor idle rearm`` or an overlapping sweep wrote in between) re-reads the breaker and
    plans again from it: an operator's re-arm is never undone by a sweep that read the state before it, and two
    overlapping sweeps trip the breaker (and raise its critical finding) once.
    """
    for _ in range(BREAKER_ATTEMPTS):
        breaker, version = read_breaker(runtime.ledger)
        plan: SweepPlan = sweep(instances, signals, marks, runtime.policy, now, interval=interval, breaker=breaker)
        if plan.breaker == breaker or write_breaker(runtime.ledger, plan.breaker, version):
            return plan
        logger.info("idle breaker changed during the sweep: planned again from its new state")
    raise RuntimeError(f"idle breaker: still contended after {BREAKER_ATTEMPTS} attempts; Lambda retries the sweep")


def remembered_keeps(instances: list[Instance], runtime: Runtime) -> list[Instance]:
    """Report-only idle: a Keep clicked while buttons were report-only wrote no tag, so the instance carries the snooze
    it would have had. No later report-only decision or message then says "would be stopped" during a snooze the owner
    asked for. Never when idle enforces: only a real tag (or Keep with buttons on) spares an instance a real stop."""
    if runtime.policy.idle.enforce:
        return instances
    tag = runtime.policy.fleet.keep_until_tag
    keeps = {str(item.get("instance_id")): str(item.get("until")) for item in runtime.ledger.query_kind(KEEP_KIND)}
    return [
        replace(i, tags={**i.tags, tag: keeps[i.id]}) if i.id in keeps and tag not in i.tags else i for i in instances
    ]


def _mark_item(instance_id: str, mark: Mark | None, now: dt.datetime) -> dict[str, Any]:
    item: dict[str, Any] = mark.to_item(instance_id) if mark else {"instance_id": instance_id, "idle_since": None}
    item["expires_at"] = int((now + MARK_TTL).timestamp())
    return item


def _store_mark(runtime: Runtime, instance_id: str, mark: Mark | None, now: dt.datetime) -> None:
    runtime.ledger.put_item(MARK_KIND, instance_id, _mark_item(instance_id, mark, now))


def _refresh_checkpoints(marks: dict[str, Mark], aws: Adapters) -> None:
    """Ask SSM how pending checkpoint commands ended, so the domain knows whether to act or wait."""
    for instance_id, mark in list(marks.items()):
        if mark.checkpoint_command_id and mark.checkpoint_status not in CHECKPOINT_DONE:
            status = aws.commands.status(mark.checkpoint_command_id, instance_id)
            marks[instance_id] = replace(mark, checkpoint_status=status)


def bounded(instance: Instance, runtime: Runtime, now: dt.datetime) -> Instance:
    """Exemptions as ``governor.domain.tagging.bounded`` reads them: each ends, and each needs a proven author."""
    return bounded_instance(instance, runtime.policy.fleet, runtime.ledger, now, runtime.policy.idle.exemptions)


def _still_safe(instance: Instance, live: Instance | None, runtime: Runtime, now: dt.datetime) -> str | None:
    """Why acting is no longer right after re-reading the instance, or None when it still is."""
    if live is None:
        return f"{instance.id} no longer exists"
    live = bounded(live, runtime, now)
    if live.state != "running":
        return f"{instance.id} is {live.state} now"
    if live.launch_time != instance.launch_time:
        return f"{instance.id} was restarted at {live.launch_time.isoformat()}"
    why = exemption(
        live.id, live.tags, runtime.policy.fleet, runtime.policy.idle.exemptions, now, refused=live.refused_keys
    )
    if why:
        return f"{instance.id} became exempt: {why}"
    snooze = snoozed_until(live.tags, runtime.policy.fleet, now)
    if snooze:
        return f"{instance.id} was snoozed until {snooze.isoformat()}"
    return None


def warning_finding_id(instance_id: str, mark: Mark, enforce: bool) -> str:
    """One id per idle episode (and enforcement setting): every sweep that re-sends an unpublished warning sends the
    same finding, and an earlier attempt's acceptance is found again."""
    return finding_id(f"idle-warning#{mark.idle_since.isoformat()}#{enforce}", instance_id, "idle.warned")


def reclaim_finding_id(instance_id: str, spell: Mark | None, event_id: str) -> str:
    """One id per idle spell for "stopped" / "terminated": a sweep and Stop now clicks that all pass the re-read post
    one message, since the outbox keeps the id's acceptance and the notifier delivers an id once."""
    scope = f"idle-reclaim#{spell.idle_since.isoformat()}" if spell is not None else event_id
    return finding_id(scope, instance_id, "idle.acted")


#: States that confirm a stop or terminate was made (the instance no longer runs, or is gone).
_RECLAIMED_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


def resolve_pending(aws: Adapters) -> Callable[[Finding, str], Finding | None]:
    """What a stop or terminate finding staged before its act becomes once its invocation is gone: re-read the
    instance; a stopped (or gone) one confirms the act, a running one means it was never made (withdrawn)."""

    def resolve(finding: Finding, act: str) -> Finding | None:
        live = aws.instances.instance(finding.resource)
        if live is not None and live.state not in _RECLAIMED_STATES:
            return None
        seen = live.state if live is not None else "gone"
        verb = {"stop": "stopped", "terminate": "terminated"}.get(act, act)
        detail = finding.detail.replace(f"{act} requested", verb)
        return finding.model_copy(
            update={"detail": f"{detail} (the instance is {seen}; the invocation that acted ended before reporting)"}
        )

    return resolve


def _destructive(outcome: InstanceOutcome) -> bool:
    return any(a.type in ("checkpoint", "stop", "terminate") for a in outcome.decision.enforced_actions())


def recheck_metrics(
    outcomes: list[InstanceOutcome], runtime: Runtime, aws: Adapters, judged_at: dt.datetime
) -> dict[str, Assessment]:
    """Re-read, in one batched fetch at the clock's time, the metrics of every instance about to be acted on.

    A job started minutes ago may not have shown in the sweep's read (CloudWatch ingests with a delay); the action
    goes ahead only if this read still says idle over the whole window with a fresh newest sample.
    """
    ids = [o.instance.id for o in outcomes if _destructive(o)]
    if not ids:
        return {}
    idle = runtime.policy.idle
    now = max(aws.clock(), judged_at)
    types = {o.instance.id: o.instance.type for o in outcomes}
    fresh = aws.metrics.fetch(ids, fetched_signals(idle), now - dt.timedelta(minutes=idle.window_minutes), now)
    return {i: assess_signals(i, fresh.get(i, {}), idle, now, power_limit(types[i], idle)) for i in ids}


def _group_refusal(outcome: InstanceOutcome, aws: Adapters, runtime: Runtime) -> str | None:
    """For a reclaim through an Auto Scaling group: why the group cannot be scaled in by this instance now."""
    for action in outcome.decision.enforced_actions():
        if isinstance(action, Terminate) and action.via == "autoscaling":
            if aws.groups is None:
                return "no Auto Scaling client configured"
            capacity = aws.groups.capacity(str(action.group), outcome.instance.id)
            if capacity is None:
                return f"Auto Scaling group {action.group} no longer exists"
            return capacity.refusal(outcome.instance.id, runtime.policy.fleet.fleet_tags)
    return None


def settle(
    outcome: InstanceOutcome,
    event: GovernorEvent,
    runtime: Runtime,
    aws: Adapters,
    now: dt.datetime | None = None,
    recheck: Assessment | None = None,
    box: Outbox | None = None,
    later: runner.Later | None = None,
) -> tuple[list[str], Mark | None]:
    """Act, through the runner, on the enforced actions of one recorded decision, re-reading the instance (and its
    metrics, when the sweep re-read them) before anything destructive.

    Returns what was done and the mark to keep for the next sweep (a checkpoint adds its command id to it). With
    ``box``, a stop or terminate stages its finding the moment it is done (under :func:`reclaim_finding_id`): a
    failure later in the invocation (a tag, a ledger write) leaves it in the outbox, which the retry or the next
    sweep publishes, and the exception carries what was done (``governor_done``) for the ledger. With ``later``, the
    outcome records of a decision that only tags are left to the sweep's batched write; a checkpoint, stop or
    terminate is recorded the moment it is done.
    """
    at = now or event.time
    decision = outcome.decision
    if not any(a.type in ("tag", "untag", "checkpoint", "stop", "terminate") for a in decision.enforced_actions()):
        return [], outcome.mark
    kept = {"mark": outcome.mark}

    def reread(decided: Decision) -> runner.Gate:
        if not _destructive(outcome):
            return runner.Go()
        live = aws.instances.instance(outcome.instance.id)
        why = _still_safe(outcome.instance, live, runtime, at)
        if why is None and recheck is not None and recheck.status != "idle":
            why = f"metrics re-read before acting say {recheck.status}: {'; '.join(recheck.reasons)}"
        if why is None:
            refusal = _group_refusal(outcome, aws, runtime)
            if not refusal:
                return runner.Go(live)
            reported = _held(decided, f"reported only: {refusal}", status="reported", rule="idle.reported")
            return runner.Hold(f"reported only: {refusal}", reported)
        skipped = _held(decided, f"not acted on after re-reading: {why}", status="idle", verdict="ok")
        return runner.Hold(f"skipped: {why}", skipped)

    done: list[str] = []
    done_actions: list[tuple[Action, Outcome]] = []
    spell = outcome.prior or outcome.mark

    def reclaim_finding(detail: str) -> Finding:
        finding = _finding(decision, outcome.finding or "", outcome.instance, event, runtime)
        return finding.model_copy(
            update={
                "id": reclaim_finding_id(outcome.instance.id, spell, event.id),
                "detail": f"{finding.detail}; done: {detail}",
            }
        )

    def before(action: Action) -> Outcome | None:
        if through_cluster(action):
            return None  # a drain's findings are its transitions' (drain_sweep), never a staged "terminated"
        if action.type == "tag" and unfinished_drain(done_actions):
            return not_reclaimed()  # the idle-action tag waits until the node is reclaimed
        # Staged before the act, pending: an invocation killed between StopInstances' answer and anything it writes
        # after still leaves the finding, which the retry or the next sweep publishes once the instance's state
        # confirms the act (`resolve_pending`), or withdraws when it does not.
        if action.type in ("stop", "terminate") and box is not None and outcome.finding:
            box.add([reclaim_finding("; ".join([*done, f"{action.type} requested"]))], pending=action.type)
        return None

    def after(action: Action, result: Outcome) -> None:
        mark = kept["mark"]
        done_actions.append((action, result))
        if result.done:
            done.append(_idle_sentence(action, result))
        if through_cluster(action):
            if result.data.get("drain_active"):  # resumed next sweep: the spell's mark stays, no fresh warning
                kept["mark"] = outcome.prior
            return
        if action.type == "checkpoint" and mark is not None:
            status = "Pending" if result.data.get("delivered") else "Undeliverable"
            kept["mark"] = replace(mark, checkpoint_command_id=result.data.get("command_id"), checkpoint_status=status)
        if action.type in ("stop", "terminate") and box is not None and outcome.finding:
            if result.ok:  # carrying what the runner's re-read after acting saw (resolved only if stopped)
                box.add([reclaim_finding("; ".join(done)).model_copy(update={"verified": result.verified})])
            else:
                box.withdraw(reclaim_finding_id(outcome.instance.id, spell, event.id))

    # No outbox here: the sweep publishes its findings in one batch, warnings by their episode's id.
    # One checkpoint per idle spell, not per sweep: a later sweep of the same spell whose mark lost the command id (the
    # mark write failed after SendCommand, or a re-warn rebuilt the mark) looks the command up instead of resending.
    intent = f"idle-spell:{outcome.instance.id}:{spell.idle_since.isoformat()}" if spell is not None else None
    run = runner.Run(
        event.id,
        runtime.ledger,
        runtime.policy,
        aws,
        label="idle checkpoint",
        intent=intent,
        later=None if _destructive(outcome) else later,
    )
    try:
        settled = run.settle(decision, reread=reread, before=before, after=after, recorded=True)
    except Exception as error:  # what was done travels with it (``acts.DONE_ATTR``), read by the sweep's record
        if not getattr(error, acts.DONE_ATTR, None):
            setattr(error, acts.DONE_ATTR, list(done))
        raise
    if settled.held is None:
        return [_idle_sentence(action, result) for action, result in settled.results if result.done], kept["mark"]
    if settled.held.why.startswith("reported only"):
        return settled.done, replace(outcome.prior, reported_at=at) if outcome.prior else None
    return settled.done, outcome.prior


def _held(decision: Decision, reason: str, *, status: str, **update: Any) -> Decision:
    """The decision as recorded when the re-read holds the action back: nothing enforced, and why."""
    return decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, reason],
            "evidence": {**decision.evidence, "status": status},
            **update,
        }
    )


def _idle_sentence(action: Action, result: Outcome) -> str:
    if action.type == "checkpoint" and not result.ok:
        return f"{result.done}; acting on the next sweep without it"
    return result.done


def _finding(
    decision: Decision, title: str, instance: Instance | None, event: GovernorEvent, runtime: Runtime
) -> Finding:
    who = owner(instance, runtime) if instance else None
    price = runtime.policy.pricing.prices.get(instance.type) if instance else None
    return Finding.from_decision(
        decision,
        title,
        owner=who.owner if who else None,
        team=who.team if who else None,
        account=event.account,
        region=event.region or runtime.region,
        event_id=event.id,
        usd_per_hour=price.on_demand if price is not None and price.on_demand else None,
    )


def _active_reservations(runtime: Runtime, aws: Adapters) -> list[Reservation] | None:
    """Every active reservation, read once a sweep when unused ones are reported (the instances' reservations are then
    looked up in it first); None when off or not read."""
    if runtime.policy.idle.unused_reservations == "off" or aws.reservations is None:
        return None
    try:
        return aws.reservations.active()
    except Exception as error:  # moto lacks the call; AWS may throttle: the sweep goes on without this report
        logger.warning("unused capacity reservations not read", extra={"reason": f"{type(error).__name__}: {error}"})
        return None


def _unused_reservations(
    event: GovernorEvent, runtime: Runtime, active: list[Reservation] | None, now: dt.datetime
) -> list[Finding]:
    """Active GPU reservations with capacity nobody runs in: a decision every sweep (the report sums its hours), a
    finding once a day per reservation (its id carries the date, so the notifier sends it once). Report-only."""
    policy = runtime.policy
    if active is None:
        return []
    book = PriceBook(policy.pricing)
    interval = sweep_interval(policy.idle)
    found = []
    for reservation in unused_capacity(active, policy.fleet.is_gpu_type):
        per_hour, source = (None, "prepaid") if reservation.capacity_block else book.paid(reservation.instance_type)
        decision, title = unused_reservation_decision(reservation, policy, per_hour, source)
        decision.evidence |= {"interval_minutes": interval.total_seconds() / 60, "judged_at": now.isoformat()}
        runtime.ledger.record(decision, event_id=event.id)
        finding = _finding(decision, title, None, event, runtime).model_copy(
            update={
                "id": finding_id(f"unused-capacity#{now.date().isoformat()}", reservation.id, decision.rule or ""),
                "owner": decision.evidence["owner"],
                "team": decision.evidence["team"],
            }
        )
        found.append(finding)
    metrics.add_metric(name="UnusedReservations", unit="Count", value=len(found))
    return found + _offer_unused(event, runtime, active, now)


def _offer_unused(event: GovernorEvent, runtime: Runtime, active: list[Any], now: dt.datetime) -> list[Finding]:
    """``reserved_capacity: offer``: unused capacity of GPU reservations offered to the configured team."""
    idle_policy = runtime.policy.idle
    if idle_policy.reserved_capacity != "offer" or not idle_policy.offer_capacity_to:
        return []
    found = []
    for reservation in unused_capacity(active, runtime.policy.fleet.is_gpu_type):
        kind = "Capacity Block" if reservation.capacity_block else "On-Demand Capacity Reservation"
        offered = _offer(
            event,
            runtime,
            now,
            reservation_id=reservation.id,
            kind=kind,
            instance_type=reservation.instance_type,
            free=f"{reservation.available} of {reservation.total} x",
            ends_at=reservation.end_date,
            zone=reservation.zone,
            why="no instance runs in that capacity, paid for whether used or not",
        )
        found += offered
    return found


def _offer_idle(event: GovernorEvent, runtime: Runtime, outcomes: list[Any], now: dt.datetime) -> list[Finding]:
    """``reserved_capacity: offer``: the reservation or block of each idle instance held as paid for, unused, offered
    to the configured team (the instance's owner keeps it: the offer says the capacity sits unused)."""
    idle_policy = runtime.policy.idle
    if idle_policy.reserved_capacity != "offer" or not idle_policy.offer_capacity_to:
        return []
    found = []
    for outcome in outcomes:
        if outcome.outcome not in ("warned", "reported"):
            continue
        purchase = purchase_model(outcome.instance)
        if not purchase.paid_for or not purchase.reservation_id:
            continue
        kind = "Capacity Block" if purchase.kind == "capacity-block" else "On-Demand Capacity Reservation"
        found += _offer(
            event,
            runtime,
            now,
            reservation_id=purchase.reservation_id,
            kind=kind,
            instance_type=outcome.instance.type,
            free=f"idle instance {outcome.instance.id}:",
            ends_at=purchase.ends_at,
            zone=None,
            why=f"its GPUs have been idle for the window ({outcome.outcome}); the capacity is paid for, unused",
        )
    return found


def _offer(event: GovernorEvent, runtime: Runtime, now: dt.datetime, **offer: Any) -> list[Finding]:
    """One offer a UTC day per reservation (claimed in the ledger, so sweeps and retries do not repeat it)."""
    team = runtime.policy.idle.offer_capacity_to or ""
    key = f"{offer['reservation_id']}#{now.date().isoformat()}"
    if not runtime.ledger.claim(OFFERED_STATUS, key, {"team": team, "at": now.isoformat()}):
        return []
    decision, title = capacity_offer(team=team, now=now, **offer)
    runtime.ledger.record(decision, event_id=event.id)
    finding = _finding(decision, title, None, event, runtime).model_copy(
        update={
            "id": finding_id(f"{OFFERED_STATUS}#{key}", offer["reservation_id"], decision.rule or ""),
            "team": team,
        }
    )
    metrics.add_metric(name="CapacityOffered", unit="Count", value=1)
    return [finding]


def owner(instance: Instance, runtime: Runtime) -> Ownership:
    """The owner and team tags, else the ``governor:creator`` tag, else the creator lifecycle recorded from CloudTrail
    (the report attributes the instance to the same person): a warning never says "unknown" when the ledger knows."""
    who = ownership(instance.tags, runtime.policy.fleet)
    if who.source != "unknown":
        return who
    launch = runtime.ledger.get_item(LAUNCH_KIND, instance.id) or {}
    creator = str(launch.get("creator") or "").strip()
    return Ownership(owner=creator, team=who.team, source="creator") if creator else who


def skip_stale(event: GovernorEvent, runtime: Runtime, now: dt.datetime) -> dict[str, Any] | None:
    """A sweep event older than one interval (an async retry, a DLQ replay) acts on nothing: recorded as skipped."""
    interval = sweep_interval(runtime.policy.idle)
    age = now - event.time
    if age <= interval:
        return None
    minutes = age.total_seconds() / 60
    reason = (
        f"sweep scheduled at {event.time.isoformat()} arrived {minutes:.0f} min late, more than one interval "
        f"({interval.total_seconds() / 60:g} min): skipped, nothing judged or acted on; the next scheduled sweep "
        "judges fresh data"
    )
    runtime.ledger.record(
        Decision(
            policy=POLICY,
            verdict="ignored",
            resource="gpu-fleet",
            reasons=[reason],
            evidence={"status": "skipped", "event_time": event.time.isoformat(), "age_minutes": round(minutes, 1)},
            rule="idle.skipped",
        ),
        event_id=event.id,
    )
    metrics.add_metric(name="IdleSweepsSkipped", unit="Count", value=1)
    logger.warning("idle sweep skipped: stale event", extra={"event_id": event.id, "age_minutes": round(minutes, 1)})
    return {"status": "skipped", "event_id": event.id, "reason": reason}


def ignored_tags(
    instances: list[Instance], stored: dict[str, Mark], runtime: Runtime, now: dt.datetime
) -> list[Decision]:
    """One decision per instance whose governor tags were not honoured: bad or unbounded exemptions and snoozes,
    marks the ledger does not back, checkpoint names outside the allow-list. Each becomes a finding, so a tag meant to
    steer the governor is seen by people instead of silently obeyed or silently dropped."""
    fleet = runtime.policy.fleet
    decisions = []
    for instance in instances:
        problems = [str(p) for p in (*tag_problems(instance.tags, fleet, now), *instance.refused_tags)]
        problems += [str(p) for p in mark_tag_problems(instance, stored.get(instance.id), now)]
        claim = unproven_claim(instance.tags)
        if claim is not None:
            problems.append(str(claim))
        choice = checkpoint_choice(instance.tags, fleet, runtime.policy.idle.checkpoint_command)
        if choice.problem:
            problems.append(choice.problem)
        if not problems:
            continue
        decisions.append(
            Decision(
                policy="idle",
                verdict="act",
                resource=instance.id,
                actions=[Notify(enforced=runtime.policy.idle.enforce)],
                reasons=problems,
                evidence={"status": "tags-ignored", "tags": {k: v for k, v in instance.tags.items() if ":" in k}},
                severity="warning",
                rule="idle.tags-ignored",
            )
        )
    return decisions


def run_sweep(event: GovernorEvent, runtime: Runtime, aws: Adapters) -> dict[str, Any]:
    """List, read, decide at the clock's time, record every verdict, then act within the rate limit and report.

    A late event is judged now, not at its own time. An event stamped ahead of the clock (clock skew, a forged or
    mistyped replay) is judged at the function's clock too: judged at its own time there would be no samples from then,
    every instance would read unmonitored and lose its idle mark (a second warning under a new id, the stop delayed).
    """
    now = aws.clock()
    if event.time > now:
        logger.warning(
            "idle sweep stamped ahead of the clock: judged now",
            extra={"event_id": event.id, "event_time": event.time.isoformat(), "now": now.isoformat()},
        )
    skipped = skip_stale(event, runtime, now)
    if skipped is not None:
        return skipped
    policy = runtime.policy
    interval = sweep_interval(policy.idle)
    instances = remembered_keeps([bounded(i, runtime, now) for i in aws.instances.gpu_instances(policy.fleet)], runtime)
    active = _active_reservations(runtime, aws)
    known = KnownFirst({r.id: r for r in active}, aws.reservations) if active is not None and aws.reservations else None
    instances, unread = with_reservations(instances, known or aws.reservations)
    if unread:
        logger.warning("idle sweep without reservation details", extra={"reason": unread})
    instances, unread = with_hyperpod(instances, aws.hyperpod)
    if unread:
        logger.warning("idle sweep without HyperPod node lists", extra={"reason": unread})
    start = lookback_start(policy.idle, now, interval)
    vouch(aws.metrics, instances, aws.nodes, (c.name for c in policy.idle.clusters if c.reclaim == "drain"))
    signals = aws.metrics.fetch([i.id for i in instances], fetched_signals(policy.idle), start, now)
    runtime.ledger.record_many(attribution(aws.metrics, policy.idle, now - interval, now), event_id=event.id)
    stored = load_marks(runtime)
    marks = dict(stored)
    _refresh_checkpoints(marks, aws)
    plan = annotated(_plan_with_breaker(instances, signals, marks, runtime, now, interval), aws.metrics)
    runtime.ledger.record_many([outcome.decision for outcome in plan.outcomes], event_id=event.id)
    findings: list[Finding] = []
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
    box.resume()  # a retried sweep publishes what its earlier attempt staged
    # and what any function left unsent: the idle sweep is the one schedule every deployment runs (every 15 minutes),
    # so a Spot finding whose event was parked and whose instance is gone is still delivered without a replay
    box.flush_stale()
    # and writes the outcome of any act whose invocation ended before recording it (``governor.acts``)
    acts.repair(runtime.ledger, now=now, event_id=event.id, confirm=confirm_reclaims(aws.instances))
    findings.extend(_unused_reservations(event, runtime, active, now))
    warnings: dict[str, tuple[str, Mark]] = {}  # instance -> (warning finding id, mark waiting for its publication)
    by_id = {i.id: i for i in instances}
    for ignored in ignored_tags(instances, stored, runtime, now):
        runtime.ledger.record(ignored, event_id=event.id)
        title = f"Governor tags ignored on {ignored.resource}: {len(ignored.reasons)} not honoured"
        findings.append(_finding(ignored, title, by_id.get(ignored.resource), event, runtime))
    if plan.alarm is not None:
        runtime.ledger.record(plan.alarm, event_id=event.id)
        held = len(plan.breaker.held)
        title = f"Idle circuit breaker tripped: {held} GPU instances turned idle together; none will be reclaimed"
        findings.append(_finding(plan.alarm, title, None, event, runtime))
        metrics.add_metric(name="IdleActionsHeldBack", unit="Count", value=held)
        logger.warning("idle circuit breaker tripped", extra={"held": held, "fleet": plan.fleet_size})
    if plan.rearmed is not None:
        runtime.ledger.record(plan.rearmed, event_id=event.id)
        logger.info("idle circuit breaker re-armed", extra={"why": plan.rearmed.reasons[0]})
    if plan.renewed is not None:
        runtime.ledger.record(plan.renewed, event_id=event.id)
        logger.warning("idle circuit breaker hold renewed", extra={"held": len(plan.breaker.held)})
    findings.extend(_offer_idle(event, runtime, plan.outcomes, now))
    rechecked = recheck_metrics(plan.outcomes, runtime, aws, now)
    done: dict[str, list[str]] = {}
    # The tags' outcome records and the marks are written together after the loop, before any finding is staged or
    # published (BatchWriteItem, not one PutItem per warning); a crash before that write repeats the tags and the
    # marks on the retry, and a checkpoint lost from a mark is found again through its intent.
    later = runner.Later()
    marks_due: list[tuple[str, str, dict[str, Any]]] = []
    for outcome in plan.outcomes:
        instance_id = outcome.instance.id
        try:
            result, mark = settle(outcome, event, runtime, aws, now, rechecked.get(instance_id), box, later)
        except Exception as error:  # one instance's failure must not stop the sweep; the next sweep retries it
            logger.exception("idle action failed", extra={"instance_id": instance_id, "event_id": event.id})
            metrics.add_metric(name="IdleActionFailures", unit="Count", value=1)
            # What was done before the failure stays on the record (a stop that happened is not "failed" alone);
            # its finding is already staged in ``box`` and goes out with the sweep's.
            earlier = list(getattr(error, "governor_done", []))
            result, mark = [*earlier, f"failed: {error.__class__.__name__}: {error}"], outcome.prior
            runtime.ledger.record(
                outcome.decision.model_copy(update={"evidence": {**outcome.decision.evidence, "done": result}}),
                event_id=event.id,
            )
        if result:
            done[instance_id] = result
        published = not any(s.startswith(("skipped", "failed")) for s in result)
        warning_id = None
        if outcome.outcome == "warned" and mark is not None and outcome.finding and published:
            # The warning period starts when the bus accepts the warning, not when it is decided: until then the
            # mark has no ``warned_at`` and every sweep warns again (same finding id, so one message downstream).
            warning_id = warning_finding_id(instance_id, mark, runtime.policy.idle.enforce)
            mark = replace(mark, warned_at=None)
            warnings[instance_id] = (warning_id, mark)
        if outcome.decision.rule == RESUMED and outcome.finding and outcome.prior is not None:
            # Staged before the warned mark is cleared: a sweep that dies in between still withdraws the warning
            # (its retry finds the mark gone and would not know of it). One id per episode.
            finding = _finding(outcome.decision, outcome.finding, outcome.instance, event, runtime)
            episode = f"idle-resumed#{outcome.prior.idle_since.isoformat()}"
            box.add([finding.model_copy(update={"id": finding_id(episode, instance_id, RESUMED)})])
            metrics.add_metric(name="IdleWarningsWithdrawn", unit="Count", value=1)
        if mark != stored.get(instance_id) and (mark is not None or instance_id in stored):
            marks_due.append((MARK_KIND, instance_id, _mark_item(instance_id, mark, now)))
        if outcome.finding and published and outcome.decision.rule != RESUMED:
            title = outcome.finding
            if any(s.startswith("reported only") for s in result):
                title = f"Idle GPU instance {instance_id} ({outcome.instance.type}) reported, not reclaimed"
            finding = _finding(outcome.decision, title, outcome.instance, event, runtime)
            if result:
                finding = finding.model_copy(update={"detail": f"{finding.detail}; done: {'; '.join(result)}"})
            if warning_id:
                finding = finding.model_copy(update={"id": warning_id})
            elif outcome.outcome == "acted" and any(s.startswith(("stopped", "terminated")) for s in result):
                finding = finding.model_copy(
                    update={"id": reclaim_finding_id(instance_id, outcome.prior or outcome.mark, event.id)}
                )
            told = drain_finding(finding, outcome, runtime.ledger, event.id)  # a drain says only what happened
            if told is not None:
                findings.append(told)
    drained, said = follow_up(
        plan.outcomes, runtime.ledger, aws, event.id, now, lambda d, t, i: _finding(d, t, i, event, runtime)
    )
    runtime.ledger.record_many(drained, event_id=event.id)
    findings.extend(said)
    # One message per owner per sweep: an owner's warnings also travel in one digest, the dearest first.
    later.items.extend(marks_due)
    later.write(runtime.ledger)
    findings, digested = digest_warnings(findings, event.id)
    box.add(findings)
    accepted = box.flush(raise_on_failure=False)  # what is not accepted stays in the outbox for the next sweep
    published_warning = warning_accepted(accepted, digested)
    warned_marks = []
    for instance_id, (warning_id, mark) in warnings.items():
        if published_warning(warning_id):
            at = accepted[digested.get(warning_id, warning_id)]
            warned_marks.append((MARK_KIND, instance_id, _mark_item(instance_id, replace(mark, warned_at=at), now)))
        else:
            metrics.add_metric(name="IdleWarningsUnpublished", unit="Count", value=1)
    runtime.ledger.put_many(warned_marks)
    counts: dict[str, int] = {}
    for outcome in plan.outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    for name, metric in (
        ("warned", "IdleWarnings"),
        ("acted", "IdleActions"),
        ("unmonitored", "UnmonitoredGpus"),
        ("deferred", "IdleActionsDeferred"),
    ):
        metrics.add_metric(name=metric, unit="Count", value=counts.get(name, 0))
    logger.info("idle sweep", extra={"instances": len(instances), "outcomes": counts})
    runtime.ledger.put_item(
        LAST_SWEEP_KIND,
        BREAKER_KEY,
        {"event_id": event.id, "judged_at": now.isoformat(), "instances": len(instances), "outcomes": counts},
    )
    return {
        "status": "swept",
        "event_id": event.id,
        "judged_at": now.isoformat(),
        "instances": len(instances),
        "outcomes": counts,
        "held_back": plan.held_back,
        "deferred": plan.deferred,
        "breaker": "open" if plan.breaker.open else "closed",
        "done": done,
    }


def stop_now(event: StopRequestEvent, runtime: Runtime, aws: Adapters, account: str | None = None) -> dict[str, Any]:
    """Stop now from Slack: the sweep's act path for one instance, without waiting for the warning to run out.

    Read (the instance, its breaker, its mark, fresh metrics), decide (:func:`governor.idle.stop_now.decide_stop_now`,
    pure), record the decision naming who asked, then ``settle`` re-reads once more and acts exactly as a sweep would.
    Enforced only when ``idle.enforce`` is. The click's record (:mod:`governor.idle.stop_record`) is checked first at
    this function's clock and in its ``account``, and marked used when the click is answered.
    """
    from governor.domain.messages import updated_message
    from governor.idle import stop_record

    now = aws.clock()  # a click stamped ahead of the clock is judged now, as a sweep is
    request = stop_record.verified(runtime.ledger, event.id, event.detail.model_dump(), now=now, account=account)
    if isinstance(request, str):
        return _unverified_stop(event, runtime, request)
    instance_id = request.instance_id
    idle = runtime.policy.idle
    who = request.who
    blocks = event.detail.message_blocks
    clicked_at = request.clicked_at or event.time

    def finish(status: str, note: str) -> dict[str, Any]:
        stop_record.mark_used(runtime.ledger, event.id, request, now, status)
        aws.respond(request.response_url, updated_message(blocks, request.token, note))
        return {"status": status, "event_id": event.id, "instance": instance_id, "note": note}

    facts, stored = None, None
    if not too_old(clicked_at, now):
        earlier = _reclaimed_by(runtime, instance_id, event.id)
        if earlier is not None:  # a retry after this request's own stop: report it, do not refuse "it is stopped now"
            box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
            box.resume()
            box.flush()
            if runtime.ledger.get_item(MARK_KIND, instance_id):
                _store_mark(runtime, instance_id, None, now)
            return finish(earlier, f"{instance_id} {earlier} for {who}")
        facts, stored = _stop_facts(instance_id, runtime, aws, now)
    plan = decide_stop_now(request, clicked_at, facts, runtime.policy, now)
    runtime.ledger.record(plan.decision, event_id=event.id)
    if plan.outcome is None:
        metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
        return finish("refused", f"Not stopped: {plan.refusal} (Stop now by {who})")
    if plan.kind == "checkpoint":
        done, kept = settle(plan.outcome, event, runtime, aws, now, plan.assessment)
        if kept != stored:
            _store_mark(runtime, instance_id, kept, now)
        return finish(
            "checkpointing",
            f"{'; '.join(done) or 'checkpoint recorded'} for {who}: click Stop now again once it has finished",
        )
    verb = plan.verb
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
    box.resume()
    done, _ = settle(plan.outcome, event, runtime, aws, now, plan.assessment, box)
    if any(s.startswith(("skipped", "reported only", "not drained")) for s in done):
        metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
        return finish("refused", f"Not {verb}: {'; '.join(done)} (Stop now by {who})")
    if not idle.enforce:
        return finish("report-only", f"Would be {verb} now for {who} (idle is report-only: nothing changed)")
    if stored is not None:
        _store_mark(runtime, instance_id, None, now)
    finding = _finding(plan.decision, plan.outcome.finding or "", plan.outcome.instance, event, runtime)
    box.add(
        [
            finding.model_copy(
                update={
                    "id": reclaim_finding_id(instance_id, plan.mark, event.id),
                    "detail": f"{finding.detail}; done: {'; '.join(done)}",
                }
            )
        ]
    )
    box.flush()
    metrics.add_metric(name="IdleActions", unit="Count", value=1)
    return finish(verb, f"{instance_id} {verb} for {who}")


def _stop_facts(instance_id: str, runtime: Runtime, aws: Adapters, now: dt.datetime) -> tuple[StopFacts, Mark | None]:
    """What Stop now decides on, read at ``now``, and the ledger's mark as stored (to know whether to rewrite it)."""
    live = aws.instances.instance(instance_id)
    if live is None or live.state != "running":
        return StopFacts(live), None
    policy = runtime.policy
    live = bounded(live, runtime, now)
    live = with_hyperpod(with_reservations([live], aws.reservations)[0], aws.hyperpod)[0][0]
    item = runtime.ledger.get_item(MARK_KIND, instance_id)
    stored = Mark.from_item(item) if item else None
    marks = {instance_id: stored} if stored is not None else {}
    if checkpoint_command(live, policy):
        _refresh_checkpoints(marks, aws)
    start = lookback_start(policy.idle, now, sweep_interval(policy.idle))
    vouch(aws.metrics, [live], aws.nodes, (c.name for c in policy.idle.clusters if c.reclaim == "drain"))
    signals = aws.metrics.fetch([instance_id], fetched_signals(policy.idle), start, now)
    breaker = load_breaker(runtime).open
    return StopFacts(live, breaker, marks.get(instance_id), signals.get(instance_id, {})), stored


def _reclaimed_by(runtime: Runtime, instance_id: str, event_id: str) -> str | None:
    """ "stopped" / "terminated" when an earlier attempt of this request already did it (its outcome is recorded)."""
    for action, verb in (("stop", "stopped"), ("terminate", "terminated")):
        item = runtime.ledger.get_item(runner.ACTION_KIND, f"{instance_id}#{event_id}#{action}")
        if item and item.get("ok"):
            return verb
    return None


def _unverified_stop(event: StopRequestEvent, runtime: Runtime, why: str) -> dict[str, Any]:
    """Recorded and refused; nothing is read, changed or posted (the invocation's ``response_url`` is no Slack word)."""
    runtime.ledger.record(
        Decision(
            policy=POLICY,
            verdict="ignored",
            resource=event.detail.instance_id,
            reasons=[f"Stop now not done: {why}"],
            evidence={"status": "stop-now-unverified", "claimed_requested_by": event.detail.requested_by},
            severity="warning",
            rule="idle.stop-now-unverified",
        ),
        event_id=event.id,
    )
    metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
    logger.warning("Stop now request refused", extra={"event_id": event.id, "reason": why})
    return {"status": "refused", "event_id": event.id, "reason": why}


def process(parsed: GovernorEvent, runtime: Runtime, aws: Adapters, call: Invocation | None = None) -> dict[str, Any]:
    if isinstance(parsed, StopRequestEvent):
        return stop_now(parsed, runtime, aws, call.account if call is not None else None)
    return run_sweep(parsed, runtime, aws)


def handle(event: Any, runtime: Runtime, aws: Adapters | None = None, context: Any = None) -> dict[str, Any]:
    """Parse at the edge (bad input goes to the DLQ with its reason), then sweep (or Stop now) once per schedule
    execution id or click; ``context`` lets the idempotency record of a sweep that times out expire with it."""
    return HANDLER.handle(event, runtime, aws, context=context)


def _home_aws(event: Any, runtime: Runtime) -> Adapters:
    idle = runtime.policy.idle
    return _aws(runtime.region, idle.gpu_memory_unit, idle.metric_source, _home_clusters(idle.clusters))


def target_aws(event: dict[str, Any], runtime: Runtime) -> Adapters:
    """The sweep's adapters in a fan-out target's account and region (through the spoke role in a member account)."""
    from governor.adapters.aws import client, member_target

    unit = runtime.policy.idle.gpu_memory_unit
    source = runtime.policy.idle.metric_source
    member = member_target(event)
    if member is None:
        return _aws(runtime.region, unit, source, _home_clusters(runtime.policy.idle.clusters))
    account, region, event_id = member
    where: dict[str, Any] = {"account": account, "event_id": event_id}
    # A member's clusters are read and drained with the spoke role's credentials there (idle.clusters[].account).
    clusters = tuple(c for c in runtime.policy.idle.clusters if c.in_target(account, region))
    groups = AutoScalingGroups(region, client("autoscaling", region, **where))
    nodes = None
    if any(c.reclaim == "drain" for c in clusters):
        nodes = KubernetesNodes(
            region,
            groups,
            api=lambda cluster: _member_api(cluster, region, where),
        )
    return Adapters(
        Ec2Reader(region, **where),
        Ec2Actions(region, **where),
        metric_source(
            source,
            region,
            client("cloudwatch", region, **where),
            unit,
            clusters,
            credentials=lambda: client.credentials(account, region, event_id),
        ),
        SsmCommands(region, **where),
        groups,
        reservations=CapacityReservations(region, **where),
        nodes=nodes,
        hyperpod=HyperPodNodes(region, **where),
    )


def _member_api(cluster: str, region: str | None, where: dict[str, Any]) -> Any:
    """A member cluster's API: DescribeCluster and the EKS token (presigned STS) with the spoke role's credentials, so
    the cluster maps the spoke role through its access entry (created by that account's spoke stack)."""
    from governor.adapters.aws import client
    from governor.idle.kubernetes.api import eks_api

    return eks_api(cluster, region, eks=client("eks", region, **where), sts=client("sts", region, **where))


def _home_clusters(clusters: tuple[KubernetesCluster, ...]) -> tuple[KubernetesCluster, ...]:
    """The clusters the governor's own account and region sweep reads (those without ``account``)."""
    return tuple(c for c in clusters if c.in_target(None, None))


#: EventBridge Scheduler invokes this every ``idle.schedule`` (default 15 minutes); the interactions function invokes
#: it asynchronously for Stop now. In organisation mode the schedule plans one sweep per account and region and the
#: targets queue runs each (``governor.fanout``).
HANDLER: Handler[GovernorEvent, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=_home_aws,
    sweep=POLICY,
    targets=target_aws,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
)
lambda_handler = HANDLER.lambda_handler()
