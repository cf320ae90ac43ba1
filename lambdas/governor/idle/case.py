"""One instance in one sweep as the idle decision table's conditions read it (:class:`Case`), and what each
condition the table names means in code (:data:`CONDITION_TESTS`, one test per name in
``governor.idle.table.CONDITIONS``). Pure; :mod:`governor.idle.decide` finds the row and builds its decision.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from governor.domain.actions import AnyAction, Untag
from governor.domain.capacity import purchase_model
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, Ownership, ownership
from governor.domain.times import parse_time
from governor.idle.domain import CHECKPOINT_DONE, IDLE_SINCE_TAG, POLICY, Assessment, Mark, sweep_interval
from governor.idle.gpu_pods import gpu_node_price
from governor.idle.purchase import checkpoint_command, report_only_reason, restart_risk
from governor.idle.table import Row
from governor.policy import Policy

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
        for key in ("gpu_node_without_gpu_pods", "no_process"):
            held = self.evidence.get(key)
            if held is not None:  # what it costs a day at its GPU price, on every decision about it
                self.evidence[key] = {**held, **gpu_node_price(self.instance.type, self.policy)}

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
        return CONDITION_TESTS[condition](self)

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
            rule=row.rule_id,
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
CONDITION_TESTS: dict[str, Callable[[Case], bool]] = {
    "first stall": _first_stall,
    "warned": lambda case: case.mark is not None and case.mark.warned_at is not None,
    # A mark whose warning was never published (``warned_at`` unset) has not started the clock: warn again.
    "not warned": lambda case: case.mark is None or case.rewarn or case.mark.warned_at is None,
    "waiting": lambda case: case.now < case.due or not case.may_act,
    "reported": lambda case: case.spell.reported_at is not None,
    "report only": lambda case: bool(case.report_only),
    "checkpoint due": lambda case: bool(case.command) and case.spell.checkpoint_sent_at is None,
    "checkpoint running": _checkpoint_running,
    "no GPU pod": lambda case: "gpu_node_without_gpu_pods" in case.evidence,
    "no process": lambda case: "no_process" in case.evidence,
    "kept by a signal": lambda case: bool(case.assessment.evidence.get("kept_by_signal")),
    "signal unknown": lambda case: bool(case.assessment.evidence.get("signal_unknown")),
}
