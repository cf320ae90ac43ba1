"""The idle decision table: the instance's state (its assessment's status) and what the evidence and its mark say,
mapped to an outcome, a verdict, the actions and the reason, in the spirit of Instance Scheduler's schedule states.

It is data you can print: ``governor explain`` shows the row that decided, and docs/idle.md lists the table. Rows
are tried in order; the first whose status matches and whose ``when`` conditions all hold decides
(:func:`row_for`). What each condition means in code is :mod:`governor.idle.case`'s
(one predicate per name in :data:`CONDITIONS`); what the sweep does after deciding, for the whole fleet, is the
last two rows (:data:`HELD`, :data:`DEFERRED`), which :mod:`governor.idle.sweep` applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.domain.decision import Severity, Verdict
from governor.idle.domain import RESUMED, Outcome, Status

#: Every condition a row can name, in words (what ``explain`` prints); :mod:`governor.idle.case` holds each test.
CONDITIONS: dict[str, str] = {
    "first stall": "the first sweep that sees a whole window of the stall",
    "warned": "its owner was warned of this idle spell",
    "not warned": (
        "no warning of this idle spell reached its owner (no mark yet, its warning never accepted, or only a "
        "report-only notice before idle.enforce was switched on)"
    ),
    "waiting": "the warning period is not over, or not every signal has been idle for the whole window yet",
    "reported": "already reported for action in this idle spell",
    "report only": (
        "its capacity may only be reported: paid for (a Capacity Block, a reservation), a scarce type with "
        "scarce_action warn, or owned by a cluster or Auto Scaling group the policy does not reclaim through"
    ),
    "checkpoint due": "a checkpoint command applies and none was sent in this idle spell",
    "checkpoint running": "its checkpoint has not ended and its timeout has not passed",
    "held by the breaker": (
        "the circuit breaker holds it (it turned idle with many others: a measurement failure's signature)"
    ),
    "over the rate limit": "more actions are due this sweep than the rate limit allows, and others waited longer",
    "kept by a signal": (
        "every GPU signal says idle, but one of the team's activity signals (idle.activity_signals) read above its "
        "threshold in the window"
    ),
    "no GPU pod": (
        "no pod requested nvidia.com/gpu on the node for the whole window (the DCGM exporter's pod labels): a GPU node "
        "held by CPU pods"
    ),
    "no process": (
        "every GPU's memory in use stayed at the floor of a GPU no process has open (no CUDA context) for the whole "
        "window, with no compute"
    ),
    "signal unknown": (
        "every GPU signal says idle, but one of the team's activity signals has too few samples or none recent"
    ),
}

_CLEAR_MARK = "untag governor:idle-since (when marked)"
#: The warnings that say more than idle (issue 49.5, 49.6): still rule idle.warned, so the owner's digest and its
#: Keep and Stop now buttons are the same; the row's name is in ``explain`` and its evidence in the ledger.
CPU_PODS_ROW = "warn: GPU node held by CPU pods"
NO_PROCESS_ROW = "warn: held, no process"


@dataclass(frozen=True)
class Row:
    """One row: which state it applies to, when, and what the decision then is (``verdict`` None: as decided)."""

    name: str
    statuses: frozenset[Status]
    outcome: Outcome
    verdict: Verdict | None
    reason: str
    when: tuple[str, ...] = ()
    severity: Severity | None = "info"
    actions: tuple[str, ...] = ()
    rule: str | None = None  # the ledger's rule, when not ``idle.<outcome>``

    @property
    def number(self) -> int:
        return TABLE.index(self) + 1

    @property
    def rule_id(self) -> str:
        return self.rule or f"idle.{self.outcome}"

    def public(self) -> dict[str, Any]:
        """What ``governor explain --json`` prints of the row that decided."""
        return {
            "table": "idle",
            "row": self.number,
            "name": self.name,
            "status": sorted(self.statuses),
            "when": [CONDITIONS[c] for c in self.when],
            "outcome": self.outcome,
            "verdict": self.verdict or "as decided",
            "actions": list(self.actions),
            "reason": self.reason,
            "rule": self.rule_id,
        }


def _not_idle(status: Status, verdict: Verdict, severity: Severity, reason: str) -> tuple[Row, Row]:
    """A status that is not idle: with a published warning of the spell it is withdrawn, else the mark is cleared."""
    withdrawn = Row(
        f"{status}, warning withdrawn",
        frozenset({status}),
        status,
        verdict,
        f"{reason}; the owner's warning of this spell is withdrawn (nothing will be done)",
        when=("warned",),
        severity=severity,
        actions=(_CLEAR_MARK,),
        rule=RESUMED,
    )
    return withdrawn, Row(
        status, frozenset({status}), status, verdict, reason, severity=severity, actions=(_CLEAR_MARK,)
    )


def _by_signal(status: Status, name: str, condition: str, reason: str, rule: str) -> tuple[Row, Row]:
    """A team's activity signal kept the instance (busy) or left it unknown (unmonitored): its own rule, and the
    owner's warning of the spell withdrawn like any other's."""
    severity: Severity = "warning" if status == "unmonitored" else "info"
    withdrawn = Row(
        f"{name}, warning withdrawn",
        frozenset({status}),
        status,
        "ok",
        f"{reason}; the owner's warning of this spell is withdrawn (nothing will be done)",
        when=(condition, "warned"),
        severity=severity,
        actions=(_CLEAR_MARK,),
        rule=RESUMED,
    )
    return withdrawn, Row(
        name,
        frozenset({status}),
        status,
        "ok",
        reason,
        when=(condition,),
        severity=severity,
        actions=(_CLEAR_MARK,),
        rule=rule,
    )


_IDLE: frozenset[Status] = frozenset({"idle"})

#: The rows, in the order they are tried.
ROWS: tuple[Row, ...] = (
    Row(
        "stalled",
        frozenset({"stalled"}),
        "stalled",
        "act",
        "a busy GPU at idle power with its memory still (a hung job): reported to its owner, never stopped",
        when=("first stall",),
        severity="warning",
        actions=("notify the owner", _CLEAR_MARK),
    ),
    Row(
        "stalled, reported before",
        frozenset({"stalled"}),
        "stalled",
        "ok",
        "the stall was reported when first seen",
        severity="warning",
        actions=(_CLEAR_MARK,),
    ),
    Row(
        "snoozed",
        frozenset({"snoozed"}),
        "snoozed",
        "ignored",
        "its owner snoozed reclamation; the Keep click already answered the warning",
        actions=(_CLEAR_MARK,),
    ),
    *_not_idle("grace", "ignored", "info", "in launch grace (started again)"),
    *_not_idle("exempt", "ignored", "info", "exempt by a bounded exemption"),
    *_by_signal(
        "unmonitored",
        "activity signal unknown",
        "signal unknown",
        "a signal the team defined has no data: unknown, never idle (a signal can keep a machine, never free it)",
        "idle.signal-unknown",
    ),
    *_not_idle("unmonitored", "ok", "warning", "missing or stale data, never idle"),
    *_by_signal(
        "busy",
        "kept by an activity signal",
        "kept by a signal",
        "the team's own activity signal shows work the GPU metrics do not",
        "idle.kept-by-signal",
    ),
    *_not_idle("busy", "ok", "info", "a signal shows work"),
    Row(
        CPU_PODS_ROW,
        _IDLE,
        "warned",
        "act",
        "a GPU node no GPU pod used for the warning window: the owner hears what it costs at its GPU price, and the "
        "drain (or report) is due after warning_minutes",
        when=("no GPU pod", "not warned"),
        severity="warning",
        actions=(
            "tag governor:idle-since",
            "warn the owner with the node's GPU price a day (Keep and Stop now buttons)",
        ),
    ),
    Row(
        NO_PROCESS_ROW,
        _IDLE,
        "warned",
        "act",
        "GPUs held with nothing on them (memory at the no-process floor, no compute) for the warning window: the owner "
        "hears it is held for nothing, and the action (or report) is due after warning_minutes",
        when=("no process", "not warned"),
        severity="warning",
        actions=("tag governor:idle-since", "warn the owner: held with no process (Keep and Stop now buttons)"),
    ),
    Row(
        "warn",
        _IDLE,
        "warned",
        "act",
        "idle for the warning window: the owner is warned, and the action (or report) is due after warning_minutes",
        when=("not warned",),
        severity="warning",
        actions=("tag governor:idle-since", "warn the owner (Keep and Stop now buttons)"),
    ),
    Row(
        "wait for the warning",
        _IDLE,
        "idle",
        "ok",
        "still idle; the action waits for the warning period and a whole idle window",
        when=("waiting",),
    ),
    Row(
        "reported before",
        _IDLE,
        "idle",
        "ok",
        "already reported; nothing more until it is busy again",
        when=("reported",),
    ),
    Row(
        "report to the owner",
        _IDLE,
        "reported",
        "act",
        "still idle after the warning, and its capacity may only be reported: its owner hears why",
        when=("report only",),
        severity="warning",
        actions=("notify the owner",),
    ),
    Row(
        "checkpoint",
        _IDLE,
        "checkpoint",
        "act",
        "still idle after the warning: checkpoint first, act on a later sweep",
        when=("checkpoint due",),
        actions=("send the checkpoint command (SSM)",),
    ),
    Row(
        "wait for the checkpoint",
        _IDLE,
        "idle",
        "ok",
        "the checkpoint is still running",
        when=("checkpoint running",),
    ),
    Row(
        "reclaim",
        _IDLE,
        "acted",
        "act",
        "still idle after the warning (and its checkpoint, if any): reclaimed",
        severity="warning",
        actions=(
            "stop or terminate (through its Auto Scaling group or its cluster's drain when it has one)",
            "tag governor:idle-action, untag governor:idle-since",
        ),
    ),
)

#: What the sweep does to an idle outcome that would warn, report or act, after every instance is decided.
HELD = Row(
    "held by the breaker",
    _IDLE,
    "held",
    None,
    "nothing is enforced while the breaker holds it; its mark stays as it was",
    when=("held by the breaker",),
    severity=None,
    actions=("none enforced",),
)
DEFERRED = Row(
    "deferred by the rate limit",
    _IDLE,
    "deferred",
    None,
    "nothing is enforced this sweep; it keeps its place in line (longest idle first, then the dearest)",
    when=("over the rate limit",),
    severity=None,
    actions=("none enforced",),
)
TABLE: tuple[Row, ...] = (*ROWS, HELD, DEFERRED)


def row_for(status: Status, holds: Callable[[str], bool]) -> Row:
    """The first row for ``status`` whose ``when`` conditions all hold."""
    for row in ROWS:
        if status in row.statuses and all(holds(c) for c in row.when):
            return row
    raise LookupError(f"no idle table row for status {status!r}")  # every status has a row without conditions
