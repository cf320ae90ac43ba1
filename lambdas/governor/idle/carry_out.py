"""Carrying out one recorded idle decision: re-read the instance (and its metrics, its Auto Scaling group) right before
anything destructive, act through the runner, stage the reclaim's finding around the act, and keep the mark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from governor import acts, runner
from governor.domain.actions import Outcome
from governor.domain.decision import Action, Decision, Finding
from governor.domain.fleet import Instance, exemption, snoozed_until
from governor.events.envelopes import GovernorEvent
from governor.idle.actions import Terminate
from governor.idle.assessment import assess_signals, power_limit
from governor.idle.decide import InstanceOutcome
from governor.idle.domain import MARK_KIND, Assessment, Mark, fetched_signals
from governor.idle.gather import bounded
from governor.idle.kubernetes.drain_sweep import not_reclaimed, through_cluster, unfinished_drain
from governor.idle.ports import Adapters
from governor.idle.tell import finding_for, reclaim_finding_id
from governor.outbox import Outbox
from governor.runtime import Runtime

MARK_TTL = dt.timedelta(days=2)


def mark_item(instance_id: str, mark: Mark | None, now: dt.datetime) -> dict[str, Any]:
    """The ledger item of one instance's mark (a cleared mark keeps its key, with no ``idle_since``), expiring after
    :data:`MARK_TTL` so an instance gone for good leaves nothing behind."""
    item: dict[str, Any] = mark.to_item(instance_id) if mark else {"instance_id": instance_id, "idle_since": None}
    item["expires_at"] = int((now + MARK_TTL).timestamp())
    return item


def store_mark(runtime: Runtime, instance_id: str, mark: Mark | None, now: dt.datetime) -> None:
    """Write one mark now (Stop now's; a sweep writes its marks in one batch)."""
    runtime.ledger.put_item(MARK_KIND, instance_id, mark_item(instance_id, mark, now))


def _still_safe(instance: Instance, live: Instance | None, runtime: Runtime, now: dt.datetime) -> str | None:
    """Why acting is no longer right after re-reading the instance, or None when it still is."""
    if live is None:
        return f"{instance.id} no longer exists"
    live = bounded(live, runtime, now)
    if live.state != "running":
        return f"{instance.id} is {live.state} now"
    if live.launch_time != instance.launch_time:
        return f"{instance.id} was restarted at {live.launch_time.isoformat()}"
    why = exemption(
        live.id, live.tags, runtime.policy.fleet, runtime.policy.idle.exemptions, now, refused=live.refused_keys
    )
    if why:
        return f"{instance.id} became exempt: {why}"
    snooze = snoozed_until(live.tags, runtime.policy.fleet, now)
    if snooze:
        return f"{instance.id} was snoozed until {snooze.isoformat()}"
    return None


#: States that confirm a stop or terminate was made (the instance no longer runs, or is gone).
_RECLAIMED_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


def resolve_pending(aws: Adapters) -> Callable[[Finding, str], Finding | None]:
    """What a stop or terminate finding staged before its act becomes once its invocation is gone: re-read the
    instance; a stopped (or gone) one confirms the act, a running one means it was never made (withdrawn)."""

    def resolve(finding: Finding, act: str) -> Finding | None:
        live = aws.instances.instance(finding.resource)
        if live is not None and live.state not in _RECLAIMED_STATES:
            return None
        seen = live.state if live is not None else "gone"
        verb = {"stop": "stopped", "terminate": "terminated"}.get(act, act)
        detail = finding.detail.replace(f"{act} requested", verb)
        return finding.model_copy(
            update={"detail": f"{detail} (the instance is {seen}; the invocation that acted ended before reporting)"}
        )

    return resolve


def _destructive(outcome: InstanceOutcome) -> bool:
    return any(a.type in ("checkpoint", "stop", "terminate") for a in outcome.decision.enforced_actions())


def recheck_metrics(
    outcomes: list[InstanceOutcome], runtime: Runtime, aws: Adapters, judged_at: dt.datetime
) -> dict[str, Assessment]:
    """Re-read, in one batched fetch at the clock's time, the metrics of every instance about to be acted on.

    A job started minutes ago may not have shown in the sweep's read (CloudWatch ingests with a delay); the action
    goes ahead only if this read still says idle over the whole window with a fresh newest sample.
    """
    ids = [o.instance.id for o in outcomes if _destructive(o)]
    if not ids:
        return {}
    idle = runtime.policy.idle
    now = max(aws.clock(), judged_at)
    types = {o.instance.id: o.instance.type for o in outcomes}
    fresh = aws.metrics.fetch(ids, fetched_signals(idle), now - dt.timedelta(minutes=idle.window_minutes), now)
    return {i: assess_signals(i, fresh.get(i, {}), idle, now, power_limit(types[i], idle)) for i in ids}


def _group_refusal(outcome: InstanceOutcome, aws: Adapters, runtime: Runtime) -> str | None:
    """For a reclaim through an Auto Scaling group: why the group cannot be scaled in by this instance now."""
    for action in outcome.decision.enforced_actions():
        if isinstance(action, Terminate) and action.via == "autoscaling":
            if aws.groups is None:
                return "no Auto Scaling client configured"
            capacity = aws.groups.capacity(str(action.group), outcome.instance.id)
            if capacity is None:
                return f"Auto Scaling group {action.group} no longer exists"
            return capacity.refusal(outcome.instance.id, runtime.policy.fleet.fleet_tags)
    return None


def settle(
    outcome: InstanceOutcome,
    event: GovernorEvent,
    runtime: Runtime,
    aws: Adapters,
    now: dt.datetime | None = None,
    recheck: Assessment | None = None,
    box: Outbox | None = None,
    later: runner.Later | None = None,
) -> tuple[list[str], Mark | None]:
    """Act, through the runner, on the enforced actions of one recorded decision, re-reading the instance (and its
    metrics, when the sweep re-read them) before anything destructive.

    Returns what was done and the mark to keep for the next sweep (a checkpoint adds its command id to it). With
    ``box``, a stop or terminate stages its finding the moment it is done (under :func:`reclaim_finding_id`): a
    failure later in the invocation (a tag, a ledger write) leaves it in the outbox, which the retry or the next
    sweep publishes, and the exception carries what was done (``governor_done``) for the ledger. With ``later``, the
    outcome records of a decision that only tags are left to the sweep's batched write; a checkpoint, stop or
    terminate is recorded the moment it is done.
    """
    at = now or event.time
    decision = outcome.decision
    if not any(a.type in ("tag", "untag", "checkpoint", "stop", "terminate") for a in decision.enforced_actions()):
        return [], outcome.mark
    kept = {"mark": outcome.mark}

    def reread(decided: Decision) -> runner.Gate:
        if not _destructive(outcome):
            return runner.Go()
        live = aws.instances.instance(outcome.instance.id)
        why = _still_safe(outcome.instance, live, runtime, at)
        if why is None and recheck is not None and recheck.status != "idle":
            why = f"metrics re-read before acting say {recheck.status}: {'; '.join(recheck.reasons)}"
        if why is None:
            refusal = _group_refusal(outcome, aws, runtime)
            if not refusal:
                return runner.Go(live)
            reported = _held(decided, f"reported only: {refusal}", status="reported", rule="idle.reported")
            return runner.Hold(f"reported only: {refusal}", reported)
        skipped = _held(decided, f"not acted on after re-reading: {why}", status="idle", verdict="ok")
        return runner.Hold(f"skipped: {why}", skipped)

    done: list[str] = []
    done_actions: list[tuple[Action, Outcome]] = []
    spell = outcome.prior or outcome.mark

    def reclaim_finding(detail: str) -> Finding:
        finding = finding_for(decision, outcome.finding or "", outcome.instance, event, runtime)
        return finding.model_copy(
            update={
                "id": reclaim_finding_id(outcome.instance.id, spell, event.id),
                "detail": f"{finding.detail}; done: {detail}",
            }
        )

    def before(action: Action) -> Outcome | None:
        if through_cluster(action):
            return None  # a drain's findings are its transitions' (drain_sweep), never a staged "terminated"
        if action.type == "tag" and unfinished_drain(done_actions):
            return not_reclaimed()  # the idle-action tag waits until the node is reclaimed
        # Staged before the act, pending: an invocation killed between StopInstances' answer and anything it writes
        # after still leaves the finding, which the retry or the next sweep publishes once the instance's state
        # confirms the act (`resolve_pending`), or withdraws when it does not.
        if action.type in ("stop", "terminate") and box is not None and outcome.finding:
            box.add([reclaim_finding("; ".join([*done, f"{action.type} requested"]))], pending=action.type)
        return None

    def after(action: Action, result: Outcome) -> None:
        mark = kept["mark"]
        done_actions.append((action, result))
        if result.done:
            done.append(_idle_sentence(action, result))
        if through_cluster(action):
            if result.data.get("drain_active"):  # resumed next sweep: the spell's mark stays, no fresh warning
                kept["mark"] = outcome.prior
            return
        if action.type == "checkpoint" and mark is not None:
            status = "Pending" if result.data.get("delivered") else "Undeliverable"
            kept["mark"] = replace(mark, checkpoint_command_id=result.data.get("command_id"), checkpoint_status=status)
        if action.type in ("stop", "terminate") and box is not None and outcome.finding:
            if result.ok:  # carrying what the runner's re-read after acting saw (resolved only if stopped)
                box.add([reclaim_finding("; ".join(done)).model_copy(update={"verified": result.verified})])
            else:
                box.withdraw(reclaim_finding_id(outcome.instance.id, spell, event.id))

    # No outbox here: the sweep publishes its findings in one batch, warnings by their episode's id.
    # One checkpoint per idle spell, not per sweep: a later sweep of the same spell whose mark lost the command id (the
    # mark write failed after SendCommand, or a re-warn rebuilt the mark) looks the command up instead of resending.
    intent = f"idle-spell:{outcome.instance.id}:{spell.idle_since.isoformat()}" if spell is not None else None
    run = runner.Run(
        event.id,
        runtime.ledger,
        runtime.policy,
        aws,
        label="idle checkpoint",
        intent=intent,
        later=None if _destructive(outcome) else later,
    )
    try:
        settled = run.settle(decision, reread=reread, before=before, after=after, recorded=True)
    except Exception as error:  # what was done travels with it (``acts.DONE_ATTR``), read by the sweep's record
        if not getattr(error, acts.DONE_ATTR, None):
            setattr(error, acts.DONE_ATTR, list(done))
        raise
    if settled.held is None:
        return [_idle_sentence(action, result) for action, result in settled.results if result.done], kept["mark"]
    if settled.held.why.startswith("reported only"):
        return settled.done, replace(outcome.prior, reported_at=at) if outcome.prior else None
    return settled.done, outcome.prior


def _held(decision: Decision, reason: str, *, status: str, **update: Any) -> Decision:
    """The decision as recorded when the re-read holds the action back: nothing enforced, and why."""
    return decision.model_copy(
        update={
            "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
            "reasons": [*decision.reasons, reason],
            "evidence": {**decision.evidence, "status": status},
            **update,
        }
    )


def _idle_sentence(action: Action, result: Outcome) -> str:
    if action.type == "checkpoint" and not result.ok:
        return f"{result.done}; acting on the next sweep without it"
    return result.done
