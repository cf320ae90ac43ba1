"""The ``lifecycle`` function: creator tags on GPU launches, usage sessions on state changes, a daily reconciliation.

Three inputs: CloudTrail RunInstances events (tag and record the launch), EC2 state-change notifications (open or
close the usage session) and the scheduled sweep (repair what missed events left). Anything else goes to the DLQ.
In organisation mode the sweep runs once per account and region (``governor.fanout``), each over its own sessions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Field

from governor.adapters.aws import per_session
from governor.core_policy import FleetPolicy
from governor.domain.costs import OnDemandPrices, PriceBook
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import UNKNOWN, Instance
from governor.domain.ports import event_origin
from governor.domain.tagging import record_settings
from governor.domain.times import utc
from governor.events.envelopes import (
    CLOUDTRAIL_DETAIL_TYPE,
    CloudTrailEvent,
    EventBridgeEnvelope,
    InstanceStateDetail,
    InvalidEventError,
    parse_model,
)
from governor.lifecycle import domain
from governor.lifecycle.own_sessions import mark_stamped, stamp, target_open_sessions
from governor.observability import metrics
from governor.outbox import Outbox
from governor.runtime import Handler, Invocation, Runtime, default_runtime

if TYPE_CHECKING:
    from governor.fanout import FanoutConfig

SCHEDULED = "Scheduled Event"


class StateChangeEvent(EventBridgeEnvelope):
    """``EC2 Instance State-change Notification``: ``detail`` carries ``instance-id`` and ``state`` only."""

    detail: InstanceStateDetail  # AWS's field names only: a detail saying ``instance_id`` is parked, not guessed at


class ScheduledEvent(EventBridgeEnvelope):
    detail: dict[str, Any] = Field(default_factory=dict)


Parsed = CloudTrailEvent | StateChangeEvent | ScheduledEvent


class InstanceReader(Protocol):
    def instance(self, instance_id: str) -> Instance | None: ...

    def instances(self, instance_ids: list[str]) -> list[Instance]: ...

    def gpu_instances(self, fleet: FleetPolicy, states: Any = ("running",)) -> list[Instance]: ...


class Tagger(Protocol):
    def tag(self, resource_id: str, tags: dict[str, str]) -> None: ...


@dataclass
class Adapters:
    """The adapters this function needs besides the shared runtime; tests pass moto-backed or fake ones."""

    reader: InstanceReader
    tagger: Tagger
    prices: PriceBook
    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    #: Organisation mode: the hub's own account and region, where sessions recorded without a place belong; the
    #: reconcile then keeps to the sessions of its event's account and region. ``None`` in a single account.
    home: tuple[str, str] | None = None
    #: The region the reader and tagger work in (``None``: the runtime's).
    region: str | None = None


def parse(raw: Any) -> Parsed:
    """Dispatch on ``detail-type`` and validate; anything not handled here is an invalid event for this function."""
    if not isinstance(raw, dict):
        raise InvalidEventError(f"an event must be a JSON object, not {type(raw).__name__}")
    kind = raw.get("detail-type")
    event_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    if kind == CLOUDTRAIL_DETAIL_TYPE:
        event = parse_model(CloudTrailEvent, raw)
        if event.detail.event_name not in ("RunInstances", domain.TAGGING_CALL) or event.source != "aws.ec2":
            raise InvalidEventError(
                f"lifecycle handles RunInstances and CreateTags, not {event.detail.event_name}", event_id
            )
        return event
    if kind == domain.STATE_CHANGE:
        return parse_model(StateChangeEvent, raw)
    if kind == SCHEDULED:
        return parse_model(ScheduledEvent, raw)
    raise InvalidEventError(f"lifecycle does not handle detail-type {kind!r}", event_id)


def _publish(runtime: Runtime, decisions: list[Decision], event_id: str, account: str | None) -> None:
    findings = [
        Finding.from_decision(
            d,
            f"GPU instance {d.resource} has no team",
            owner=d.evidence.get("owner"),
            team=UNKNOWN,
            account=account,
            event_id=event_id,
            region=runtime.region,
        )
        for d in decisions
    ]
    _send(runtime, findings, event_id)


def _send(runtime: Runtime, findings: list[Finding], event_id: str) -> None:
    """Through the outbox: staged, published, marked sent once accepted; a retry of the event publishes the rest."""
    box = Outbox(runtime.ledger, runtime.sink, event_id=event_id)
    box.resume()
    box.add(findings)
    box.flush()


def _no_team_key(event_id: str) -> str:
    """The ledger keys a decision by resource, policy and event: the same event's session decision keeps its own."""
    return f"{event_id}#no-team"


