"""Stop now's handler side: check the click's record, read (the instance, its breaker, its mark, fresh metrics),
decide (:func:`governor.idle.stop_now.decide_stop_now`, pure), record, settle as a sweep would, and answer Slack.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor import runner
from governor.domain.capacity import with_hyperpod, with_reservations
from governor.domain.decision import Decision
from governor.idle.carry_out import resolve_pending, settle, store_mark
from governor.idle.domain import MARK_KIND, POLICY, Mark
from governor.idle.events import StopRequestEvent
from governor.idle.gather import bounded, load_breaker, read_signals, refresh_checkpoints
from governor.idle.ports import Adapters
from governor.idle.purchase import checkpoint_command
from governor.idle.stop_now import StopFacts, decide_stop_now, too_old
from governor.idle.tell import finding_for, reclaim_finding_id
from governor.observability import logger, metrics
from governor.outbox import Outbox
from governor.runtime import Runtime


def stop_now(event: StopRequestEvent, runtime: Runtime, aws: Adapters, account: str | None = None) -> dict[str, Any]:
    """Stop now from Slack: the sweep's act path for one instance, without waiting for the warning to run out.

    Read (the instance, its breaker, its mark, fresh metrics), decide (:func:`governor.idle.stop_now.decide_stop_now`,
    pure), record the decision naming who asked, then ``settle`` re-reads once more and acts exactly as a sweep would.
    Enforced only when ``idle.enforce`` is. The click's record (:mod:`governor.idle.stop_record`) is checked first at
    this function's clock and in its ``account``, and marked used when the click is answered.
    """
    from governor.domain.messages import updated_message
    from governor.idle import stop_record

    now = aws.clock()  # a click stamped ahead of the clock is judged now, as a sweep is
    request = stop_record.verified(runtime.ledger, event.id, event.detail.model_dump(), now=now, account=account)
    if isinstance(request, str):
        return _unverified_stop(event, runtime, request)
    instance_id = request.instance_id
    idle = runtime.policy.idle
    who = request.who
    blocks = event.detail.message_blocks
    clicked_at = request.clicked_at or event.time

    def finish(status: str, note: str) -> dict[str, Any]:
        stop_record.mark_used(runtime.ledger, event.id, request, now, status)
        aws.respond(request.response_url, updated_message(blocks, request.token, note))
        return {"status": status, "event_id": event.id, "instance": instance_id, "note": note}

    facts, stored = None, None
    if not too_old(clicked_at, now):
        earlier = _reclaimed_by(runtime, instance_id, event.id)
        if earlier is not None:  # a retry after this request's own stop: report it, do not refuse "it is stopped now"
            box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
            box.resume()
            box.flush()
            if runtime.ledger.get_item(MARK_KIND, instance_id):
                store_mark(runtime, instance_id, None, now)
            return finish(earlier, f"{instance_id} {earlier} for {who}")
        facts, stored = _stop_facts(instance_id, runtime, aws, now)
    plan = decide_stop_now(request, clicked_at, facts, runtime.policy, now)
    runtime.ledger.record(plan.decision, event_id=event.id)
    if plan.outcome is None:
        metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
        return finish("refused", f"Not stopped: {plan.refusal} (Stop now by {who})")
    if plan.kind == "checkpoint":
        done, kept = settle(plan.outcome, event, runtime, aws, now, plan.assessment)
        if kept != stored:
            store_mark(runtime, instance_id, kept, now)
        return finish(
            "checkpointing",
            f"{'; '.join(done) or 'checkpoint recorded'} for {who}: click Stop now again once it has finished",
        )
    verb = plan.verb
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
    box.resume()
    done, _ = settle(plan.outcome, event, runtime, aws, now, plan.assessment, box)
    if any(s.startswith(("skipped", "reported only", "not drained")) for s in done):
        metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
        return finish("refused", f"Not {verb}: {'; '.join(done)} (Stop now by {who})")
    if not idle.enforce:
        return finish("report-only", f"Would be {verb} now for {who} (idle is report-only: nothing changed)")
    if stored is not None:
        store_mark(runtime, instance_id, None, now)
    finding = finding_for(plan.decision, plan.outcome.finding or "", plan.outcome.instance, event, runtime)
    box.add(
        [
            finding.model_copy(
                update={
                    "id": reclaim_finding_id(instance_id, plan.mark, event.id),
                    "detail": f"{finding.detail}; done: {'; '.join(done)}",
                }
            )
        ]
    )
    box.flush()
    metrics.add_metric(name="IdleActions", unit="Count", value=1)
    return finish(verb, f"{instance_id} {verb} for {who}")


def _stop_facts(instance_id: str, runtime: Runtime, aws: Adapters, now: dt.datetime) -> tuple[StopFacts, Mark | None]:
    """What Stop now decides on, read at ``now``, and the ledger's mark as stored (to know whether to rewrite it)."""
    live = aws.instances.instance(instance_id)
    if live is None or live.state != "running":
        return StopFacts(live), None
    policy = runtime.policy
    live = bounded(live, runtime, now)
    live = with_hyperpod(with_reservations([live], aws.reservations)[0], aws.hyperpod)[0][0]
    item = runtime.ledger.get_item(MARK_KIND, instance_id)
    stored = Mark.from_item(item) if item else None
    marks = {instance_id: stored} if stored is not None else {}
    if checkpoint_command(live, policy):
        refresh_checkpoints(marks, aws)
    signals = read_signals([live], runtime, aws, now)
    breaker = load_breaker(runtime).open
    return StopFacts(live, breaker, marks.get(instance_id), signals.get(instance_id, {})), stored


def _reclaimed_by(runtime: Runtime, instance_id: str, event_id: str) -> str | None:
    """ "stopped" / "terminated" when an earlier attempt of this request already did it (its outcome is recorded)."""
    for action, verb in (("stop", "stopped"), ("terminate", "terminated")):
        item = runtime.ledger.get_item(runner.ACTION_KIND, f"{instance_id}#{event_id}#{action}")
        if item and item.get("ok"):
            return verb
    return None


def _unverified_stop(event: StopRequestEvent, runtime: Runtime, why: str) -> dict[str, Any]:
    """Recorded and refused; nothing is read, changed or posted (the invocation's ``response_url`` is no Slack word)."""
    runtime.ledger.record(
        Decision(
            policy=POLICY,
            verdict="ignored",
            resource=event.detail.instance_id,
            reasons=[f"Stop now not done: {why}"],
            evidence={"status": "stop-now-unverified", "claimed_requested_by": event.detail.requested_by},
            severity="warning",
            rule="idle.stop-now-unverified",
        ),
        event_id=event.id,
    )
    metrics.add_metric(name="IdleStopNowRefused", unit="Count", value=1)
    logger.warning("Stop now request refused", extra={"event_id": event.id, "reason": why})
    return {"status": "refused", "event_id": event.id, "reason": why}
