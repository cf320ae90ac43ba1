"""Mark, then act: the idle decision about one instance in one sweep, from its assessment and its mark."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from governor.domain.actions import AnyAction, Checkpoint, Notify, Tag, Untag, Warn, reclaim
from governor.domain.capacity import purchase_model
from governor.domain.decision import Decision, Severity, Verdict
from governor.domain.fleet import Instance, ownership
from governor.domain.times import parse_time
from governor.idle.domain import (
    CHECKPOINT_DONE,
    IDLE_ACTION_TAG,
    IDLE_SINCE_TAG,
    POLICY,
    RESUMED,
    Assessment,
    InstanceOutcome,
    Mark,
    Outcome,
    Status,
    sweep_interval,
)
from governor.idle.purchase import (
    auto_scaling_group,
    checkpoint_command,
    checkpoint_notes,
    draining_cluster,
    reclaim_action,
    report_only_reason,
    restart_risk,
)
from governor.policy import Policy

_PAST = {"stop": "stopped", "terminate": "terminated"}


#: The outcomes whose reasons say a scarce type's restart risk (the owner is warned, or it is reported or reclaimed).
_SAYS_RISK = frozenset({"warned", "acted", "checkpoint", "reported"})


def _decided(
    instance: Instance,
    verdict: Verdict,
    outcome: Outcome,
    reasons: list[str],
    evidence: dict[str, Any],
    actions: Iterable[AnyAction] = (),
    severity: Severity = "info",
    *,
    risk: dict[str, Any] | None = None,
) -> Decision:
    recorded = {"status": outcome, **evidence}
    if risk is not None:
        recorded["restart_risk"] = risk
        if outcome in _SAYS_RISK and not any(risk["why"] in r for r in reasons):
            reasons = [*reasons, f"restart risk: {risk['why']}"]
    return Decision(
        policy=POLICY,
        verdict=verdict,
        resource=instance.id,
        actions=list(actions),
        reasons=reasons,
        evidence=recorded,
        severity=severity,
        rule=f"idle.{outcome}",
    )


_NO_LONGER = {
    "busy": "is busy again",
    "exempt": "is kept (exempt)",
    "unmonitored": "has no usable GPU data (missing data is never idle)",
    "grace": "was started again",
}


def withdrawn(instance: Instance, status: Status, decision: Decision, mark: Mark) -> tuple[Decision, str]:
    """A warned instance judged anything but idle (stalled is reported on its own, snoozed is kept): its warning no
    longer holds, since the mark is cleared and nothing is done at the due time. The decision keeps its evidence
    (``status`` says what it was judged) under the rule :data:`RESUMED`, its first reason the signal that showed
    work; the title is the finding the owner's episode message is updated with."""
    warned = mark.warned_at.isoformat() if mark.warned_at else mark.idle_since.isoformat()
    why = f"idle warning of {warned} withdrawn: nothing will be done; the idle clock starts again if it idles"
    reasons = [*decision.reasons, why]
    evidence = {**decision.evidence, "warned_at": warned, "idle_since": mark.idle_since.isoformat()}
    what = _NO_LONGER.get(status, f"is judged {status}")
    title = f"GPU instance {instance.id} ({instance.type}) {what}: idle warning withdrawn"
    return decision.model_copy(update={"rule": RESUMED, "reasons": reasons, "evidence": evidence}), title