def _placed(item: dict[str, Any]) -> dict[str, Any]:
    """The item with the account and region of the event being handled (the instance's: a state change comes from
    its account, a sweep target is one account and region), as the ledger stamps every decision."""
    return {**item, **event_origin()}


def _write_open(runtime: Runtime, session: dict[str, Any], home: tuple[str, str] | None) -> None:
    """The session and its open-session item; in organisation mode the latter stamped with its target (the
    ``by-target`` index), so that target's reconcile finds it in its own partition. A closed one is written without
    the stamp and leaves the sparse index: the partition holds the target's open sessions, not its history."""
    session = _placed(session)
    runtime.ledger.put_item(domain.SESSION, session["session_key"], session)
    runtime.ledger.put_item(domain.OPEN_SESSION, session["instance_id"], stamp({**session, "open": True}, home))


def _write_closed(runtime: Runtime, session: dict[str, Any]) -> None:
    session = _placed(session)
    runtime.ledger.put_item(domain.SESSION, session["session_key"], session)
    closed = {"instance_id": session["instance_id"], "open": False, "last_session": session["session_key"]}
    runtime.ledger.put_item(domain.OPEN_SESSION, session["instance_id"], _placed(closed))


def on_run_instances(event: CloudTrailEvent, runtime: Runtime, caps: Adapters) -> dict[str, Any]:
    """Record each GPU launch and its creator, then add the missing creator/launch tags (re-read first)."""
    record = event.detail
    policy = runtime.policy
    launched = {launch.instance_id: launch for launch in domain.launches(record)}
    gpu_ids = [i for i, launch in launched.items() if policy.fleet.is_gpu_type(launch.instance_type)]
    live: dict[str, Instance | None] = dict.fromkeys(gpu_ids)
    if gpu_ids:
        live.update({i.id: i for i in caps.reader.instances(gpu_ids)})
    decisions = domain.decide_launch(record, policy, live=live, event_id=event.id)
    tagged = 0
    for decision in decisions:
        runtime.ledger.record(decision, event_id=event.id, at=record.event_time)
        launch = launched.get(decision.resource)
        if decision.verdict != "act" or launch is None:
            continue
        runtime.ledger.put_item(domain.LAUNCH, launch.instance_id, _placed(domain.launch_item(launch, event.id)))
        _adopt_creator(runtime, launch, caps.home)
        for action in decision.enforced_actions():
            if action.type != "tag":
                continue
            current = caps.reader.instance(launch.instance_id)  # re-read right before acting
            if current is None:
                continue
            missing = domain.launch_tags(launch, current.tags, policy)
            if missing:
                caps.tagger.tag(launch.instance_id, missing)
                tagged += 1
    metrics.add_metric(name="GpuLaunchesRecorded", unit="Count", value=len(gpu_ids))
    settings = on_create_tags(event, runtime)  # exemptions and claims set at launch have an author too
    return {
        "status": "done",
        "decisions": [d.public() for d in decisions],
        "tagged": tagged,
        "tags": settings["tags"],
    }


def on_create_tags(event: CloudTrailEvent, runtime: Runtime) -> dict[str, Any]:
    """Record who set each exemption, snooze, command name, ownership tag or Kubernetes claim, and when (CloudTrail is
    the only witness); the same for the tags a RunInstances call set at launch.

    Reports list them by person; an exemption, or a value the governor will not honour, is also a finding at once.
    """
    settings = domain.tag_settings(event.detail, runtime.policy, event.id)
    published = record_settings(
        settings, runtime.ledger, lambda setting: domain.decide_tag_setting(setting, runtime.policy), event_id=event.id
    )
    findings = [
        Finding.from_decision(
            decision, title, account=event.account, region=event.region or runtime.region, event_id=event.id
        )
        for decision, title in published
    ]
    _send(runtime, findings, event.id)
    refused = sum(1 for s in settings if s.problem)
    return {"status": "done", "tags": [s.item() for s in settings], "refused": refused, "findings": len(findings)}


