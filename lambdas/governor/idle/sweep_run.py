"""The sweep, one pass: gather (:mod:`governor.idle.gather`), decide once for the fleet
(:func:`governor.idle.sweep.sweep`, pure; its breaker written with a conditional write), record every verdict, carry
out what is enforced (:mod:`governor.idle.carry_out`), then publish the findings and keep the marks. Calls go one
way: this module calls the rooms below it, and none of them calls back.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

from governor import acts, runner
from governor.domain.breaker import BREAKER_KEY, LAST_SWEEP_KIND, read_breaker, write_breaker
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import Instance
from governor.events.envelopes import GovernorEvent
from governor.idle.act_records import confirm_reclaims
from governor.idle.carry_out import mark_item, recheck_metrics, resolve_pending, settle
from governor.idle.decide import InstanceOutcome
from governor.idle.digest import digest_warnings, warning_accepted
from governor.idle.domain import MARK_KIND, POLICY, RESUMED, Assessment, Mark, sweep_interval
from governor.idle.gather import Gathered, gather
from governor.idle.kubernetes.drain_sweep import drain_finding, follow_up
from governor.idle.money import stopped_billing
from governor.idle.offers import offer_idle, unused_reservations
from governor.idle.ports import Adapters
from governor.idle.provenance import annotated
from governor.idle.sweep import SweepPlan, sweep
from governor.idle.tags import ignored_tags
from governor.idle.tell import finding_for, reclaim_finding_id, warning_finding_id
from governor.observability import logger, metrics
from governor.outbox import Outbox, finding_id
from governor.runtime import Runtime


def skip_stale(event: GovernorEvent, runtime: Runtime, now: dt.datetime) -> dict[str, Any] | None:
    """A sweep event older than one interval (an async retry, a DLQ replay) acts on nothing: recorded as skipped."""
    interval = sweep_interval(runtime.policy.idle)
    age = now - event.time
    if age <= interval:
        return None
    minutes = age.total_seconds() / 60
    reason = (
        f"sweep scheduled at {event.time.isoformat()} arrived {minutes:.0f} min late, more than one interval "
        f"({interval.total_seconds() / 60:g} min): skipped, nothing judged or acted on; the next scheduled sweep "
        "judges fresh data"
    )
    runtime.ledger.record(
        Decision(
            policy=POLICY,
            verdict="ignored",
            resource="gpu-fleet",
            reasons=[reason],
            evidence={"status": "skipped", "event_time": event.time.isoformat(), "age_minutes": round(minutes, 1)},
            rule="idle.skipped",
        ),
        event_id=event.id,
    )
    metrics.add_metric(name="IdleSweepsSkipped", unit="Count", value=1)
    logger.warning("idle sweep skipped: stale event", extra={"event_id": event.id, "age_minutes": round(minutes, 1)})
    return {"status": "skipped", "event_id": event.id, "reason": reason}


#: How often a sweep re-reads and re-plans when the breaker changed under it (an operator's re-arm, another sweep).
BREAKER_ATTEMPTS = 5


def plan_with_breaker(seen: Gathered, runtime: Runtime, now: dt.datetime, interval: dt.timedelta) -> SweepPlan:
    """The sweep's plan, its breaker state written with a conditional write on the version it was planned from.

    A write that loses (``governor idle rearm`` or an overlapping sweep wrote in between) re-reads the breaker and
    plans again from it: an operator's re-arm is never undone by a sweep that read the state before it, and two
    overlapping sweeps trip the breaker (and raise its critical finding) once.
    """
    for _ in range(BREAKER_ATTEMPTS):
        breaker, version = read_breaker(runtime.ledger)
        plan: SweepPlan = sweep(
            seen.instances,
            seen.signals,
            seen.marks,
            runtime.policy,
            now,
            interval=interval,
            breaker=breaker,
            statistics=seen.statistics,
        )
        if plan.breaker == breaker or write_breaker(runtime.ledger, plan.breaker, version):
            return plan
        logger.info("idle breaker changed during the sweep: planned again from its new state")
    raise RuntimeError(f"idle breaker: still contended after {BREAKER_ATTEMPTS} attempts; Lambda retries the sweep")


def run_sweep(event: GovernorEvent, runtime: Runtime, aws: Adapters) -> dict[str, Any]:
    """List, read, decide at the clock's time, record every verdict, then act within the rate limit and report.

    A late event is judged now, not at its own time. An event stamped ahead of the clock (clock skew, a forged or
    mistyped replay) is judged at the function's clock too: judged at its own time there would be no samples from then,
    every instance would read unmonitored and lose its idle mark (a second warning under a new id, the stop delayed).
    """
    now = aws.clock()
    if event.time > now:
        logger.warning(
            "idle sweep stamped ahead of the clock: judged now",
            extra={"event_id": event.id, "event_time": event.time.isoformat(), "now": now.isoformat()},
        )
    skipped = skip_stale(event, runtime, now)
    if skipped is not None:
        return skipped
    seen = gather(event, runtime, aws, now)
    interval = sweep_interval(runtime.policy.idle)
    plan = annotated(plan_with_breaker(seen, runtime, now, interval), aws.metrics)
    runtime.ledger.record_many([outcome.decision for outcome in plan.outcomes], event_id=event.id)
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id, clock=aws.clock, resolve=resolve_pending(aws))
    box.resume()  # a retried sweep publishes what its earlier attempt staged
    # and what any function left unsent: the idle sweep is the one schedule every deployment runs (every 15 minutes),
    # so a Spot finding whose event was parked and whose instance is gone is still delivered without a replay
    box.flush_stale()
    # and writes the outcome of any act whose invocation ended before recording it (``governor.acts``)
    acts.repair(runtime.ledger, now=now, event_id=event.id, confirm=confirm_reclaims(aws.instances))
    findings = unused_reservations(event, runtime, seen.active, now, seen.instances)
    findings += stopped_billing(event, runtime, aws, now)
    findings += _fleet_findings(plan, seen, event, runtime, now)
    carry = _Carry(event, runtime, aws, box, now, seen.stored, recheck_metrics(plan.outcomes, runtime, aws, now))
    for outcome in plan.outcomes:
        carry.one(outcome)
    findings += carry.findings
    drained, said = follow_up(
        plan.outcomes, runtime.ledger, aws, event.id, now, lambda d, t, i: finding_for(d, t, i, event, runtime)
    )
    runtime.ledger.record_many(drained, event_id=event.id)
    findings.extend(said)
    carry.publish(findings)
    return _summary(event, runtime, plan, seen.instances, carry.done, now)


def _fleet_findings(
    plan: SweepPlan, seen: Gathered, event: GovernorEvent, runtime: Runtime, now: dt.datetime
) -> list[Finding]:
    """What the sweep says of the fleet beside each instance's decision, each recorded first: governor tags not
    honoured, the breaker's trip (and its re-arm or renewal, recorded only), idle reserved capacity offered."""
    findings: list[Finding] = []
    by_id = {i.id: i for i in seen.instances}
    for ignored in ignored_tags(seen.instances, seen.stored, runtime.policy, now):
        runtime.ledger.record(ignored, event_id=event.id)
        title = f"Governor tags ignored on {ignored.resource}: {len(ignored.reasons)} not honoured"
        findings.append(finding_for(ignored, title, by_id.get(ignored.resource), event, runtime))
    if plan.alarm is not None:
        runtime.ledger.record(plan.alarm, event_id=event.id)
        held = len(plan.breaker.held)
        title = f"Idle circuit breaker tripped: {held} GPU instances turned idle together; none will be reclaimed"
        findings.append(finding_for(plan.alarm, title, None, event, runtime))
        metrics.add_metric(name="IdleActionsHeldBack", unit="Count", value=held)
        logger.warning("idle circuit breaker tripped", extra={"held": held, "fleet": plan.fleet_size})
    if plan.rearmed is not None:
        runtime.ledger.record(plan.rearmed, event_id=event.id)
        logger.info("idle circuit breaker re-armed", extra={"why": plan.rearmed.reasons[0]})
    if plan.renewed is not None:
        runtime.ledger.record(plan.renewed, event_id=event.id)
        logger.warning("idle circuit breaker hold renewed", extra={"held": len(plan.breaker.held)})
    return findings + offer_idle(event, runtime, plan.outcomes, now)