def decide(
    instance: Instance,
    assessment: Assessment,
    mark: Mark | None,
    policy: Policy,
    now: dt.datetime,
    *,
    may_act: bool = True,
    interval: dt.timedelta | None = None,
) -> InstanceOutcome:
    """Mark, then act: warn on the first idle verdict, act only when still idle after the warning period.

    Any verdict other than idle clears the mark, so activity (or a data gap) in between starts the clock again.
    ``may_act`` is false when only the warning window (not yet the whole window) is idle: the owner is warned, the
    action waits until every signal has been idle for the whole window. A stalled job is reported to its owner on
    the first sweep that sees a whole window of it (``interval``: the time between sweeps), never stopped.

    The restart risk of a scarce type (:func:`restart_risk`) is part of every decision: recorded as
    ``evidence.restart_risk`` and said in the reasons of each that warns about, reports or reclaims the instance.
    """
    idle = policy.idle
    _decision = partial(_decided, risk=restart_risk(instance, idle))
    enforce = idle.enforce
    owner = ownership(instance.tags, policy.fleet)
    # Who and what, as the sweep saw them: ``governor status --target`` shows an organisation target's fleet from the
    # ledger alone (the operator's credentials cannot describe another account's instances).
    evidence = {"owner": owner.owner, "team": owner.team, "instance_type": instance.type, **assessment.evidence}
    evidence["purchase"] = purchase_model(instance).evidence()
    if assessment.status == "stalled":
        step = interval or sweep_interval(idle)
        since = parse_time(evidence.get("stalled_since"))
        first = since is None or since > now - dt.timedelta(minutes=idle.window_minutes) - step
        reasons = [*assessment.reasons, "reported to the owner, not stopped: check the job (a stall is not idleness)"]
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
        actions: list[AnyAction] = [Notify(enforced=enforce, owner=owner.owner, reason="stalled")] if first else []
        if mark is not None and IDLE_SINCE_TAG in instance.tags:
            actions.append(Untag(enforced=enforce, keys=[IDLE_SINCE_TAG]))
        decision = _decision(instance, "act" if first else "ok", "stalled", reasons, evidence, actions, "warning")
        title = f"GPU instance {instance.id} ({instance.type}) looks stalled: busy GPU at idle power" if first else None
        return InstanceOutcome(instance, "stalled", decision, None, title, prior=mark)
    if assessment.status != "idle":
        actions = []
        reasons = list(assessment.reasons)
        if mark is not None:
            reasons.append(f"idle mark from {mark.idle_since.isoformat()} cleared")
            if IDLE_SINCE_TAG in instance.tags:
                actions.append(Untag(enforced=enforce, keys=[IDLE_SINCE_TAG]))
        verdict: Verdict = "ignored" if assessment.status in ("grace", "exempt", "snoozed") else "ok"
        severity: Severity = "warning" if assessment.status == "unmonitored" else "info"
        decision = _decision(instance, verdict, assessment.status, reasons, evidence, actions, severity)
        if mark is not None and mark.warned_at is not None and assessment.status != "snoozed":
            # The owner saw a warning of this episode: say it is withdrawn (once, since the mark is cleared now). A
            # snooze is the episode's "kept" end: the Keep click already answered in place (its response_url), and
            # an update now would overwrite who kept it and until when.
            decision, title = withdrawn(instance, assessment.status, decision, mark)
            return InstanceOutcome(instance, assessment.status, decision, None, title, prior=mark)
        return InstanceOutcome(instance, assessment.status, decision, None, prior=mark)

    report_only = report_only_reason(instance, idle)
    # A report-only policy's "would be stopped" is not a warning that it will be: once enforcement is switched on,
    # an instance reported earlier is warned again (its idle_since kept) before anything is done to it.
    rewarn = enforce and mark is not None and mark.reported_at is not None and not report_only
    # A mark whose warning was never published (``warned_at`` unset) has not started the clock: warn again.
    unpublished = mark is not None and mark.warned_at is None
    if mark is None or rewarn or unpublished:
        due = now + dt.timedelta(minutes=idle.warning_minutes)
        action = reclaim_action(instance, idle)
        planned = "report" if report_only else action
        what = "reported" if report_only else _PAST[action]
        reasons = [*assessment.reasons, f"{planned} due at {due.isoformat()} unless the instance is used or snoozed"]
        if report_only:
            reasons.append(report_only)
        since = mark.idle_since if mark is not None else now
        if rewarn:
            reasons.append("idle.enforce is now on: warned again, the report-only notice did not say it would be done")
        actions = [
            Tag(enforced=enforce, tags={IDLE_SINCE_TAG: since.isoformat()}),
            Warn(
                enforced=enforce,
                owner=owner.owner,
                due=due.isoformat(),
                planned=planned,
                snooze_tag=policy.fleet.keep_until_tag,
                exempt_tag=policy.fleet.exempt_tag,
            ),
        ]
        decision = _decision(instance, "act", "warned", reasons, evidence, actions, "warning")
        verb = "will be" if enforce else "would be"
        title = f"Idle GPU instance {instance.id} ({instance.type}) {verb} {what} at {due:%Y-%m-%d %H:%M} UTC"
        if not enforce:
            title += " (report-only)"
        return InstanceOutcome(instance, "warned", decision, Mark(idle_since=since, warned_at=now), title, prior=mark)

    evidence["idle_since"] = mark.idle_since.isoformat()
    warned = mark.warned_at or mark.idle_since  # set: an unpublished warning was handled above
    due = warned + dt.timedelta(minutes=idle.warning_minutes)
    if now < due or not may_act:
        reasons = [*assessment.reasons, f"warned at {warned.isoformat()}; action due at {due.isoformat()}"]
        if not may_act:
            reasons.append(f"no action before every signal has been idle for the whole {idle.window_minutes} min")
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark, prior=mark)
    if mark.reported_at is not None:
        why = "reported only" if report_only else "report-only policy"
        reasons = [*assessment.reasons, f"reported for action at {mark.reported_at.isoformat()} ({why})"]
        return InstanceOutcome(instance, "idle", _decision(instance, "ok", "idle", reasons, evidence), mark, prior=mark)
    if report_only:
        reasons = [*assessment.reasons, f"idle since {mark.idle_since.isoformat()}; {report_only}"]
        actions = [Notify(enforced=enforce, owner=owner.owner, reason=report_only)]
        decision = _decision(instance, "act", "reported", reasons, evidence, actions, "warning")
        title = f"Idle GPU instance {instance.id} ({instance.type}) reported, not reclaimed: {report_only}"
        return InstanceOutcome(instance, "reported", decision, replace(mark, reported_at=now), title, prior=mark)

    command = checkpoint_command(instance, policy)
    notes = checkpoint_notes(instance, policy)
    if notes:
        evidence["checkpoint_notes"] = notes
    if command and mark.checkpoint_sent_at is None:
        reasons = [*assessment.reasons, "still idle after the warning; checkpoint first, then act on the next sweep"]
        reasons += notes
        actions = [Checkpoint(enforced=enforce, command=command, timeout=idle.checkpoint_timeout_seconds)]
        new_mark = replace(mark, checkpoint_sent_at=now, checkpoint_status=None if enforce else "NotSent")
        decision = _decision(instance, "act", "checkpoint", reasons, evidence, actions)
        return InstanceOutcome(instance, "checkpoint", decision, new_mark, prior=mark)
    if command and mark.checkpoint_sent_at is not None:
        status = mark.checkpoint_status or "Pending"
        evidence["checkpoint_status"] = status
        deadline = mark.checkpoint_sent_at + dt.timedelta(seconds=idle.checkpoint_timeout_seconds)
        if status not in CHECKPOINT_DONE and now < deadline:
            reasons = [*assessment.reasons, f"checkpoint {status}; waiting until {deadline.isoformat()}"]
            decision = _decision(instance, "ok", "idle", reasons, evidence)
            return InstanceOutcome(instance, "idle", decision, mark, prior=mark)

    action = reclaim_action(instance, idle)
    reasons = [
        *assessment.reasons,
        f"idle since {mark.idle_since.isoformat()}, warned at {warned.isoformat()}; still idle after "
        f"{idle.warning_minutes} min",
    ]
    if "checkpoint_status" in evidence:
        reasons.append(f"checkpoint command ended {evidence['checkpoint_status']}")
    group = auto_scaling_group(instance)
    cluster = draining_cluster(instance, idle)
    through: dict[str, Any] = {"via": "autoscaling", "group": group, "decrement_desired": True} if group else {}
    if cluster:
        through = {"via": "kubernetes", "group": cluster, "decrement_desired": True}
        reasons.append(
            f"through EKS cluster {cluster}: cordoned, drained through the Eviction API (PodDisruptionBudgets "
            "respected), then removed by its owner (Karpenter NodeClaim deleted, or terminated in its node group)"
        )
    elif group:
        reasons.append(f"through Auto Scaling group {group}, desired capacity decremented (never below its minimum)")
    reasons += notes
    actions = [
        reclaim(
            action,
            enforced=enforce,
            lifecycle=instance.lifecycle,
            root_device=instance.root_device_type,
            **through,
        ),
        Tag(enforced=enforce, tags={IDLE_ACTION_TAG: f"{action}@{now.isoformat()}"}, remove=[IDLE_SINCE_TAG]),
    ]
    decision = _decision(instance, "act", "acted", reasons, evidence, actions, "warning")
    if enforce:
        title = f"Idle GPU instance {instance.id} ({instance.type}) {_PAST[action]}"
    else:
        title = (
            f"Idle GPU instance {instance.id} ({instance.type}) would be {_PAST[action]} now (report-only: not done)"
        )
    next_mark = None if enforce else replace(mark, reported_at=now)
    return InstanceOutcome(instance, "acted", decision, next_mark, title, prior=mark)