def _adopt_creator(runtime: Runtime, launch: domain.Launch, home: tuple[str, str] | None) -> None:
    """A session opened before the launch event arrived (events reorder) learns its creator as owner."""
    item = runtime.ledger.get_item(domain.OPEN_SESSION, launch.instance_id)
    if not item or not item.get("open") or item.get("ownership_source") != "unknown" or not launch.creator:
        return
    session = {k: v for k, v in item.items() if k not in ("pk", "sk", "kind", "expires_at", "open")}
    session.update(owner=launch.creator, ownership_source="creator", creator=launch.creator)
    _write_open(runtime, session, home)


def on_state_change(event: StateChangeEvent, runtime: Runtime, caps: Adapters) -> dict[str, Any]:
    """Open a session at ``running``, close it at stopping/stopped/shutting-down/terminated; never twice."""
    instance_id, state = event.detail.instance_id, event.detail.state
    at = utc(event.time)
    if state not in domain.CLOSING_STATES and state != domain.RUNNING:
        instance = None
    else:
        instance = caps.reader.instance(instance_id)
    plan = domain.decide_state_change(
        instance_id,
        state,
        at,
        instance=instance,
        open_item=runtime.ledger.get_item(domain.OPEN_SESSION, instance_id),
        launch=runtime.ledger.get_item(domain.LAUNCH, instance_id),
        policy=runtime.policy,
        prices=caps.prices,
        region=event.region or runtime.region,
    )
    runtime.ledger.record(plan.decision, event_id=event.id, at=at)
    if plan.opened is not None:
        _write_open(runtime, plan.opened, caps.home)
    if plan.closed is not None:
        _write_closed(runtime, plan.closed)
    if plan.no_team is not None:
        runtime.ledger.record(plan.no_team, event_id=_no_team_key(event.id), at=at)
        _publish(runtime, [plan.no_team], event.id, event.account)
    return {"status": "done", "decisions": [plan.decision.public()], "no_team": plan.no_team is not None}


def on_schedule(event: ScheduledEvent, runtime: Runtime, caps: Adapters) -> dict[str, Any]:
    """Daily: close sessions of instances no longer running, open sessions for running ones never seen starting.

    In organisation mode only the sessions of the event's account and region (a fan-out target's), so one target
    never closes another's sessions as "no longer running"; read from the target's own partition of the ledger
    (:mod:`governor.lifecycle.own_sessions`), not from every open session of the organisation."""
    now = caps.now()
    running = caps.reader.gpu_instances(runtime.policy.fleet, states=("running",))
    home = caps.home
    account = event.account or (home[0] if home else "")
    region = event.region or runtime.region or (home[1] if home else "")
    open_items, first = target_open_sessions(runtime, running, account, region, home)
    seen = {str(o.get("instance_id")) for o in open_items}
    launches: dict[str, dict[str, Any]] = {}
    for instance in running:
        if instance.id not in seen and (found := runtime.ledger.get_item(domain.LAUNCH, instance.id)):
            launches[instance.id] = found
    plan = domain.reconcile(running, open_items, launches, now, runtime.policy, caps.prices, runtime.region)
    for decision in plan.decisions:
        runtime.ledger.record(decision, event_id=event.id, at=now)
    for session in plan.closed:
        _write_closed(runtime, session)
    for session in plan.opened:
        _write_open(runtime, session, home)
    for session in plan.refreshed:
        _write_open(runtime, session, home)
    if first:
        mark_stamped(runtime, account, region)
    for decision in plan.no_team:
        runtime.ledger.record(decision, event_id=_no_team_key(event.id), at=now)
    _publish(runtime, plan.no_team, event.id, event.account)
    metrics.add_metric(name="SessionsReconciled", unit="Count", value=len(plan.opened) + len(plan.closed))
    return {
        "status": "done",
        "running": len(running),
        "opened": len(plan.opened),
        "closed": len(plan.closed),
        "no_team": len(plan.no_team),
    }


