"""The decision object every policy returns: verdict, actions, reasons, evidence.

Handlers record it in the ledger before acting; ``governor explain`` prints it. One shape for both keeps what a
user previews identical to what runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from governor.domain.actions import Action, AnyAction
from governor.domain.model import Model
from governor.domain.verification import Verification

Verdict = Literal["act", "ok", "ignored"]
Severity = Literal["info", "warning", "critical"]
_RANK: dict[str, int] = {"ignored": 0, "ok": 1, "act": 2}


class Decision(Model):
    """What one policy decided about one resource, and why."""

    policy: str
    verdict: Verdict
    resource: str
    actions: list[AnyAction] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)
    severity: Severity = "info"
    rule: str | None = None

    def enforced_actions(self) -> list[Action]:
        return [action for action in self.actions if action.enforced]

    def public(self) -> dict[str, Any]:
        """What ``governor explain --json`` prints of a decision (evidence and severity stay in the ledger)."""
        return self.model_dump(include={"policy", "verdict", "resource", "actions", "reasons", "assumptions"})


def strongest(verdicts: Iterable[Verdict]) -> Verdict:
    """act > ok > ignored; no verdicts at all is ``ignored``."""
    best: Verdict = "ignored"
    for verdict in verdicts:
        if _RANK[verdict] > _RANK[best]:
            best = verdict
    return best


class Finding(Model):
    """A message for people, published on the ``governor`` bus; the notifier decides where it goes."""

    policy: str
    rule: str
    severity: Severity
    resource: str
    title: str
    detail: str = ""
    owner: str | None = None
    team: str | None = None
    account: str | None = None
    region: str | None = None
    event_id: str | None = None
    enforced: bool = False
    actions: list[dict[str, Any]] = Field(default_factory=list)
    #: Deterministic (event id + resource + rule, see ``governor.outbox``): a re-published finding keeps its id, so
    #: the notifier and other subscribers can recognise it.
    id: str | None = None
    at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    #: The resource's on-demand price per hour when it is known: messages list the dearest first.
    usd_per_hour: float | None = None
    #: An owner's digest of one sweep's idle warnings (``governor.idle.digest``): each member keeps its own id,
    #: actions and buttons; the digest is what is posted.
    members: list[Finding] = Field(default_factory=list, max_length=50)
    #: Set on a warning that is posted inside its owner's digest (the digest's id): the notifier records it and
    #: posts nothing of its own.
    digested_in: str | None = None
    #: What the enforcer saw when it re-read the resource after acting (set by the runner, ``governor.domain.rereads``):
    #: the problem is resolved only when this says ``fixed``. None: nothing was acted on, or nothing re-read.
    verified: Verification | None = None

    @classmethod
    def from_decision(cls, decision: Decision, title: str, **extra: Any) -> Finding:
        return cls(
            policy=decision.policy,
            rule=decision.rule or decision.policy,
            severity=decision.severity,
            resource=decision.resource,
            title=title,
            detail="; ".join(decision.reasons),
            enforced=any(action.enforced for action in decision.actions),
            actions=[action.model_dump() for action in decision.actions],
            **extra,
        )
