"""Who launched each GPU instance, and when it ran: creator tags, usage sessions and their reconciliation.

The lifecycle function tags each new GPU instance with the principal that launched it (from CloudTrail) and keeps
one usage session per running period in the ledger, so reports can state GPU-hours and dollars per team and owner.
Ownership follows the one order of :func:`governor.domain.fleet.ownership`: owner/team tags, else the creator,
else ``unknown``.

Ledger items written here (``Ledger.put_item``):

- ``launch`` / instance id: ``creator``, ``creator_type``, ``launched_at``, ``instance_type``, ``event_id``.
- ``session`` / ``<instance id>#<start>``: one running period (see :func:`open_session`).
- ``open-session`` / instance id: a copy of the open session (``open: true``), or ``open: false`` once closed.

Sessions and their open-session copies carry the ``account`` and ``region`` of the instance (the event's, or the
sweep target's, like every ledger decision); items written before they did belong to the hub's own account and region
(:func:`target_sessions`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.domain import gpus
from governor.domain.actions import AnyAction, Notify, Record, Tag
from governor.domain.costs import PriceBook
from governor.domain.decision import Decision, Verdict
from governor.domain.fleet import LAUNCH_KIND, Instance, Ownership, ownership
from governor.domain.identity import author
from governor.domain.identity import creator as creator
from governor.domain.tagging import TAG_SET as TAG_SET
from governor.domain.tagging import ResourceKind, TagSetting, decide_setting, settings_from, tag_pairs
from governor.domain.tagging import watched_tag_keys as watched_tag_keys
from governor.domain.times import parse_time, utc
from governor.events.envelopes import CloudTrailRecord
from governor.policy import Policy

POLICY = "lifecycle"
SESSION = "session"
OPEN_SESSION = "open-session"
LAUNCH = LAUNCH_KIND
STATE_CHANGE = "EC2 Instance State-change Notification"
RUNNING = "running"
CLOSING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
TAG_VALUE_LIMIT = 256
RESTART_TOLERANCE = dt.timedelta(minutes=5)


def tag_value(value: str) -> str:
    """EC2 tag values hold at most 256 characters; keep the end (the session name says most)."""
    return value if len(value) <= TAG_VALUE_LIMIT else value[-TAG_VALUE_LIMIT:]


@dataclass(frozen=True)
class Launch:
    """One instance started by a RunInstances call, as CloudTrail's response describes it."""

    instance_id: str
    instance_type: str
    zone: str | None
    lifecycle: str
    launched_at: dt.datetime
    tags: dict[str, str]
    creator: str | None
    creator_type: str | None


def _items(container: Any) -> list[Any]:
    if isinstance(container, Mapping):
        found = container.get("items") or container.get("item") or []
        return list(found) if isinstance(found, list) else []
    return []


def _launch_time(value: Any, fallback: dt.datetime) -> dt.datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value / 1000 if value > 1e11 else value, dt.UTC)
    return parse_time(value) or fallback


def launches(record: CloudTrailRecord) -> list[Launch]:
    """The instances a successful RunInstances call started (none for a failed call)."""
    if record.failed:
        return []
    request = record.request_parameters or {}
    spot_requested = ((request.get("instanceMarketOptions") or {}).get("marketType")) == "spot"
    who = creator(record.user_identity)
    found = []
    for item in _items((record.response_elements or {}).get("instancesSet")):
        if not isinstance(item, Mapping) or not item.get("instanceId"):
            continue
        tags = {
            str(t.get("key")): str(t.get("value", "")) for t in _items(item.get("tagSet")) if isinstance(t, Mapping)
        }
        found.append(
            Launch(
                instance_id=str(item["instanceId"]),
                instance_type=str(item.get("instanceType") or request.get("instanceType") or ""),
                zone=(item.get("placement") or {}).get("availabilityZone"),
                lifecycle="spot" if item.get("instanceLifecycle") == "spot" or spot_requested else "on-demand",
                launched_at=_launch_time(item.get("launchTime"), record.event_time),
                tags=tags,
                creator=who,
                creator_type=record.user_identity.type,
            )
        )
    return found


def _requested_type(record: CloudTrailRecord) -> str:
    request = record.request_parameters or {}
    return str(request.get("instanceType") or "")


def launch_tags(launch: Launch, current: Mapping[str, str], policy: Policy) -> dict[str, str]:
    """The creator and launch-time tags still missing; a tag already on the instance is never overwritten."""
    wanted = {policy.lifecycle.launched_at_tag: launch.launched_at.isoformat().replace("+00:00", "Z")}
    if launch.creator:
        wanted[policy.lifecycle.creator_tag] = tag_value(launch.creator)
    return {key: value for key, value in wanted.items() if key not in current}


