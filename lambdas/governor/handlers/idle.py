"""The ``idle`` function: a scheduled sweep that reclaims GPU instances every signal says are idle.

One paginated DescribeInstances, batched GetMetricData, then the pure idle policy for every instance. Each verdict is
recorded before anything changes; destructive actions re-read the instance first; warnings and actions go to the
``governor`` bus; a sweep over the blast radius acts on nothing and raises a critical finding.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from governor.adapters.cloudwatch import CloudWatchMetrics
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.domain.decision import Action, Decision, Finding
from governor.domain.fleet import Instance, checkpoint_choice, exemption, ownership, snoozed_until, tag_problems
from governor.domain.idle import (
    CHECKPOINT_DONE,
    IDLE_SINCE_TAG,
    MARK_KIND,
    InstanceOutcome,
    Mark,
    MetricSource,
    SweepPlan,
    mark_tag_problems,
    required_signals,
    sweep,
)
from governor.events.envelopes import GovernorEvent, InvalidEventError, parse_model
from governor.handlers._runtime import Runtime, default_runtime, idempotent_on_event_id, run_edge
from governor.observability import logger, metrics, tracer

SCHEDULED = "Scheduled Event"
SCHEDULE_SOURCES = ("aws.scheduler", "aws.events")
MARK_TTL = dt.timedelta(days=2)


@dataclass
class IdleAws:
    """The AWS reads and writes the sweep uses; tests pass the same classes pointed at moto, or fakes."""

    instances: Ec2Reader
    actions: Ec2Actions
    metrics: MetricSource
    commands: SsmCommands


@cache
def _aws(region: str | None) -> IdleAws:
    return IdleAws(Ec2Reader(region), Ec2Actions(region), CloudWatchMetrics(region), SsmCommands(region))


def parse(raw: Any) -> GovernorEvent:
    """Only the sweep's Scheduled Event is accepted; anything else goes to the DLQ with the reason."""
    event = parse_model(GovernorEvent, raw)
    if event.detail_type != SCHEDULED or event.source not in SCHEDULE_SOURCES:
        raise InvalidEventError(
            f"unsupported event {event.source}/{event.detail_type!r}: the idle function runs on its schedule only",
            event.id,
        )
    return event


def load_marks(runtime: Runtime) -> dict[str, Mark]:
    """Every live mark in one ledger query (never one read per instance)."""
    marks: dict[str, Mark] = {}
    for item in runtime.ledger.query_kind(MARK_KIND):
        mark = Mark.from_item(item)
        instance_id = item.get("instance_id")
        if mark is not None and isinstance(instance_id, str):
            marks[instance_id] = mark
    return marks


def _store_mark(runtime: Runtime, instance_id: str, mark: Mark | None, now: dt.datetime) -> None:
    item: dict[str, Any] = mark.to_item(instance_id) if mark else {"instance_id": instance_id, "idle_since": None}
    item["expires_at"] = int((now + MARK_TTL).timestamp())
    runtime.ledger.put_item(MARK_KIND, instance_id, item)


def _refresh_checkpoints(marks: dict[str, Mark], aws: IdleAws) -> None:
    """Ask SSM how pending checkpoint commands ended, so the domain knows whether to act or wait."""
    for instance_id, mark in list(marks.items()):
        if mark.checkpoint_command_id and mark.checkpoint_status not in CHECKPOINT_DONE:
            status = aws.commands.status(mark.checkpoint_command_id, instance_id)
            marks[instance_id] = replace(mark, checkpoint_status=status)


def _still_safe(instance: Instance, live: Instance | None, runtime: Runtime, now: dt.datetime) -> str | None:
    """Why acting is no longer right after re-reading the instance, or None when it still is."""
    if live is None:
        return f"{instance.id} no longer exists"
    if live.state != "running":
        return f"{instance.id} is {live.state} now"
    if live.launch_time != instance.launch_time:
        return f"{instance.id} was restarted at {live.launch_time.isoformat()}"
    why = exemption(live.id, live.tags, runtime.policy.fleet, runtime.policy.idle.exemptions, now)
    if why:
        return f"{instance.id} became exempt: {why}"
    snooze = snoozed_until(live.tags, runtime.policy.fleet, now)
    if snooze:
        return f"{instance.id} was snoozed until {snooze.isoformat()}"
    return None


