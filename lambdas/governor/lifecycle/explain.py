"""``governor explain`` for lifecycle: the handler's decisions (``decide_launch``, ``decide_state_change``,
``decide_tag_setting``) on the state explain assumes instead of reading it from EC2 and the ledger. Not runtime code:
the code asset leaves every ``explain`` module out (``infra/asset.py``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.domain.costs import PriceBook
from governor.domain.decision import Decision
from governor.domain.explain import Assumed, cloudtrail_call, detail_type, explainer
from governor.domain.fleet import Instance
from governor.domain.times import utc
from governor.events.envelopes import CloudTrailRecord, InboundEvent, InstanceStateDetail, parse_model
from governor.lifecycle import domain
from governor.lifecycle.domain import CLOSING_STATES, POLICY, RUNNING, STATE_CHANGE, TAGGING_CALL, launches
from governor.policy import Policy

_LIVE = "explain reads nothing from AWS nor the ledger"


def assumed_launches(record: CloudTrailRecord, policy: Policy) -> Assumed[dict[str, Instance | None]]:
    """The launched GPU instances as the handler would re-read them: running, with the tags the request set."""
    live: dict[str, Instance | None] = {
        launch.instance_id: Instance(
            id=launch.instance_id,
            type=launch.instance_type,
            state="pending",
            launch_time=launch.launched_at,
            tags=dict(launch.tags),
            lifecycle="spot" if launch.lifecycle == "spot" else "on-demand",
            zone=launch.zone,
        )
        for launch in ([] if record.failed else launches(record))
        if policy.fleet.is_gpu_type(launch.instance_type)
    }
    said = (
        "each launched GPU instance still exists with only the tags the request set (the handler re-reads its tags "
        f"before tagging; a tag already set is never overwritten; {_LIVE})"
    )
    return Assumed(live, (said,) if live else ())


@explainer(POLICY, cloudtrail_call("aws.ec2", "RunInstances"), decides=(domain.decide_launch,))
def explain_run_instances(event: InboundEvent, policy: Policy) -> list[Decision]:
    """``tag`` + ``record`` for a successful GPU launch; ``ignored`` for a failed call or a non-GPU type."""
    assert event.cloudtrail is not None
    assumed = assumed_launches(event.cloudtrail, policy)
    decisions = domain.decide_launch(event.cloudtrail, policy, live=assumed.state, event_id=event.id)
    return [assumed.on(d) if d.resource in assumed.state else d for d in decisions]


@dataclass(frozen=True)
class AssumedSession:
    """What ``decide_state_change`` reads at run time: the instance (EC2) and its open session (ledger)."""

    instance: Instance | None
    open_item: Mapping[str, Any] | None


def assumed_session(instance_id: str, state: str, at: dt.datetime, policy: Policy) -> Assumed[AssumedSession]:
    """A GPU instance of the fleet with owner and team tags, and an open session exactly when it stops."""
    if state != RUNNING and state not in CLOSING_STATES:
        return Assumed(AssumedSession(None, None), ())  # the handler reads nothing either
    fleet = policy.fleet
    family = fleet.gpu_families[0] if fleet.gpu_families else "g"
    instance = Instance(
        id=instance_id,
        type=f"{family}-family GPU instance",
        state=state,
        launch_time=at,
        tags={fleet.owner_tag: "(owner tag)", fleet.team_tag: "(team tag)"},
    )
    assumptions = [f"{instance_id} is a GPU instance of the fleet (its type is read at run time; others are ignored)"]
    if state == RUNNING:
        assumptions.append("no usage session is open for it yet (else nothing changes)")
        assumptions.append(
            f"it carries '{fleet.owner_tag}' and '{fleet.team_tag}' tags (read at run time; without a team tag a "
            "lifecycle.no-team finding is sent too)"
        )
        return Assumed(AssumedSession(instance, None), tuple(assumptions))
    assumptions.append("a usage session is open for it (else nothing changes)")
    start = "(its start, read from the ledger)"
    session = {"session_key": f"{instance_id}#{start}", "instance_id": instance_id, "open": True, "start": start}
    return Assumed(AssumedSession(instance, session), tuple(assumptions))


@explainer(POLICY, detail_type("aws.ec2", STATE_CHANGE), decides=(domain.decide_state_change,))
def explain_state_change(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Running opens a usage session, stopping/stopped/terminated closes it; the type is read at run time."""
    detail = parse_model(InstanceStateDetail, event.detail)  # never a decision about instance "unknown"
    at = utc(event.time or dt.datetime.now(dt.UTC))
    assumed = assumed_session(detail.instance_id, detail.state, at, policy)
    plan = domain.decide_state_change(
        detail.instance_id,
        detail.state,
        at,
        instance=assumed.state.instance,
        open_item=assumed.state.open_item,
        launch=None,
        policy=policy,
        prices=PriceBook(policy.pricing),
    )
    return [assumed.on(d) for d in (plan.decision, plan.no_team) if d is not None]


@explainer(POLICY, cloudtrail_call("aws.ec2", TAGGING_CALL), decides=(domain.tag_settings, domain.decide_tag_setting))
def explain_tag_settings(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Who set an exemption, snooze, checkpoint name or idle mark: read from the call alone, by the handler too."""
    assert event.cloudtrail is not None
    return [
        domain.decide_tag_setting(setting, policy)
        for setting in domain.tag_settings(event.cloudtrail, policy, event.id)
    ]