@dataclass
class _Carry:
    """Carrying out the plan, instance by instance: what was done, the findings owed, the warnings waiting for the
    bus to accept them, and the marks to write (with the tags' outcome records, in one batch after the loop)."""

    event: GovernorEvent
    runtime: Runtime
    aws: Adapters
    box: Outbox
    now: dt.datetime
    stored: dict[str, Mark]
    rechecked: dict[str, Assessment]
    # The tags' outcome records and the marks are written together after the loop, before any finding is staged or
    # published (BatchWriteItem, not one PutItem per warning); a crash before that write repeats the tags and the
    # marks on the retry, and a checkpoint lost from a mark is found again through its intent.
    later: runner.Later = field(default_factory=runner.Later)
    done: dict[str, list[str]] = field(default_factory=dict)
    warnings: dict[str, tuple[str, Mark]] = field(default_factory=dict)  # instance -> (finding id, mark to publish)
    marks_due: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def one(self, outcome: InstanceOutcome) -> None:
        """Settle one decision, then note its finding, its warning and the mark to keep."""
        instance_id = outcome.instance.id
        result, mark = self._settle(outcome)
        if result:
            self.done[instance_id] = result
        published = not any(s.startswith(("skipped", "failed")) for s in result)
        warning_id = None
        if outcome.outcome == "warned" and mark is not None and outcome.finding and published:
            # The warning period starts when the bus accepts the warning, not when it is decided: until then the
            # mark has no ``warned_at`` and every sweep warns again (same finding id, so one message downstream).
            warning_id = warning_finding_id(instance_id, mark, self.runtime.policy.idle.enforce)
            mark = replace(mark, warned_at=None)
            self.warnings[instance_id] = (warning_id, mark)
        if outcome.decision.rule == RESUMED:
            self._withdraw(outcome)
        if mark != self.stored.get(instance_id) and (mark is not None or instance_id in self.stored):
            self.marks_due.append((MARK_KIND, instance_id, mark_item(instance_id, mark, self.now)))
        if outcome.finding and published and outcome.decision.rule != RESUMED:
            told = self._told(outcome, result, warning_id)
            if told is not None:
                self.findings.append(told)

    def _settle(self, outcome: InstanceOutcome) -> tuple[list[str], Mark | None]:
        instance_id = outcome.instance.id
        rechecked = self.rechecked.get(instance_id)
        try:
            return settle(outcome, self.event, self.runtime, self.aws, self.now, rechecked, self.box, self.later)
        except Exception as error:  # one instance's failure must not stop the sweep; the next sweep retries it
            logger.exception("idle action failed", extra={"instance_id": instance_id, "event_id": self.event.id})
            metrics.add_metric(name="IdleActionFailures", unit="Count", value=1)
            # What was done before the failure stays on the record (a stop that happened is not "failed" alone);
            # its finding is already staged in ``box`` and goes out with the sweep's.
            earlier = list(getattr(error, "governor_done", []))
            result = [*earlier, f"failed: {error.__class__.__name__}: {error}"]
            self.runtime.ledger.record(
                outcome.decision.model_copy(update={"evidence": {**outcome.decision.evidence, "done": result}}),
                event_id=self.event.id,
            )
            return result, outcome.prior

    def _withdraw(self, outcome: InstanceOutcome) -> None:
        """Staged before the warned mark is cleared: a sweep that dies in between still withdraws the warning (its
        retry finds the mark gone and would not know of it). One id per episode."""
        if not outcome.finding or outcome.prior is None:
            return
        finding = finding_for(outcome.decision, outcome.finding, outcome.instance, self.event, self.runtime)
        episode = f"idle-resumed#{outcome.prior.idle_since.isoformat()}"
        self.box.add([finding.model_copy(update={"id": finding_id(episode, outcome.instance.id, RESUMED)})])
        metrics.add_metric(name="IdleWarningsWithdrawn", unit="Count", value=1)

    def _told(self, outcome: InstanceOutcome, result: list[str], warning_id: str | None) -> Finding | None:
        """The finding of one settled decision: what was done, under its episode's or spell's id."""
        instance_id = outcome.instance.id
        title = outcome.finding or ""
        if any(s.startswith("reported only") for s in result):
            title = f"Idle GPU instance {instance_id} ({outcome.instance.type}) reported, not reclaimed"
        finding = finding_for(outcome.decision, title, outcome.instance, self.event, self.runtime)
        if result:
            finding = finding.model_copy(update={"detail": f"{finding.detail}; done: {'; '.join(result)}"})
        if warning_id:
            finding = finding.model_copy(update={"id": warning_id})
        elif outcome.outcome == "acted" and any(s.startswith(("stopped", "terminated")) for s in result):
            spell = outcome.prior or outcome.mark
            finding = finding.model_copy(update={"id": reclaim_finding_id(instance_id, spell, self.event.id)})
        return drain_finding(finding, outcome, self.runtime.ledger, self.event.id)  # a drain says only what happened

    def publish(self, findings: list[Finding]) -> None:
        """Write the marks (with the tags' records), publish the findings, one message per owner per sweep (an owner's
        warnings also travel in one digest, the dearest first), and start each accepted warning's period."""
        ledger = self.runtime.ledger
        self.later.items.extend(self.marks_due)
        self.later.write(ledger)
        findings, digested = digest_warnings(findings, self.event.id)
        self.box.add(findings)
        accepted = self.box.flush(raise_on_failure=False)  # what is not accepted stays in the outbox for the next sweep
        published_warning = warning_accepted(accepted, digested)
        warned_marks = []
        for instance_id, (warning_id, mark) in self.warnings.items():
            if published_warning(warning_id):
                at = accepted[digested.get(warning_id, warning_id)]
                warned = mark_item(instance_id, replace(mark, warned_at=at), self.now)
                warned_marks.append((MARK_KIND, instance_id, warned))
            else:
                metrics.add_metric(name="IdleWarningsUnpublished", unit="Count", value=1)
        ledger.put_many(warned_marks)