def decide_launch(
    record: CloudTrailRecord,
    policy: Policy,
    *,
    live: Mapping[str, Instance | None] | None = None,
    event_id: str | None = None,
) -> list[Decision]:
    """One decision per launched instance: tag and record GPU launches; ignore failed calls and other types.

    ``live`` holds the instances as re-read just now (the handler's, or ``explain``'s assumed ones); without it the
    tags in the event stand in for the current tags.
    """
    event_ref = event_id or record.event_id or "RunInstances"
    if record.failed:
        return [
            Decision(
                policy=POLICY,
                verdict="ignored",
                resource=event_ref,
                reasons=[
                    f"RunInstances failed ({record.error_code}): nothing was launched, so there is nothing to tag "
                    "and no usage session"
                ],
                evidence={"error_code": record.error_code, "instance_type": _requested_type(record)},
                rule="lifecycle.launch",
            )
        ]
    found = launches(record)
    if not found:
        return [
            Decision(
                policy=POLICY,
                verdict="ignored",
                resource=event_ref,
                reasons=["the call's response names no instance"],
                rule="lifecycle.launch",
            )
        ]
    return [_decide_one_launch(launch, policy, live, event_ref) for launch in found]


def _decide_one_launch(
    launch: Launch, policy: Policy, live: Mapping[str, Instance | None] | None, event_ref: str
) -> Decision:
    evidence: dict[str, Any] = {
        "instance_type": launch.instance_type,
        "creator": launch.creator,
        "creator_type": launch.creator_type,
        "launched_at": launch.launched_at.isoformat(),
        "zone": launch.zone,
        "lifecycle": launch.lifecycle,
        "event_id": event_ref,
    }
    if not policy.fleet.is_gpu_type(launch.instance_type):
        return Decision(
            policy=POLICY,
            verdict="ignored",
            resource=launch.instance_id,
            reasons=[
                f"{launch.instance_type or 'unknown type'} is not in the GPU families {policy.fleet.gpu_families}"
            ],
            evidence=evidence,
            rule="lifecycle.launch",
        )
    instance = live.get(launch.instance_id) if live is not None else None
    current: Mapping[str, str] = instance.tags if instance is not None else launch.tags
    gone = live is not None and (instance is None or instance.state in ("shutting-down", "terminated"))
    who = launch.creator or "an unknown principal"
    reasons = [f"{launch.instance_type} ({gpus.label(launch.instance_type)}) launched by {who}"]
    actions: list[AnyAction] = []
    missing = {} if gone else launch_tags(launch, current, policy)
    if gone:
        reasons.append("the instance is already gone; nothing to tag")
    elif missing:
        actions.append(Tag(enforced=policy.lifecycle.enforce, tags=missing))
        if not policy.lifecycle.enforce:
            reasons.append("lifecycle.enforce is false: tags are reported, not written")
    else:
        reasons.append("creator and launch-time tags are already set; they are left as they are")
    kept = sorted(k for k in (policy.lifecycle.creator_tag, policy.lifecycle.launched_at_tag) if k in current)
    if kept and missing:
        reasons.append(f"existing tags kept: {', '.join(kept)}")
    actions.append(Record(enforced=True, item=LAUNCH, creator=launch.creator))
    reasons.append("the launch and its creator are recorded in the ledger; the usage session opens when it runs")
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=launch.instance_id,
        actions=actions,
        reasons=reasons,
        evidence=evidence,
        rule="lifecycle.launch",
    )


def launch_item(launch: Launch, event_id: str) -> dict[str, Any]:
    """The ``launch`` ledger item: the creator survives even when tagging is report-only."""
    return {
        "instance_id": launch.instance_id,
        "instance_type": launch.instance_type,
        "creator": launch.creator,
        "creator_type": launch.creator_type,
        "launched_at": launch.launched_at.isoformat(),
        "event_id": event_id,
    }


def owner_of(instance: Instance, policy: Policy, launch: Mapping[str, Any] | None = None) -> Ownership:
    """The one ownership order, with the creator taken from the tag or, if untagged, from the recorded launch."""
    tags = dict(instance.tags)
    creator_tag = policy.lifecycle.creator_tag
    if not tags.get(creator_tag, "").strip() and launch and launch.get("creator"):
        tags[creator_tag] = str(launch["creator"])
    return ownership(tags, policy.fleet, creator_tag=creator_tag)


