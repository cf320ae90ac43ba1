"""Mark, then act: the idle decision about one instance in one sweep, by the decision table
(:mod:`governor.idle.table`), applied once.

:class:`governor.idle.case.Case` holds what the row's conditions are tested on (the assessment, the mark, the
instance's purchase model and checkpoint, the clock) and the evidence every decision records; :func:`decide` finds
the row and builds its decision: the row's outcome, verdict and severity, with the reasons and actions in full, one
small function per kind of row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from governor.domain.actions import AnyAction, Checkpoint, Notify, Tag, Warn
from governor.domain.decision import Decision
from governor.domain.facts import action_path
from governor.domain.fleet import Instance
from governor.idle.actions import reclaim
from governor.idle.case import Case
from governor.idle.domain import (
    IDLE_ACTION_TAG,
    IDLE_SINCE_TAG,
    RESUMED,
    Assessment,
    Mark,
    Outcome,
    Status,
)
from governor.idle.gpu_pods import cpu_pods_title, no_process_title
from governor.idle.purchase import (
    auto_scaling_group,
    checkpoint_notes,
    draining_cluster,
    reclaim_action,
)
from governor.idle.table import CPU_PODS_ROW, NO_PROCESS_ROW, Row, row_for
from governor.policy import Policy

_PAST = {"stop": "stopped", "terminate": "terminated"}


@dataclass(frozen=True)
class InstanceOutcome:
    """The decision about one instance in one sweep, and the mark to keep for the next sweep (None: no mark); ``row``
    is the row of the decision table that decided it (``governor explain`` prints it)."""

    instance: Instance
    outcome: Outcome
    decision: Decision
    mark: Mark | None
    finding: str | None = None
    prior: Mark | None = None
    row: Row | None = field(default=None, compare=False)


def _stalled(case: Case, row: Row) -> InstanceOutcome:
    first = row.verdict == "act"
    cleared, untag = case.cleared()
    reasons = [*case.assessment.reasons, "reported to the owner, not stopped: check the job (a stall is not idleness)"]
    reasons += cleared
    actions: list[AnyAction] = (
        [Notify(enforced=case.enforce, owner=case.owner.owner, reason="stalled")] if first else []
    )
    decision = case.decided(row, reasons, [*actions, *untag])
    instance = case.instance
    title = f"GPU instance {instance.id} ({instance.type}) looks stalled: busy GPU at idle power" if first else None
    return InstanceOutcome(instance, "stalled", decision, None, title, prior=case.mark)


def _not_idle(case: Case, row: Row) -> InstanceOutcome:
    cleared, actions = case.cleared()
    decision = case.decided(row, [*case.assessment.reasons, *cleared], actions)
    status: Status = case.assessment.status
    if row.rule != RESUMED or case.mark is None:
        return InstanceOutcome(case.instance, row.outcome, decision, None, prior=case.mark)
    # The owner saw a warning of this episode: say it is withdrawn (once, since the mark is cleared now). A snooze is
    # the episode's "kept" end (its own row): the Keep click already answered in place (its response_url), and an
    # update now would overwrite who kept it and until when.
    decision, title = withdrawn(case.instance, status, decision, case.mark)
    return InstanceOutcome(case.instance, row.outcome, decision, None, title, prior=case.mark)


def _warn(case: Case, row: Row) -> InstanceOutcome:
    idle, mark, instance, report_only = case.policy.idle, case.mark, case.instance, case.report_only
    due = case.now + dt.timedelta(minutes=idle.warning_minutes)
    action = reclaim_action(instance, idle)
    planned = "report" if report_only else action
    through = {k: v for k, v in _through(case)[0].items() if k in ("via", "group")}
    what = "reported" if report_only else action_path({"type": action, **through}).short()
    reasons = [*case.assessment.reasons, f"{planned} due at {due.isoformat()} unless the instance is used or snoozed"]
    if report_only:
        reasons.append(report_only)
    since = mark.idle_since if mark is not None else case.now
    if case.rewarn:
        reasons.append("idle.enforce is now on: warned again, the report-only notice did not say it would be done")
    fleet = case.policy.fleet
    actions: list[AnyAction] = [
        Tag(enforced=case.enforce, tags={IDLE_SINCE_TAG: since.isoformat()}),
        Warn(
            enforced=case.enforce,
            owner=case.owner.owner,
            due=due.isoformat(),
            planned=planned,
            snooze_tag=fleet.keep_until_tag,
            exempt_tag=fleet.exempt_tag,
            **through,
        ),
    ]
    decision = case.decided(row, reasons, actions)
    verb = "will be" if case.enforce else "would be"
    title = f"Idle GPU instance {instance.id} ({instance.type}) {verb} {what} at {due:%Y-%m-%d %H:%M} UTC"
    if row.name == CPU_PODS_ROW:
        title = cpu_pods_title(instance, case.evidence["gpu_node_without_gpu_pods"], f"{verb} {what} at {due:%H:%M}")
    elif row.name == NO_PROCESS_ROW:
        title += no_process_title(case.evidence["no_process"])
    if not case.enforce:
        title += " (report-only)"
    return InstanceOutcome(instance, "warned", decision, Mark(idle_since=since, warned_at=case.now), title, prior=mark)


def _spell_evidence(case: Case, *, notes: bool = False) -> None:
    """What every decision past the warning records: the spell's start, then the checkpoint's notes and status."""
    case.evidence["idle_since"] = case.spell.idle_since.isoformat()
    if not notes:
        return
    found = checkpoint_notes(case.instance, case.policy)
    if found:
        case.evidence["checkpoint_notes"] = found
    if case.command and case.spell.checkpoint_sent_at is not None:
        case.evidence["checkpoint_status"] = case.spell.checkpoint_status or "Pending"


def _wait(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case)
    reasons = [
        *case.assessment.reasons,
        f"warned at {case.warned_at.isoformat()}; action due at {case.due.isoformat()}",
    ]
    if not case.may_act:
        reasons.append(
            f"no action before every signal has been idle for the whole {case.policy.idle.window_minutes} min"
        )
    return InstanceOutcome(case.instance, "idle", case.decided(row, reasons), case.mark, prior=case.mark)


def _reported_before(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case)
    why = "reported only" if case.report_only else "report-only policy"
    reported_at = case.spell.reported_at
    assert reported_at is not None  # the row's condition
    reasons = [*case.assessment.reasons, f"reported for action at {reported_at.isoformat()} ({why})"]
    return InstanceOutcome(case.instance, "idle", case.decided(row, reasons), case.mark, prior=case.mark)


def _report(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case)
    report_only, instance = case.report_only or "", case.instance
    reasons = [*case.assessment.reasons, f"idle since {case.spell.idle_since.isoformat()}; {report_only}"]
    actions = [Notify(enforced=case.enforce, owner=case.owner.owner, reason=report_only)]
    decision = case.decided(row, reasons, actions)
    title = f"Idle GPU instance {instance.id} ({instance.type}) reported, not reclaimed: {report_only}"
    mark = replace(case.spell, reported_at=case.now)
    return InstanceOutcome(instance, "reported", decision, mark, title, prior=case.mark)


def _checkpoint(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case, notes=True)
    idle = case.policy.idle
    reasons = [*case.assessment.reasons, "still idle after the warning; checkpoint first, then act on the next sweep"]
    reasons += case.evidence.get("checkpoint_notes", [])
    command = case.command or ""
    actions = [Checkpoint(enforced=case.enforce, command=command, timeout=idle.checkpoint_timeout_seconds)]
    mark = replace(case.spell, checkpoint_sent_at=case.now, checkpoint_status=None if case.enforce else "NotSent")
    return InstanceOutcome(case.instance, "checkpoint", case.decided(row, reasons, actions), mark, prior=case.mark)


def _wait_checkpoint(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case, notes=True)
    deadline = case.checkpoint_deadline
    assert deadline is not None  # the row's condition
    status = case.evidence["checkpoint_status"]
    reasons = [*case.assessment.reasons, f"checkpoint {status}; waiting until {deadline.isoformat()}"]
    return InstanceOutcome(case.instance, "idle", case.decided(row, reasons), case.mark, prior=case.mark)


def _through(case: Case) -> tuple[dict[str, Any], str | None]:
    """How the reclaim goes (through an Auto Scaling group or a cluster's drain), and that said in words."""
    group = auto_scaling_group(case.instance)
    cluster = draining_cluster(case.instance, case.policy.idle)
    if cluster:
        said = (
            f"through EKS cluster {cluster}: cordoned, drained through the Eviction API (PodDisruptionBudgets "
            "respected), then removed by its owner (Karpenter NodeClaim deleted, or terminated in its node group)"
        )
        return {"via": "kubernetes", "group": cluster, "decrement_desired": True}, said
    if group:
        said = f"through Auto Scaling group {group}, desired capacity decremented (never below its minimum)"
        return {"via": "autoscaling", "group": group, "decrement_desired": True}, said
    return {}, None


def _reclaim(case: Case, row: Row) -> InstanceOutcome:
    _spell_evidence(case, notes=True)
    idle, instance, now, mark = case.policy.idle, case.instance, case.now, case.spell
    action = reclaim_action(instance, idle)
    reasons = [
        *case.assessment.reasons,
        f"idle since {mark.idle_since.isoformat()}, warned at {case.warned_at.isoformat()}; still idle after "
        f"{idle.warning_minutes} min",
    ]
    if "checkpoint_status" in case.evidence:
        reasons.append(f"checkpoint command ended {case.evidence['checkpoint_status']}")
    through, said = _through(case)
    reasons += [said] if said else []
    reasons += case.evidence.get("checkpoint_notes", [])
    actions = [
        reclaim(
            action,
            enforced=case.enforce,
            lifecycle=instance.lifecycle,
            root_device=instance.root_device_type,
            **through,
        ),
        Tag(enforced=case.enforce, tags={IDLE_ACTION_TAG: f"{action}@{now.isoformat()}"}, remove=[IDLE_SINCE_TAG]),
    ]
    decision = case.decided(row, reasons, actions)
    if case.enforce:
        title = f"Idle GPU instance {instance.id} ({instance.type}) {_PAST[action]}"
    else:
        title = (
            f"Idle GPU instance {instance.id} ({instance.type}) would be {_PAST[action]} now (report-only: not done)"
        )
    next_mark = None if case.enforce else replace(mark, reported_at=now)
    return InstanceOutcome(instance, "acted", decision, next_mark, title, prior=case.mark)


_Builder = Callable[[Case, Row], InstanceOutcome]
#: How each row's decision is built, by the row's outcome (the rows of one outcome share their builder).
_BUILD: dict[str, _Builder] = {
    "stalled": _stalled,
    "warned": _warn,
    "reported": _report,
    "checkpoint": _checkpoint,
    "acted": _reclaim,
}
_BY_NAME: dict[str, _Builder] = {
    "wait for the warning": _wait,
    "reported before": _reported_before,
    "wait for the checkpoint": _wait_checkpoint,
}


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
    The row of :mod:`governor.idle.table` that decided travels with the outcome (``row``), for ``explain``.
    """
    case = Case(instance, assessment, mark, policy, now, may_act, interval)
    row = row_for(assessment.status, case.holds)
    build = _BY_NAME.get(row.name) or _BUILD.get(row.outcome, _not_idle)
    return replace(build(case, row), row=row)


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
