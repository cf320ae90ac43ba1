"""What the Spot function keeps of each act and tells people about it: the interruption record's fields from each
outcome, and the warning's findings (the owner's and the team's message, a failed relaunch's).

Pure over the decision, the record and the event; the handler (``spot/handler.py``) calls these around the runner.
"""

from __future__ import annotations

from typing import Any

from governor.domain.actions import Action, Checkpoint, Outcome
from governor.domain.decision import Decision, Finding
from governor.domain.interruptions import InterruptionRecord
from governor.domain.once import IN_DOUBT, IN_FLIGHT
from governor.events.envelopes import EventBridgeEnvelope
from governor.spot.domain import Notice


def finding(decision: Decision, event: EventBridgeEnvelope, title: str, detail: str, **extra: Any) -> Finding:
    finding = Finding.from_decision(
        decision, title, account=event.account, region=event.region, event_id=event.id, **extra
    )
    return finding.model_copy(update={"detail": detail})


def sent(delivered: bool, command_id: str | None, error: str | None) -> Outcome:
    """A checkpoint an earlier attempt of this event already sent (or failed to): its outcome, not a second send."""
    data = {"delivered": delivered, "command_id": command_id, "error": error}
    return Outcome(ok=delivered, error_code=None if delivered else "NotDelivered", message=str(error or ""), data=data)


def keep(record: InterruptionRecord, action: Action, outcome: Outcome) -> None:
    """What the interruption record keeps of one outcome (the state-change and command-status events read it)."""
    data = outcome.data
    if data.get("resumed"):
        return
    if action.type == "checkpoint":
        record.checkpoint_attempted = True
        record.checkpoint_delivered = bool(data.get("delivered"))
        record.command_id = data.get("command_id")
        record.checkpoint_error = data.get("error") if data else outcome.message
    elif action.type == "replace" and "replacement" in data:
        replacement = data["replacement"]
        record.replacement_id = replacement.instance_id
        record.replacement_reason = replacement.reason
        record.replacement_attempts = [
            {"instance_type": a.instance_type, "zone": a.zone, "error": a.error, "instance_id": a.instance_id}
            for a in replacement.attempts
        ]
    elif not outcome.ok:  # a recovery call that raised: reported, not retried
        record.errors.append(outcome.message)
        if action.type == "replace":
            record.replacement_reason = f"relaunch failed: {outcome.message.removeprefix('replace: ')}"
    elif action.type == "deregister":
        record.target_groups = list(data.get("target_groups") or [])
        left = list(data.get("left_alone") or [])
        if left:
            names = ", ".join(left)
            record.errors.append(f"left in target group(s) without fleet.fleet_tags (not the fleet's): {names}")
    elif action.type == "complete_lifecycle_action":
        record.lifecycle_action = data.get("note")


def blocked(decision: Decision) -> str | None:
    """Why the checkpoint could not be sent at all (the instance lacks the tags the SendCommand grant requires)."""
    for action in decision.actions:
        if isinstance(action, Checkpoint) and action.blocked:
            return action.blocked
    return None


def warning_findings(
    decision: Decision, record: InterruptionRecord, event: EventBridgeEnvelope, notice: Notice | None = None
) -> list[Finding]:
    where = f"{record.instance_type} {record.instance_id} ({record.zone or 'unknown zone'})"
    why_not = blocked(decision)
    if not record.checkpoint_attempted and why_not:
        outcome = f"checkpoint not sent: {why_not}"
    elif not record.checkpoint_attempted:
        outcome = "report-only: no checkpoint was sent"
    elif record.checkpoint_delivered:
        outcome = f"checkpoint command {record.command_id} sent ({record.checkpoint_source} command)"
    elif record.checkpoint_error in (IN_DOUBT, IN_FLIGHT):
        outcome = f"checkpoint delivery {record.checkpoint_error}"
    else:
        outcome = f"checkpoint NOT delivered: {record.checkpoint_error}"
    parts = [*decision.reasons, outcome]
    if record.target_groups:
        parts.append(f"deregistered from {len(record.target_groups)} target group(s)")
    if record.lifecycle_action:
        parts.append(f"lifecycle action: {record.lifecycle_action}")
    if record.replacement_id:
        parts.append(f"replacement {record.replacement_id} launched")
    parts.extend(record.errors)
    undelivered = (
        record.checkpoint_attempted
        and not record.checkpoint_delivered
        and record.checkpoint_error not in (IN_DOUBT, IN_FLIGHT)
    )
    severity = "critical" if undelivered else decision.severity
    findings = [
        finding(
            decision.model_copy(update={"severity": severity}),
            event,
            f"{notice.label if notice else 'Spot interruption'}: {where}, {outcome.split(':')[0]}",
            "; ".join(parts),
            owner=record.owner,
            team=record.team,
        )
    ]
    if record.replacement_reason and not record.replacement_id:
        findings.append(
            finding(
                decision.model_copy(update={"severity": "warning", "rule": "spot-replacement"}),
                event,
                f"No replacement launched for {where}",
                record.replacement_reason,
                owner=record.owner,
                team=record.team,
            )
        )
    return findings


def duplicate(decision: Decision, owner: str, scope: str, record: InterruptionRecord | None) -> Decision:
    """A notice about an interruption another event already owns (a Spot warning delivered again under a new id, a
    second expiry of the same block): recorded as ``ignored``, nothing sent, nobody told twice."""
    earlier = f"command {record.command_id}" if record is not None and record.command_id else "its checkpoint"
    reason = (
        f"same interruption of {decision.resource} as event {owner} ({scope}): {earlier} stands; the job is not "
        "signalled twice"
    )
    return decision.model_copy(
        update={
            "verdict": "ignored",
            "actions": [],
            "reasons": [reason],
            "evidence": {**decision.evidence, "duplicate_of": owner, "interruption": scope},
            "severity": "info",
        }
    )