def session_key(instance_id: str, start: dt.datetime) -> str:
    return f"{instance_id}#{start.astimezone(dt.UTC).isoformat()}"


def open_session(
    instance: Instance,
    start: dt.datetime,
    policy: Policy,
    prices: PriceBook,
    *,
    launch: Mapping[str, Any] | None = None,
    opened_by: str,
    region: str | None = None,
) -> dict[str, Any]:
    """A usage session item: who owns the instance, what it is, and its hourly price as known at start."""
    who = owner_of(instance, policy, launch)
    price = prices.price(instance.type, instance.lifecycle)
    return {
        "session_key": session_key(instance.id, start),
        "instance_id": instance.id,
        "instance_type": instance.type,
        "gpus": price.gpus,
        "lifecycle": instance.lifecycle,
        "zone": instance.zone,
        "region": region,
        "team": who.team,
        "owner": who.owner,
        "ownership_source": who.source,
        "creator": (launch or {}).get("creator") or instance.tags.get(policy.lifecycle.creator_tag),
        "start": start.astimezone(dt.UTC).isoformat(),
        "end": None,
        "opened_by": opened_by,
        "closed_by": None,
        "end_estimated": False,
        "price_per_hour": price.per_hour,
        "on_demand_per_hour": price.on_demand,
        "price_basis": price.basis,
        "prices_as_of": price.as_of,
        "at": start.astimezone(dt.UTC).isoformat(),
    }


def close_session(
    session: Mapping[str, Any], end: dt.datetime, *, closed_by: str, estimated: bool = False
) -> dict[str, Any]:
    """The session with its end; an end earlier than the start (clock skew, reordered events) becomes the start."""
    start = parse_time(session.get("start")) or end
    finish = max(end, start)
    closed = {k: v for k, v in session.items() if k not in ("open", "pk", "sk", "kind", "expires_at")}
    closed.update(
        end=finish.astimezone(dt.UTC).isoformat(),
        closed_by=closed_by,
        end_estimated=estimated,
        at=finish.astimezone(dt.UTC).isoformat(),
    )
    return closed


def no_team_decision(instance: Instance, who: Ownership, policy: Policy, rule_source: str) -> Decision:
    """An instance whose team cannot be resolved is itself a finding: its costs and warnings have nowhere to go."""
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance.id,
        actions=[Notify(enforced=True, rule="lifecycle.no-team")],
        reasons=[
            f"no '{policy.fleet.team_tag}' tag: GPU-hours and findings for this {instance.type} cannot be "
            f"attributed to a team (owner: {who.owner}, from {who.source})"
        ],
        evidence={"instance_type": instance.type, "owner": who.owner, "seen_by": rule_source},
        severity="warning",
        rule="lifecycle.no-team",
    )


@dataclass
class SessionPlan:
    """What one state change means for the ledger: the decision, and the session items to write."""

    decision: Decision
    opened: dict[str, Any] | None = None
    closed: dict[str, Any] | None = None
    no_team: Decision | None = None


def decide_state_change(
    instance_id: str,
    state: str,
    at: dt.datetime,
    *,
    instance: Instance | None,
    open_item: Mapping[str, Any] | None,
    launch: Mapping[str, Any] | None,
    policy: Policy,
    prices: PriceBook,
    region: str | None = None,
) -> SessionPlan:
    """Open a session when a GPU instance starts running; close the open one when it stops or terminates."""
    is_open = bool(open_item and open_item.get("open"))
    evidence: dict[str, Any] = {"state": state, "at": at.isoformat()}
    if instance is not None:
        evidence["instance_type"] = instance.type
    known_gpu = instance is not None and policy.fleet.is_gpu_type(instance.type)

    def decision(verdict: Verdict, reasons: list[str], actions: Iterable[AnyAction] = ()) -> Decision:
        return Decision(
            policy=POLICY,
            verdict=verdict,
            resource=instance_id,
            actions=list(actions),
            reasons=reasons,
            evidence=evidence,
            rule="lifecycle.session",
        )

    if state in CLOSING_STATES:
        if not is_open:
            if not known_gpu:
                return SessionPlan(decision("ignored", [_not_gpu(instance, policy)]))
            return SessionPlan(decision("ok", [f"{state}: no usage session is open for it; nothing to close"]))
        assert open_item is not None
        closed = close_session(open_item, at, closed_by=f"state-change:{state}")
        return SessionPlan(
            decision(
                "act",
                [f"{state}: the usage session opened at {open_item.get('start')} ends now"],
                [Record(enforced=True, item=SESSION, session="close")],
            ),
            closed=closed,
        )
    if state != RUNNING:
        return SessionPlan(decision("ignored", [f"{state}: sessions open at 'running' and close when it stops"]))
    if instance is None or not known_gpu:
        return SessionPlan(decision("ignored", [_not_gpu(instance, policy)]))
    if is_open:
        assert open_item is not None
        return SessionPlan(decision("ok", [f"a usage session is already open since {open_item.get('start')}"]))
    opened = open_session(instance, at, policy, prices, launch=launch, opened_by="state-change", region=region)
    plan = SessionPlan(
        decision(
            "act",
            [f"running: a usage session opens for {instance.type} ({opened['owner']}, team {opened['team']})"],
            [Record(enforced=True, item=SESSION, session="open")],
        ),
        opened=opened,
    )
    who = owner_of(instance, policy, launch)
    if not who.resolved:
        plan.no_team = no_team_decision(instance, who, policy, "session")
    return plan