def route(parsed: Parsed, runtime: Runtime, caps: Adapters) -> dict[str, Any]:
    """The launch, state-change or reconciliation work for an event that passed the edge."""
    if isinstance(parsed, CloudTrailEvent):
        if parsed.detail.event_name == domain.TAGGING_CALL:
            return on_create_tags(parsed, runtime)
        return on_run_instances(parsed, runtime, caps)
    if isinstance(parsed, StateChangeEvent):
        return on_state_change(parsed, runtime, caps)
    return on_schedule(parsed, runtime, caps)


def handle(event: Any, runtime: Runtime, caps: Adapters, context: LambdaContext | None = None) -> dict[str, Any]:
    """Parse at the edge first (a malformed event goes to the DLQ every time it comes), then work exactly once."""
    return HANDLER.handle(event, runtime, caps, context=context)


@per_session
def default_capabilities() -> Adapters:
    """Built once per container: the EC2 reader and tagger, and the price book (Price List API when enabled)."""
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader

    runtime = default_runtime()
    price_list: OnDemandPrices | None = None
    if runtime.policy.pricing.use_price_list_api:
        from governor.lifecycle.pricing import PriceListPrices

        price_list = PriceListPrices()
    return Adapters(
        reader=Ec2Reader(runtime.region),
        tagger=Ec2Actions(runtime.region),
        prices=PriceBook(runtime.policy.pricing, region=runtime.region, price_list=price_list),
        region=runtime.region,
    )


def home_of(runtime: Runtime) -> tuple[str, str] | None:
    """Organisation mode: the hub's own account and region (``runtime`` is the hub's), where sessions recorded
    without a place belong; ``None`` in a single account (the reconcile then sees every open session, as before)."""
    config: FanoutConfig | None = runtime.extras.get("fanout")
    if config is not None:
        return config.home_account, runtime.region or ""
    from governor.adapters.aws import client

    organization = client.organization  # organisation mode without the fan-out (the demo plays its targets itself)
    if organization is not None and organization.home_account:
        return organization.home_account, runtime.region or ""
    return None


def capabilities_for(event: Any, runtime: Runtime | None = None, home: tuple[str, str] | None = None) -> Adapters:
    """The container's capabilities, or, for an event from a member account (organisation mode), the same ones
    reading and tagging through the spoke role in that account and region; for a fan-out target in the hub's own
    account but another region (``runtime.region``), the hub's role there."""
    from governor.adapters.aws import member_target
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader

    caps, member = default_capabilities(), member_target(event)
    if home is not None:
        caps = replace(caps, home=home)
    if member is None:
        region = runtime.region if runtime is not None else None
        if region is None or region == caps.region:
            return caps
        return replace(caps, reader=Ec2Reader(region), tagger=Ec2Actions(region), region=region)
    account, region, event_id = member
    region = region or (runtime.region if runtime is not None else None) or default_runtime().region
    where: dict[str, Any] = {"account": account, "event_id": event_id}
    return replace(caps, reader=Ec2Reader(region, **where), tagger=Ec2Actions(region, **where), region=region)


def process(parsed: Parsed, runtime: Runtime, caps: Adapters, call: Invocation | None = None) -> dict[str, Any]:
    """Side effects (tags, ledger items, findings) at most once per EventBridge event id."""
    return route(parsed, runtime, caps)


def adapters_for(event: Any, runtime: Runtime) -> Adapters:
    """An event's adapters (:func:`capabilities_for`), with the hub's own place in organisation mode."""
    return capabilities_for(event, runtime, home_of(default_runtime()))


#: Entry point: one event, one idempotent run keyed on the EventBridge event id. In organisation mode the schedule
#: plans one reconcile per account and region (``governor.fanout``), each reading EC2 there (spoke role).
HANDLER: Handler[Parsed, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=adapters_for,
    sweep=domain.POLICY,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
)
lambda_handler = HANDLER.lambda_handler()
