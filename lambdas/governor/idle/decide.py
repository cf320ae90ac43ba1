"""Mark, then act: the idle decision about one instance in one sweep, by the decision table
(:mod:`governor.idle.table`), applied once.

:class:`Case` holds what the row's conditions are tested on (the assessment, the mark, the instance's purchase model
and checkpoint, the clock) and the evidence every decision records; :func:`decide` finds the row and builds its
decision: the row's outcome, verdict and severity, with the reasons and actions in full.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from governor.domain.actions import AnyAction, Checkpoint, Notify, Tag, Untag, Warn, reclaim
from governor.domain.capacity import purchase_model
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, Ownership, ownership
from governor.domain.times import parse_time
from governor.idle.domain import (
    CHECKPOINT_DONE,
    IDLE_ACTION_TAG,
    IDLE_SINCE_TAG,
    POLICY,
    RESUMED,
    Assessment,
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
from governor.idle.table import Row, row_for
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


#: The outcomes whose reasons say a scarce type's restart risk (the owner is warned, or it is reported or reclaimed).
_SAYS_RISK = frozenset({"warned", "acted", "checkpoint", "reported"})


@dataclass
class Case:
    """One instance in one sweep, as the table's conditions read it; its facts are worked out when a row asks."""

    instance: Instance
    assessment: Assessment
    mark: Mark | None
    policy: Policy
    now: dt.datetime
    may_act: bool = True
    interval: dt.timedelta | None = None
    evidence: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        # Who and what, as the sweep saw them: ``governor status --target`` shows an organisation target's fleet from
        # the ledger alone (the operator's credentials cannot describe another account's instances).
        owner = self.owner
        self.evidence = {
            "owner": owner.owner,
            "team": owner.team,
            "instance_type": self.instance.type,
            **self.assessment.evidence,
        }
        self.evidence["purchase"] = purchase_model(self.instance).evidence()

    @cached_property
    def owner(self) -> Ownership:
        return ownership(self.instance.tags, self.policy.fleet)

    @cached_property
    def risk(self) -> dict[str, Any] | None:
        return restart_risk(self.instance, self.policy.idle)

    @cached_property
    def report_only(self) -> str | None:
        return report_only_reason(self.instance, self.policy.idle)

    @cached_property
    def command(self) -> str | None:
        return checkpoint_command(self.instance, self.policy)

    @property
    def enforce(self) -> bool:
        return self.policy.idle.enforce

    @property
    def spell(self) -> Mark:
        """The mark of an idle spell past its warning (every row after "warn" has one)."""
        assert self.mark is not None
        return self.mark

    @property
    def warned_at(self) -> dt.datetime:
        return self.spell.warned_at or self.spell.idle_since  # set: an unpublished warning is warned again

    @property
    def due(self) -> dt.datetime:
        return self.warned_at + dt.timedelta(minutes=self.policy.idle.warning_minutes)

    @property
    def rewarn(self) -> bool:
        """A report-only policy's "would be stopped" is not a warning that it will be: once enforcement is switched
        on, an instance reported earlier is warned again (its idle_since kept) before anything is done to it."""
        mark = self.mark
        return self.enforce and mark is not None and mark.reported_at is not None and not self.report_only

    @property
    def checkpoint_deadline(self) -> dt.datetime | None:
        sent = self.spell.checkpoint_sent_at
        return sent + dt.timedelta(seconds=self.policy.idle.checkpoint_timeout_seconds) if sent else None

    def holds(self, condition: str) -> bool:
        """Whether the table's ``condition`` holds for this case."""
        return _CONDITIONS[condition](self)

    def decided(self, row: Row, reasons: list[str], actions: Iterable[AnyAction] = ()) -> Decision:
        """The row's decision: its outcome as ``evidence.status``, its verdict, severity and rule (``idle.<outcome>``),
        and the restart risk of a scarce type, said in the reasons of each that warns, reports or reclaims."""
        recorded = {"status": row.outcome, **self.evidence}
        risk = self.risk
        if risk is not None:
            recorded["restart_risk"] = risk
            if row.outcome in _SAYS_RISK and not any(risk["why"] in r for r in reasons):
                reasons = [*reasons, f"restart risk: {risk['why']}"]
        return Decision(
            policy=POLICY,
            verdict=row.verdict or "ok",
            resource=self.instance.id,
            actions=list(actions),
            reasons=reasons,
            evidence=recorded,
            severity=row.severity or "info",
            rule=f"idle.{row.outcome}",
        )

    def cleared(self) -> tuple[list[str], list[AnyAction]]:
        """The mark cleared: said, and its tag removed when the instance carries it (nothing without a mark)."""
        if self.mark is None:
            return [], []
        said = [f"idle mark from {self.mark.idle_since.isoformat()} cleared"]
        if IDLE_SINCE_TAG not in self.instance.tags:
            return said, []
        return said, [Untag(enforced=self.enforce, keys=[IDLE_SINCE_TAG])]


def _first_stall(case: Case) -> bool:
    """A stall is reported on the first sweep that sees a whole window of it (``interval``: between sweeps)."""
    idle = case.policy.idle
    step = case.interval or sweep_interval(idle)
    since = parse_time(case.evidence.get("stalled_since"))
    return since is None or since > case.now - dt.timedelta(minutes=idle.window_minutes) - step


def _checkpoint_running(case: Case) -> bool:
    deadline = case.checkpoint_deadline
    status = case.spell.checkpoint_status or "Pending"
    return bool(case.command) and deadline is not None and status not in CHECKPOINT_DONE and case.now < deadline


#: What each of the table's conditions (``governor.idle.table.CONDITIONS``) means in code.
_CONDITIONS: dict[str, Callable[[Case], bool]] = {
    "first stall": _first_stall,
    "warned": lambda case: case.mark is not None and case.mark.warned_at is not None,
    # A mark whose warning was never published (``warned_at`` unset) has not started the clock: warn again.
    "not warned": lambda case: case.mark is None or case.rewarn or case.mark.warned_at is None,
    "waiting": lambda case: case.now < case.due or not case.may_act,
    "reported": lambda case: case.spell.reported_at is not None,
    "report only": lambda case: bool(case.report_only),
    "checkpoint due": lambda case: bool(case.command) and case.spell.checkpoint_sent_at is None,
    "checkpoint running": _checkpoint_running,
}


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
    what = "reported" if report_only else _PAST[action]
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
        ),
    ]
    decision = case.decided(row, reasons, actions)
    verb = "will be" if case.enforce else "would be"
    title = f"Idle GPU instance {instance.id} ({instance.type}) {verb} {what} at {due:%Y-%m-%d %H:%M} UTC"
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