def _not_gpu(instance: Instance | None, policy: Policy) -> str:
    if instance is None:
        return "the instance no longer exists and no session is open for it"
    return f"{instance.type} is not in the GPU families {policy.fleet.gpu_families}"


def placed_in(item: Mapping[str, Any], home: tuple[str, str]) -> tuple[str, str]:
    """``(account, region)`` an open session belongs to; one recorded without them is the hub's (``home``)."""
    account, region = item.get("account"), item.get("region")
    return (
        account if isinstance(account, str) and account else home[0],
        region if isinstance(region, str) and region else home[1],
    )


def target_sessions(
    open_items: Iterable[Mapping[str, Any]],
    running_ids: Iterable[str],
    account: str,
    region: str,
    home: tuple[str, str],
) -> list[Mapping[str, Any]]:
    """The open sessions one account and region's reconcile may close or refresh (organisation fan-out).

    Those recorded there (without a place: the hub's, ``home``), and those of instances running there, whatever
    they say (instance ids are unique, so the instance's place wins). Any other is another target's: its instance
    is not visible from here, and closing it as "no longer running" would be wrong.
    """
    running = set(running_ids)
    return [
        item
        for item in open_items
        if str(item.get("instance_id")) in running or placed_in(item, home) == (account, region)
    ]


@dataclass
class ReconcilePlan:
    """The daily sweep's corrections: sessions to close, to open and to refresh, and unowned instances."""

    decisions: list[Decision] = field(default_factory=list)
    opened: list[dict[str, Any]] = field(default_factory=list)
    closed: list[dict[str, Any]] = field(default_factory=list)
    refreshed: list[dict[str, Any]] = field(default_factory=list)
    no_team: list[Decision] = field(default_factory=list)


def reconcile(
    running: Iterable[Instance],
    open_items: Iterable[Mapping[str, Any]],
    launches_by_id: Mapping[str, Mapping[str, Any]],
    now: dt.datetime,
    policy: Policy,
    prices: PriceBook,
    region: str | None = None,
) -> ReconcilePlan:
    """Close sessions whose instance is no longer running, open sessions for running instances never seen starting.

    A missed stop is closed at ``now`` (an upper bound, at most one sweep late); a missed stop-and-start is closed
    at the new launch time and a new session opened from it. Still-open sessions are refreshed (``at`` = now) so
    period queries on the ledger's ``at`` index find them.
    """
    plan = ReconcilePlan()
    alive = {i.id: i for i in running if policy.fleet.is_gpu_type(i.type)}
    open_by_id = {str(o["instance_id"]): o for o in open_items if o.get("open") and o.get("instance_id")}
    for instance_id, item in sorted(open_by_id.items()):
        instance = alive.get(instance_id)
        started = parse_time(item.get("start")) or now
        if instance is None:
            plan.closed.append(close_session(item, now, closed_by="reconcile", estimated=True))
            plan.decisions.append(
                _reconcile_decision(
                    instance_id,
                    f"the instance is no longer running, but its session since {item.get('start')} was never closed; "
                    "closed now (the stop event was missed)",
                    "close",
                )
            )
        elif instance.launch_time > started + RESTART_TOLERANCE:
            plan.closed.append(close_session(item, instance.launch_time, closed_by="reconcile", estimated=True))
            known = launches_by_id.get(instance_id) or ({"creator": item["creator"]} if item.get("creator") else None)
            plan.opened.append(
                open_session(
                    instance,
                    instance.launch_time,
                    policy,
                    prices,
                    launch=known,
                    opened_by="reconcile",
                    region=region,
                )
            )
            plan.decisions.append(
                _reconcile_decision(
                    instance_id,
                    f"restarted at {instance.launch_time.isoformat()} without a stop event: the old session is "
                    "closed at that time and a new one opened",
                    "close+open",
                )
            )
        else:
            plan.refreshed.append({**_plain(item), "at": now.isoformat()})
    for instance_id, instance in sorted(alive.items()):
        if instance_id not in open_by_id:
            plan.opened.append(
                open_session(
                    instance,
                    instance.launch_time,
                    policy,
                    prices,
                    launch=launches_by_id.get(instance_id),
                    opened_by="reconcile",
                    region=region,
                )
            )
            plan.decisions.append(
                _reconcile_decision(
                    instance_id,
                    f"running since {instance.launch_time.isoformat()} but the governor never saw it start; "
                    "a session opens from its launch time",
                    "open",
                )
            )
        who = owner_of(instance, policy, launches_by_id.get(instance_id))
        if not who.resolved:
            plan.no_team.append(no_team_decision(instance, who, policy, "reconcile"))
    return plan


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("pk", "sk", "kind", "expires_at")}


