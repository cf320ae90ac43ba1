"""Stop now's decision: pure, on what the handler re-read for one verified click.

The interactions function records a verified, authorised click; the idle function re-reads the instance, its
breaker, its mark and its metrics, and :func:`decide_stop_now` says what to do: refuse (and why), checkpoint first, or
reclaim as a sweep would. The handler records the decision, settles it (one more re-read, then act) and answers Slack.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from governor.domain.actions import Checkpoint, Tag
from governor.domain.decision import Decision
from governor.domain.fleet import Instance
from governor.events.stop_request import LIFETIME, Checked
from governor.idle.actions import reclaim
from governor.idle.assessment import assess_for_sweep
from governor.idle.decide import InstanceOutcome
from governor.idle.domain import (
    CHECKPOINT_DONE,
    IDLE_ACTION_TAG,
    IDLE_SINCE_TAG,
    POLICY,
    Assessment,
    Mark,
    current_mark,
)
from governor.idle.purchase import (
    auto_scaling_group,
    checkpoint_command,
    draining_cluster,
    reclaim_action,
    report_only_reason,
)
from governor.policy import Policy

#: A Stop now click older than this (an async retry held back, a DLQ replay) stops nothing: its record's lifetime.
STOP_REQUEST_MAX_AGE = LIFETIME


@dataclass(frozen=True)
class VerifiedStop:
    """Stop now as the interactions function recorded it after verifying Slack's signature and authorising the click."""

    instance_id: str
    requested_by: str | None
    slack_user: str
    response_url: str
    token: str
    #: When the click was made (Slack's signed timestamp, from its record): its age is judged from this, never from
    #: the invocation's ``time``.
    clicked_at: dt.datetime | None = None
    record: Checked | None = None  # the record as checked (marked used once the click is answered)

    @property
    def who(self) -> str:
        return f"{self.requested_by or 'unknown person'} (Slack {self.slack_user})"

    @property
    def asked(self) -> dict[str, Any]:
        return {"requested_by": self.requested_by, "slack_user": self.slack_user, "token": self.token}


@dataclass(frozen=True)
class StopFacts:
    """What the handler read for the click, at ``now``: the instance re-read (``None`` when gone; when running,
    bounded by the exemption rules and carrying its reservation and HyperPod facts), the breaker, the ledger's mark
    (its checkpoint status asked of SSM afresh) and the instance's metrics over the sweep's lookback."""

    live: Instance | None
    breaker_open: bool = False
    mark: Mark | None = None
    signals: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class StopNow:
    """The decision for one click: ``outcome`` to settle (``None`` when refused, with ``refusal`` the reason).

    ``decision`` is what the ledger records either way; ``assessment`` is the fresh metrics' verdict the settle
    re-checks; ``mark`` the current idle spell's mark the click acts on."""

    kind: Literal["refused", "checkpoint", "acted"]
    decision: Decision
    outcome: InstanceOutcome | None = None
    assessment: Assessment | None = None
    refusal: str | None = None
    mark: Mark | None = None
    verb: str = ""


def too_old(clicked_at: dt.datetime, now: dt.datetime) -> bool:
    """Whether a click arrived more than :data:`STOP_REQUEST_MAX_AGE` after it was made (a retry, a replay)."""
    return now - clicked_at > STOP_REQUEST_MAX_AGE


def refused(request: VerifiedStop, why: str) -> StopNow:
    decision = Decision(
        policy=POLICY,
        verdict="ok",
        resource=request.instance_id,
        reasons=[f"Stop now from {request.who} not done: {why}"],
        evidence={"status": "stop-now-refused", **request.asked},
        rule="idle.stop-now-refused",
    )
    return StopNow("refused", decision, refusal=why)


def _not_now(request: VerifiedStop, facts: StopFacts | None, policy: Policy) -> str | None:
    """Why the re-read instance cannot be stopped now, whatever its metrics: gone or stopped (or not read), outside the
    GPU fleet, held by the circuit breaker, or its capacity reported only (a block, a reservation, a cluster's node)."""
    live = facts.live if facts is not None else None
    if facts is None or live is None or live.state != "running":
        return f"{request.instance_id} is {live.state if live else 'gone'} now"
    if not (policy.fleet.is_gpu_type(live.type) and policy.fleet.carries_fleet_tags(live.tags)):
        return f"{request.instance_id} is not a GPU fleet instance"
    if facts.breaker_open:
        return "the idle circuit breaker is open (many instances turned idle together); nothing is reclaimed"
    return report_only_reason(live, policy.idle)