def _summary(
    event: GovernorEvent,
    runtime: Runtime,
    plan: SweepPlan,
    instances: list[Instance],
    done: dict[str, list[str]],
    now: dt.datetime,
) -> dict[str, Any]:
    """The sweep's counts, as metrics, a log line, the ledger's last-sweep item and the invocation's answer."""
    counts: dict[str, int] = {}
    for outcome in plan.outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    for name, metric in (
        ("warned", "IdleWarnings"),
        ("acted", "IdleActions"),
        ("unmonitored", "UnmonitoredGpus"),
        ("deferred", "IdleActionsDeferred"),
    ):
        metrics.add_metric(name=metric, unit="Count", value=counts.get(name, 0))
    logger.info("idle sweep", extra={"instances": len(instances), "outcomes": counts})
    runtime.ledger.put_item(
        LAST_SWEEP_KIND,
        BREAKER_KEY,
        {"event_id": event.id, "judged_at": now.isoformat(), "instances": len(instances), "outcomes": counts},
    )
    return {
        "status": "swept",
        "event_id": event.id,
        "judged_at": now.isoformat(),
        "instances": len(instances),
        "outcomes": counts,
        "held_back": plan.held_back,
        "deferred": plan.deferred,
        "breaker": "open" if plan.breaker.open else "closed",
        "done": done,
    }