def _perform(
    outcome: InstanceOutcome, action: Action, aws: IdleAws, runtime: Runtime, now: dt.datetime
) -> tuple[str, Mark | None]:
    """Do one enforced action; returns what was done and the mark to keep (a checkpoint adds its command id)."""
    instance = outcome.instance
    details = action.model_dump()
    mark = outcome.mark
    if action.type == "tag":
        aws.actions.tag(instance.id, details.get("tags") or {})
        if details.get("remove"):
            aws.actions.untag(instance.id, details["remove"])
        return f"tagged {', '.join(f'{k}={v}' for k, v in (details.get('tags') or {}).items())}", mark
    if action.type == "untag":
        aws.actions.untag(instance.id, details.get("keys") or [IDLE_SINCE_TAG])
        return f"removed {', '.join(details.get('keys') or [IDLE_SINCE_TAG])}", mark
    if action.type == "checkpoint":
        result = aws.commands.send(instance.id, details["command"], int(details["timeout"]), "governor idle checkpoint")
        if mark is not None:
            status = "Pending" if result.delivered else "Undeliverable"
            mark = replace(mark, checkpoint_command_id=result.command_id, checkpoint_status=status)
        if result.delivered:
            return f"checkpoint command {result.command_id} sent", mark
        return f"checkpoint not delivered ({result.error}); acting on the next sweep without it", mark
    if action.type == "stop":
        aws.actions.stop(instance.id)
        return "stopped", mark
    if action.type == "terminate":
        aws.actions.terminate(instance.id)
        return "terminated", mark
    return "", mark


def settle(
    outcome: InstanceOutcome, event: GovernorEvent, runtime: Runtime, aws: IdleAws
) -> tuple[list[str], Mark | None]:
    """Act on the enforced actions of one recorded decision, re-reading the instance before anything destructive.

    Returns what was done and the mark to keep for the next sweep.
    """
    now = event.time
    decision = outcome.decision
    enforced = decision.enforced_actions()
    mark = outcome.mark
    if not any(a.type in ("tag", "untag", "checkpoint", "stop", "terminate") for a in enforced):
        return [], mark
    if any(a.type in ("checkpoint", "stop", "terminate") for a in enforced):
        why = _still_safe(outcome.instance, aws.instances.instance(outcome.instance.id), runtime, now)
        if why:
            runtime.ledger.record(
                decision.model_copy(
                    update={
                        "verdict": "ok",
                        "actions": [a.model_copy(update={"enforced": False}) for a in decision.actions],
                        "reasons": [*decision.reasons, f"not acted on after re-reading: {why}"],
                        "evidence": {**decision.evidence, "status": "idle"},
                    }
                ),
                event_id=event.id,
            )
            return [f"skipped: {why}"], outcome.prior
    done: list[str] = []
    for action in enforced:
        if action.type in ("warn", "notify"):
            continue
        sentence, mark = _perform(replace(outcome, mark=mark), action, aws, runtime, now)
        if sentence:
            done.append(sentence)
    if done:
        runtime.ledger.record(
            decision.model_copy(update={"evidence": {**decision.evidence, "done": done}}), event_id=event.id
        )
    return done, mark


def _finding(
    decision: Decision, title: str, instance: Instance | None, event: GovernorEvent, runtime: Runtime
) -> Finding:
    who = ownership(instance.tags, runtime.policy.fleet) if instance else None
    return Finding.from_decision(
        decision,
        title,
        owner=who.owner if who else None,
        team=who.team if who else None,
        account=event.account,
        region=event.region or runtime.region,
        event_id=event.id,
    )


def ignored_tags(
    instances: list[Instance], stored: dict[str, Mark], runtime: Runtime, now: dt.datetime
) -> list[Decision]:
    """One decision per instance whose governor tags were not honoured: bad or unbounded exemptions and snoozes,
    marks the ledger does not back, checkpoint names outside the allow-list. Each becomes a finding, so a tag meant to
    steer the governor is seen by people instead of silently obeyed or silently dropped."""
    fleet = runtime.policy.fleet
    decisions = []
    for instance in instances:
        problems = [str(p) for p in tag_problems(instance.tags, fleet, now)]
        problems += [str(p) for p in mark_tag_problems(instance, stored.get(instance.id), now)]
        choice = checkpoint_choice(instance.tags, fleet, runtime.policy.idle.checkpoint_command)
        if choice.problem:
            problems.append(choice.problem)
        if not problems:
            continue
        decisions.append(
            Decision(
                policy="idle",
                verdict="act",
                resource=instance.id,
                actions=[Action(type="notify", enforced=runtime.policy.idle.enforce)],
                reasons=problems,
                evidence={"status": "tags-ignored", "tags": {k: v for k, v in instance.tags.items() if ":" in k}},
                severity="warning",
                rule="idle.tags-ignored",
            )
        )
    return decisions