def _reconcile_decision(instance_id: str, reason: str, session: str) -> Decision:
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance_id,
        actions=[Record(enforced=True, item=SESSION, session=session)],
        reasons=[reason],
        rule="lifecycle.reconcile",
    )


# --- who set a governor tag ------------------------------------------------------------------------------------------

TAGGING_CALL = "CreateTags"
TAG_RULE = "lifecycle.governor-tag"
_EC2_KINDS: dict[str, ResourceKind] = {"i-": "instance", "sg-": "security-group"}


def tag_settings(record: CloudTrailRecord, policy: Policy, event_id: str) -> list[TagSetting]:
    """The watched tags a successful ``CreateTags`` call set on instances and security groups, or a ``RunInstances``
    call set at launch (tag specifications), each with the caller and the time.

    A value the governor would not honour (unbounded snooze, exempt value other than ``true`` or a date, a checkpoint
    name outside the allow-list) carries the reason, so the finding and the report say so.
    """
    if record.failed or record.event_name not in (TAGGING_CALL, "RunInstances"):
        return []
    who = author(record.user_identity)
    at = utc(record.event_time)
    if record.event_name == "RunInstances":
        found: list[TagSetting] = []
        for launch in launches(record):
            found += settings_from(
                launch.tags.items(),
                [(launch.instance_id, "instance")],
                policy,
                author=who,
                at=at,
                event_id=event_id,
                source="RunInstances",
                origin=launch_origin(record, launch.tags),
            )
        return found
    params = record.request_parameters or {}
    resources: list[tuple[str, ResourceKind]] = []
    for item in (params.get("resourcesSet") or {}).get("items") or []:
        resource = str(item.get("resourceId", "")) if isinstance(item, Mapping) else ""
        kind = next((k for prefix, k in _EC2_KINDS.items() if resource.startswith(prefix)), None)
        if kind is not None:
            resources.append((resource, kind))
    pairs = tag_pairs(params.get("tagSet"))
    return settings_from(pairs, resources, policy, author=who, at=at, event_id=event_id, source="CreateTags")


def launch_origin(record: CloudTrailRecord, tags: Mapping[str, str]) -> str | None:
    """Where a launch's tags came from when no person wrote them in the call: the Auto Scaling group (AWS's own
    ``aws:autoscaling:groupName`` tag) and the launch template the service launched from, for the finding."""
    template = (record.request_parameters or {}).get("launchTemplate")
    parts = []
    if tags.get("aws:autoscaling:groupName"):
        parts.append(f"Auto Scaling group {tags['aws:autoscaling:groupName']}")
    if isinstance(template, Mapping) and (template.get("launchTemplateId") or template.get("launchTemplateName")):
        name = template.get("launchTemplateId") or template.get("launchTemplateName")
        parts.append(f"launch template {name} version {template.get('version', '$Default')}")
    return ", ".join(parts) or None


def decide_tag_setting(setting: TagSetting, policy: Policy) -> Decision:
    """Every watched tag setting is recorded; an exemption, or a value the governor will not honour, is also a
    finding for people (:func:`governor.domain.tagging.decide_setting`)."""
    return decide_setting(setting, policy, policy_name=POLICY, rule=TAG_RULE)