def decide_stop_now(
    request: VerifiedStop, clicked_at: dt.datetime, facts: StopFacts | None, policy: Policy, now: dt.datetime
) -> StopNow:
    """Stop now's decision: refuse unless the instance is still running, in the GPU fleet, not held by the circuit
    breaker or its capacity's owner, warned about in its current idle spell, idle now by the same test that warned
    about it, and its checkpoint (when the policy has one) has finished; else checkpoint first when none was sent, or
    reclaim it as the sweep would (through its Auto Scaling group or cluster). Enforced only when ``idle.enforce`` is.

    ``facts`` is ``None`` when the handler read nothing (a click too old to act on).
    """
    if too_old(clicked_at, now):
        return refused(request, f"the request arrived more than {STOP_REQUEST_MAX_AGE} after the click")
    why = _not_now(request, facts, policy)
    if why:
        return refused(request, why)
    assert facts is not None and facts.live is not None  # running, as checked
    live = facts.live
    mark = current_mark(live, facts.mark)
    # The sweep's own precondition: an action follows a warning of the current idle spell that people received. A
    # button from an older warning (the instance was busy since, or restarted) stops nothing.
    if mark is None or mark.warned_at is None:
        return refused(
            request, "no warning of its current idle spell was sent (it was busy or restarted since the message)"
        )
    assessment, _ = assess_for_sweep(live, facts.signals or {}, policy, now)
    if assessment.status != "idle":
        return refused(request, f"it is {assessment.status} now: {'; '.join(assessment.reasons)}")
    command = checkpoint_command(live, policy)
    if command and mark.checkpoint_sent_at is not None and mark.checkpoint_status not in CHECKPOINT_DONE:
        return refused(
            request, f"its checkpoint is {mark.checkpoint_status or 'Pending'}; click Stop now again once done"
        )
    if command and mark.checkpoint_sent_at is None:
        return _checkpoint_first(request, live, mark, assessment, command, policy, now)
    return _reclaim_now(request, live, mark, assessment, policy, now)


def _checkpoint_first(
    request: VerifiedStop,
    live: Instance,
    mark: Mark,
    assessment: Assessment,
    command: str,
    policy: Policy,
    now: dt.datetime,
) -> StopNow:
    """The policy checkpoints first: send it, and stop on a later click once it has finished."""
    idle = policy.idle
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=request.instance_id,
        actions=[Checkpoint(enforced=idle.enforce, command=command, timeout=idle.checkpoint_timeout_seconds)],
        reasons=[*assessment.reasons, f"Stop now from {request.who}: checkpoint first, stop once it has finished"],
        evidence={**assessment.evidence, "status": "checkpoint", **request.asked},
        rule="idle.stop-now-checkpoint",
    )
    outcome = InstanceOutcome(live, "checkpoint", decision, replace(mark, checkpoint_sent_at=now), prior=mark)
    return StopNow("checkpoint", decision, outcome, assessment, mark=mark)


def _reclaim_now(
    request: VerifiedStop, live: Instance, mark: Mark, assessment: Assessment, policy: Policy, now: dt.datetime
) -> StopNow:
    """Reclaim it now, as the sweep would (through its Auto Scaling group or its cluster, never around its owner)."""
    idle = policy.idle
    action = reclaim_action(live, idle)
    group = auto_scaling_group(live)
    cluster = draining_cluster(live, idle)
    through: dict[str, Any] = {"via": "autoscaling", "group": group, "decrement_desired": True} if group else {}
    if cluster:  # an EKS node is reclaimed through its cluster, as the sweep does (never around its owner)
        through = {"via": "kubernetes", "group": cluster, "decrement_desired": True}
    remove = [IDLE_SINCE_TAG] if IDLE_SINCE_TAG in live.tags else []
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=request.instance_id,
        actions=[
            reclaim(
                action,
                enforced=idle.enforce,
                lifecycle=live.lifecycle,
                root_device=live.root_device_type,
                requested_by=request.requested_by,
                **through,
            ),
            Tag(enforced=idle.enforce, tags={IDLE_ACTION_TAG: f"{action}@{now.isoformat()}"}, remove=remove),
        ],
        reasons=[
            *assessment.reasons,
            f"Stop now clicked by {request.who}: acted at once instead of waiting for the sweep",
        ],
        evidence={**assessment.evidence, "status": "acted", **request.asked},
        severity="warning",
        rule="idle.stop-now",
    )
    verb = {"stop": "stopped", "terminate": "terminated"}[action]
    who = request.requested_by or request.who
    title = f"Idle GPU instance {request.instance_id} ({live.type}) {verb} on request of {who}"
    outcome = InstanceOutcome(live, "acted", decision, None, title, prior=mark)
    return StopNow("acted", decision, outcome, assessment, mark=mark, verb=verb)