def run_sweep(event: GovernorEvent, runtime: Runtime, aws: IdleAws) -> dict[str, Any]:
    """List, read, decide, record every verdict, then act within the blast radius and report."""
    now = event.time
    policy = runtime.policy
    instances = aws.instances.gpu_instances(policy.fleet)
    start = now - dt.timedelta(minutes=policy.idle.window_minutes)
    signals = aws.metrics.fetch([i.id for i in instances], required_signals(policy.idle), start, now)
    stored = load_marks(runtime)
    marks = dict(stored)
    _refresh_checkpoints(marks, aws)
    plan: SweepPlan = sweep(instances, signals, marks, policy, now)
    for outcome in plan.outcomes:
        runtime.ledger.record(outcome.decision, event_id=event.id)
    findings: list[Finding] = []
    by_id = {i.id: i for i in instances}
    for ignored in ignored_tags(instances, stored, runtime, now):
        runtime.ledger.record(ignored, event_id=event.id)
        title = f"Governor tags ignored on {ignored.resource}: {len(ignored.reasons)} not honoured"
        findings.append(_finding(ignored, title, by_id.get(ignored.resource), event, runtime))
    if plan.alarm is not None:
        runtime.ledger.record(plan.alarm, event_id=event.id)
        title = f"Idle sweep held back {plan.held_back} actions: over the blast radius, nothing was stopped"
        findings.append(_finding(plan.alarm, title, None, event, runtime))
        metrics.add_metric(name="IdleActionsHeldBack", unit="Count", value=plan.held_back)
        logger.warning("idle blast radius", extra={"held_back": plan.held_back, "fleet": plan.fleet_size})
    done: dict[str, list[str]] = {}
    for outcome in plan.outcomes:
        instance_id = outcome.instance.id
        try:
            result, mark = settle(outcome, event, runtime, aws)
        except Exception as error:  # one instance's failure must not stop the sweep; the next sweep retries it
            logger.exception("idle action failed", extra={"instance_id": instance_id, "event_id": event.id})
            metrics.add_metric(name="IdleActionFailures", unit="Count", value=1)
            result, mark = [f"failed: {error.__class__.__name__}: {error}"], outcome.prior
            runtime.ledger.record(
                outcome.decision.model_copy(update={"evidence": {**outcome.decision.evidence, "done": result}}),
                event_id=event.id,
            )
        if result:
            done[instance_id] = result
        if mark != stored.get(instance_id) and (mark is not None or instance_id in stored):
            _store_mark(runtime, instance_id, mark, now)
        if outcome.finding and not any(s.startswith(("skipped", "failed")) for s in result):
            finding = _finding(outcome.decision, outcome.finding, outcome.instance, event, runtime)
            if result:
                finding = finding.model_copy(update={"detail": f"{finding.detail}; done: {'; '.join(result)}"})
            findings.append(finding)
    if findings:
        runtime.sink.publish(findings)
    counts: dict[str, int] = {}
    for outcome in plan.outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    for name, metric in (("warned", "IdleWarnings"), ("acted", "IdleActions"), ("unmonitored", "UnmonitoredGpus")):
        metrics.add_metric(name=metric, unit="Count", value=counts.get(name, 0))
    logger.info("idle sweep", extra={"instances": len(instances), "outcomes": counts})
    return {
        "status": "swept",
        "event_id": event.id,
        "instances": len(instances),
        "outcomes": counts,
        "held_back": plan.held_back,
        "done": done,
    }


@idempotent_on_event_id()
def process(
    *, event: dict[str, Any], parsed: GovernorEvent, runtime: Runtime, aws: IdleAws, context: Any = None
) -> dict[str, Any]:
    """Side effects run once per schedule execution id (Powertools Idempotency when the stack provides the table).

    ``context`` lets the idempotency record of a sweep that times out expire with the invocation.
    """
    return run_sweep(parsed, runtime, aws)


def handle(event: Any, runtime: Runtime, aws: IdleAws | None = None, context: Any = None) -> dict[str, Any]:
    """Parse at the edge (bad input goes to the DLQ with its reason), then sweep."""

    def work(parsed: GovernorEvent, rt: Runtime) -> dict[str, Any]:
        return process(event=event, parsed=parsed, runtime=rt, aws=aws or _aws(rt.region), context=context)

    return run_edge(event, runtime, parse, work)


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """EventBridge Scheduler invokes this every ``idle.schedule`` (default 15 minutes)."""
    return handle(event, default_runtime(), context=context)
