"""The idle function under faults: a fleet swept on a schedule for two simulated hours, plus "Stop now" requests.

The sweep is not one event about one resource: every sweep judges the whole fleet, and what it may do depends on
what earlier sweeps got published. So instead of case-by-case comparison with a clean run, an episode runs on its
own emulator with a simulated clock and is checked against the rules themselves:

* an instance the sweep stops had its idle warning accepted by the bus at least ``idle.warning_minutes`` before
  (a "Stop now" request is a person's decision and is exempt from the wait, not from the re-checks);
* a checkpoint command (SSM ``SendCommand``, no client token) reaches each instance at most once;
* every sweep and request ends handled, with a decision in the ledger for each instance it judged, or parked in
  the function's DLQ; never neither;
* no busy instance is stopped; every idle instance's warning is published or held unsent in the outbox;
* every Stop now click Slack's endpoint accepted is answered: the instance stopped, or the refusal recorded with its
  reason. The clicks are the real thing: Slack's signed POST to the interactions Function URL (the person clicks
  again while Slack shows an error), its worker's run, then the idle function's, each hand-over taken from the
  Invoke calls that reached Lambda (a lost answer resent is delivered twice), on the simulated clock.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from governor.policy import Policy, parse_policy
from governor_cli.testing.deployment import REGION, Deployment, image_id
from governor_cli.testing.events import scheduled
from governor_cli.testing.faults import ApiCall, FaultInjector
from governor_cli.testing.idle_clock import clocked_idle
from governor_cli.testing.invariants import Verdict
from governor_cli.testing.scenarios import ACCOUNT, soak_policy_document

CHECKPOINT_TAG = "governor:checkpoint-command"
STOPPING = {"StopInstances", "TerminateInstances"}
STOP_RULES = ("idle.acted", "idle.stop-now")


def idle_policy() -> Policy:
    """Enforcing, no launch grace (the emulator's instances are minutes old), no breaker (a soak fleet turns idle
    all at once by construction), a checkpoint command before every stop."""
    raw = json.loads(json.dumps(soak_policy_document()))
    raw["idle"] = {
        "enforce": True,
        "launch_grace_minutes": 0,
        "max_fleet_percent": 100,
        "breaker_fleet_percent": 100,
        "breaker_min_instances": 10_000,
        "max_actions_per_sweep": 100,
        "window_minutes": 30,  # the shortest window: the emulator's GetMetricData scans every stored point
    }
    return parse_policy(raw, source="reliability policy (idle)")


@dataclass
class IdleEpisode:
    """What one episode did and broke, folded into its mode's row."""

    events: int = 0
    deliveries: int = 0
    handled: int = 0
    dlq: int = 0
    lost: int = 0
    stops: int = 0
    stops_without_warning: int = 0
    busy_stopped: int = 0
    not_stopped: int = 0
    checkpoints_resent: int = 0
    resent: int = 0
    undecided: int = 0
    warnings_expected: int = 0
    warnings_published: int = 0
    warnings_unsent: int = 0
    warnings_lost: int = 0
    replayed: int = 0
    slowest_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    stop_clicks: int = 0  # Slack's signed POSTs of Stop now (a person clicks again while Slack shows an error)
    stop_accepted: int = 0  # clicks the endpoint answered 200 (the person was told it is being handled)
    stop_stopped: int = 0  # instances a Stop now stopped
    stop_refused: int = 0  # accepted clicks answered with a recorded refusal (idle's re-checks, a second click held)
    stop_lost: int = 0  # accepted clicks nobody answered (no decision for them after the runbook)
    stop_labels: set[str] = field(default_factory=set)  # the idle function's Stop now deliveries
    stop_clicked: list[str] = field(default_factory=list)  # ids of the clicks the endpoint handed to its worker
    stop_function: str | None = None  # the function Slack's clicks reach (its DLQ is replayed by the runbook)
    notes: list[str] = field(default_factory=list)

    def clicked(self, event: dict[str, Any]) -> None:
        if str(event.get("id")) not in self.stop_clicked:
            self.stop_clicked.append(str(event.get("id")))


class _Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def _metrics(instance_id: str, utilisation: float, now: dt.datetime, before: int, ahead: int) -> None:
    from governor.adapters.aws import client

    cloudwatch = client("cloudwatch", REGION)
    for name, value in (("nvidia_smi_utilization_gpu", utilisation), ("nvidia_smi_memory_used", 12_288.0)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": now + dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(-before, ahead + 1)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])


def _launch(count: int, tags: dict[str, str]) -> list[str]:
    from governor.adapters.aws import client

    ec2 = client("ec2", REGION)
    image = image_id()
    chosen = {"owner": "alice@example.com", "team": "vision", "gpu-fleet": "true", **tags}
    found = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in chosen.items()]}],
    )
    return [str(i["InstanceId"]) for i in found["Instances"]]


def _sweep(at: dt.datetime) -> dict[str, Any]:
    return scheduled(account=ACCOUNT, region=REGION, time=at)


def _accepted_warnings(call: ApiCall, rules: tuple[str, ...] = ("idle.warned",)) -> list[str]:
    """Instances whose idle warning (or another of ``rules``) this PutEvents call got accepted by the bus."""
    if call.operation != "PutEvents" or call.executed == 0 or not call.ok or "failed_entries" in call.faults:
        return []
    found = []
    for entry in call.params.get("Entries") or []:
        try:
            detail = json.loads(entry.get("Detail") or "{}")
        except ValueError:
            continue
        if detail.get("policy") == "idle" and detail.get("rule") in rules:
            found.append(str(detail.get("resource")))
    return found


def _targets(call: ApiCall) -> list[str]:
    ids = call.params.get("InstanceIds") or []
    return [str(i) for i in ids] if isinstance(ids, list) else []


#: How often a person clicks Stop now while Slack shows them an error (the endpoint answered 5xx), 20 s apart.
CLICKS = 3


def _warning_buttons(deployment: Deployment, instances: list[str]) -> dict[str, Any]:
    """Instance -> the person who will click Stop now on its warning (the warning's buttons recorded in the ledger as
    the notifier records them when it posts; the interactions scenario's role ``stop_now_click``)."""
    if not instances:
        return {}
    from governor.adapters.ledger import DynamoLedger
    from governor_cli.demo.hooks import provided
    from governor_cli.testing.faults import unlabelled

    with unlabelled():
        ledger = DynamoLedger(deployment.local.ledger_table, region=deployment.region)
        return {instance: provided("stop_now_click")(ledger, instance) for instance in instances}


def _labelled(times: dict[str, dt.datetime], at: dt.datetime, kind: str) -> str:
    """A label of its own for one delivery of the click chain, at its simulated time."""
    label = f"idle/{kind}-{len(times)}"
    times[label] = at
    return label


def _stop_now(
    deployment: Deployment,
    injector: FaultInjector,
    clickers: dict[str, Any],
    at: dt.datetime,
    clock: _Clock,
    sent: list[tuple[str, dict[str, Any], int]],
    times: dict[str, dt.datetime],
    episode: IdleEpisode,
) -> None:
    """Each owner clicks Stop now at ``at`` (again, 20 s later, while Slack shows an error); then what the endpoint
    handed over runs (its worker), then what the worker handed on (the idle function), all on the simulated clock."""
    import time_machine

    workers: list[tuple[Any, dict[str, Any], dt.datetime]] = []
    for clicker in clickers.values():
        episode.stop_function = clicker.function
        for attempt in range(CLICKS):
            when = at + dt.timedelta(seconds=20 * attempt)
            label = _labelled(times, when, "click")
            with time_machine.travel(when, tick=False):
                answer, handed = clicker.post(deployment, injector, when, label)
            episode.stop_clicks += 1
            episode.events += 1  # each click is Slack's own request, answered once
            episode.deliveries += 1
            episode.slowest_seconds = max([episode.slowest_seconds, *answer.seconds])
            workers += [(clicker, event, when) for event in handed.worker]
            if answer.status == "handled":
                episode.stop_accepted += 1
                break
    onward: list[tuple[dict[str, Any], dt.datetime]] = []
    for clicker, event, when in workers:
        later = when + dt.timedelta(seconds=2)
        label = _labelled(times, later, "worker")
        clock.now = later
        with time_machine.travel(later, tick=False):
            delivery, handed = clicker.work(deployment, injector, event, label)
        sent.append((label, event, 0 if delivery.status == "dlq" else 1))
        episode.deliveries += 1
        episode.clicked(event)
        onward += [(stop, later) for stop in handed.onward]
    _hand_on(deployment, injector, onward, clock, sent, times, episode)


def _hand_on(
    deployment: Deployment,
    injector: FaultInjector,
    onward: list[tuple[dict[str, Any], dt.datetime]],
    clock: _Clock,
    sent: list[tuple[str, dict[str, Any], int]],
    times: dict[str, dt.datetime],
    episode: IdleEpisode,
) -> None:
    """Stop now as the worker handed it to the idle function: one asynchronous delivery per Invoke that reached it."""
    import time_machine

    for event, when in onward:
        later = when + dt.timedelta(seconds=3)
        label = _labelled(times, later, "stop")
        clock.now = later
        with time_machine.travel(later, tick=False):
            delivery = deployment.deliver("idle", event, injector=injector, label=label)
        sent.append((label, event, 0 if delivery.status == "dlq" else 1))
        episode.deliveries += 1
        episode.stop_labels.add(label)
        episode.slowest_seconds = max([episode.slowest_seconds, *delivery.seconds])


def run_idle(
    deployment: Deployment,
    injector: FaultInjector,
    *,
    seed: int,
    idle: int = 4,
    busy: int = 1,
    requests: int = 1,
    sweeps: int = 7,
    duplicate_share: float = 0.2,
    runbook: bool = True,
) -> IdleEpisode:
    """One episode: ``idle`` idle and ``busy`` busy GPU instances swept every interval for ``sweeps`` sweeps, and
    ``requests`` more idle instances stopped by a person's "Stop now" at the first sweep. Use inside ``mock_aws``,
    with ``deployment`` built on :func:`idle_policy`. With ``runbook``, the episode ends with what an operator does
    after it (:mod:`governor_cli.testing.runbook`, faults off): whatever is still parked or staged then is lost."""
    from governor.idle.domain import sweep_interval
    from governor.outbox import STALE_AFTER

    policy = deployment.policy
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
    interval = sweep_interval(policy.idle)
    first = now + dt.timedelta(minutes=5)
    horizon = int((interval * sweeps).total_seconds() // 60) + 30
    checkpoint = {CHECKPOINT_TAG: next(iter(policy.fleet.checkpoint_commands))}
    idle_ids = _launch(idle, checkpoint)
    busy_ids = _launch(busy, checkpoint)
    asked_ids = _launch(requests, {}) if requests else []  # no checkpoint command: one click stops
    for instance in idle_ids + asked_ids:
        _metrics(instance, 0.3, now, 45, horizon)
    for instance in busy_ids:
        _metrics(instance, 80.0, now, 45, horizon)
    clock = _Clock(first)
    episode = IdleEpisode()
    shuffler = random.Random(seed)
    times: dict[str, dt.datetime] = {}  # delivery label prefix -> simulated time
    sent: list[tuple[str, dict[str, Any], int]] = []
    clickers = _warning_buttons(deployment, asked_ids)
    with clocked_idle(clock):
        for number in range(sweeps):
            at = first + interval * number
            if number == 1:  # the first sweep's warnings are in Slack: their owners click Stop now
                _stop_now(deployment, injector, clickers, at - dt.timedelta(minutes=1), clock, sent, times, episode)
            events = [_sweep(at)]
            for event in events:
                deliveries = 2 if shuffler.random() < duplicate_share else 1
                episode.events += 1
                for copy in range(deliveries):
                    clock.now = at + dt.timedelta(seconds=30 * copy)
                    label = f"idle/{len(sent)}"
                    times[label] = clock.now
                    delivery = deployment.deliver("idle", event, injector=injector, label=label)
                    sent.append((label, event, 0 if delivery.status == "dlq" else 1))
                    episode.deliveries += 1
                    episode.slowest_seconds = max([episode.slowest_seconds, *delivery.seconds])
        if runbook:
            # The runbook, faults off: every parked sweep or request replayed once, then the next scheduled sweep
            # (past the stale age: it publishes whatever an earlier invocation left staged).
            from governor_cli.testing.runbook import replay_all

            injector.rate = 0.0
            clock.now = first + interval * sweeps

            def label_of(event: Any) -> str:
                label = f"idle/{len(sent)}"
                times[label] = clock.now
                return label

            def delivered(event: Any, delivery: Any) -> None:
                label = f"idle/{len(sent)}"
                sent.append((label, event, 0 if delivery.status == "dlq" else 1))
                episode.replayed += 1
                clicker = next(iter(clickers.values()), None)
                if clicker is not None and delivery.function == clicker.function:  # a click's worker, replayed
                    onward = clicker.handed(injector, label).onward
                    _hand_on(deployment, injector, [(e, clock.now) for e in onward], clock, sent, times, episode)

            functions = ["idle", *({c.function for c in clickers.values()})]
            replay_all(deployment, functions, injector, label_of=label_of, delivered=delivered)
            clock.now = first + interval * sweeps + STALE_AFTER + dt.timedelta(minutes=1)
            label = f"idle/{len(sent)}"
            times[label] = clock.now
            final = _sweep(clock.now)
            delivery = deployment.deliver("idle", final, injector=injector, label=label)
            sent.append((label, final, 0 if delivery.status == "dlq" else 1))
            episode.events += 1
            episode.deliveries += 1
    _judge(episode, deployment, injector, times, sent, idle_ids, busy_ids, asked_ids, runbook=runbook)
    return episode


def _judge(
    episode: IdleEpisode,
    deployment: Deployment,
    injector: FaultInjector,
    times: dict[str, dt.datetime],
    sent: list[tuple[str, dict[str, Any], int]],
    idle_ids: list[str],
    busy_ids: list[str],
    asked_ids: list[str],
    *,
    runbook: bool = False,
) -> None:
    wait = dt.timedelta(minutes=deployment.policy.idle.warning_minutes)
    calls = [c for c in injector.calls if c.label and c.label.startswith("idle/")]
    warned: dict[str, dt.datetime] = {}
    stopped: dict[str, dt.datetime] = {}
    checkpoints: Counter[str] = Counter()
    reported: set[str] = set()  # instances whose stop was reported ("stopped" finding accepted by the bus)
    for call in calls:
        at = times[call.label.split("#", 1)[0]]  # type: ignore[union-attr]
        for instance in _accepted_warnings(call):
            warned.setdefault(instance, at)
        reported.update(_accepted_warnings(call, STOP_RULES))
        if call.operation in STOPPING and call.executed:
            for instance in _targets(call):
                stopped.setdefault(instance, at)
                episode.resent += max(0, call.executed - 1)
        if call.operation == "SendCommand" and call.executed:
            for instance in _targets(call):
                checkpoints[instance] += call.executed
    for instance, at in sorted(stopped.items()):
        episode.stops += 1
        if instance in busy_ids:
            episode.busy_stopped += 1
            episode.problems.append(f"idle: busy instance {instance} stopped")
        if instance in asked_ids:
            continue
        since = warned.get(instance)
        if since is None or at - since < wait:
            episode.stops_without_warning += 1
            said = "never" if since is None else f"at {since:%H:%M}"
            episode.problems.append(f"idle: {instance} stopped at {at:%H:%M}, its warning accepted {said}")
    for instance, count in checkpoints.items():
        if count > 1:
            episode.checkpoints_resent += count - 1
            episode.problems.append(f"idle: checkpoint command sent {count} times to {instance}")
    episode.not_stopped = sum(1 for i in idle_ids + asked_ids if i not in stopped)
    recorded = deployment.ledger_decisions()
    decisions: Counter[str] = Counter(str(d.get("event_id")) for d in recorded)
    functions = ["idle", *([episode.stop_function] if episode.stop_function else [])]
    parked = {m.get("event_id") for f in functions for m in deployment.dlq_messages(f)}
    settled: dict[str, bool] = {}
    was_parked: set[str] = set()
    for _, event, ok in sent:
        settled[event["id"]] = settled.get(event["id"], False) or bool(ok)
        if not ok:
            was_parked.add(event["id"])
    for event_id, ok in settled.items():
        if runbook and event_id in parked:
            episode.lost += 1
            episode.problems.append(f"idle: event {event_id} still parked after the runbook's replay")
        elif ok:
            episode.handled += 1
            if event_id in was_parked:
                episode.dlq += 1  # parked during the episode, handled by the runbook's replay
            if not decisions.get(event_id):
                episode.undecided += 1
                episode.problems.append(f"idle: event {event_id} handled with no decision in the ledger")
        elif event_id in parked:
            episode.dlq += 1
        else:
            episode.lost += 1
            episode.problems.append(f"idle: event {event_id} neither handled nor in the DLQ")
    _judge_stop_now(episode, recorded, calls)
    for instance in sorted(stopped):
        episode.warnings_expected += 1  # a stop's finding ("stopped ..."): the owner must hear of it
        if instance in reported:
            episode.warnings_published += 1
        elif _in_outbox(deployment, instance, STOP_RULES) and not runbook:
            episode.warnings_unsent += 1
        else:
            episode.warnings_lost += 1
            episode.problems.append(f"idle: the stop of {instance} was never reported (no finding accepted)")
    for instance in idle_ids:
        episode.warnings_expected += 1
        if instance in warned:
            episode.warnings_published += 1
        elif _in_outbox(deployment, instance) and not runbook:
            episode.warnings_unsent += 1
        else:
            episode.warnings_lost += 1
            still = "still staged unsent after the runbook" if runbook else "neither published nor held in the outbox"
            episode.problems.append(f"idle: the warning for {instance} was {still}")


#: The recorded answers to a Stop now click that refuse it, each with its reason: the idle function's re-checks, a
#: record it would not act on, the worker holding back a second click on the same message.
STOP_REFUSALS = ("idle.stop-now-refused", "idle.stop-now-unverified", "interactions.refused")


def _judge_stop_now(episode: IdleEpisode, recorded: list[dict[str, Any]], calls: list[ApiCall]) -> None:
    """Every click the endpoint accepted is answered: its instance stopped by the idle function's Stop now, or a
    refusal recorded with its reason (noted); a click with neither is lost."""
    by_click: dict[str, list[dict[str, Any]]] = {}
    for decision in recorded:
        by_click.setdefault(str(decision.get("event_id")), []).append(decision)
    clicked_stops = {
        instance
        for call in calls
        if call.operation in STOPPING and call.executed and str(call.label).split("#", 1)[0] in episode.stop_labels
        for instance in _targets(call)
    }
    episode.stop_stopped = len(clicked_stops)
    for click in episode.stop_clicked:
        found = by_click.get(click, [])
        done = [
            str(x)
            for d in found
            if d.get("rule") == "idle.stop-now"
            for x in (d.get("evidence") or {}).get("done") or []
        ]
        if any(x.startswith(("stopped", "terminated")) for x in done):
            continue
        refusals = [d for d in found if d.get("rule") in STOP_REFUSALS or (d.get("rule") == "idle.stop-now" and done)]
        if refusals:
            episode.stop_refused += 1
            reasons = refusals[-1].get("reasons") or ["?"]
            episode.notes.append(f"idle: a Stop now click was answered with a refusal: {reasons[-1]}")
        else:
            episode.stop_lost += 1
            episode.problems.append(f"idle: Stop now click {click} accepted by Slack's endpoint, never answered")


def _in_outbox(deployment: Deployment, instance: str, rules: tuple[str, ...] = ("idle.warned",)) -> bool:
    """An unsent outbox entry holds the idle warning (or another of ``rules``) about ``instance`` (a later sweep or
    the replay publishes it)."""
    for item in deployment.ledger_items("outbox"):
        finding = str(item.get("finding") or "")
        unsent = not item.get("sent_at") and not item.get("withdrawn_at")
        if unsent and instance in finding and any(rule in finding for rule in rules):
            return True
    return False


def fold(verdict: Verdict, episode: IdleEpisode, injector: FaultInjector, limit: float | None) -> None:
    """Add an episode to its mode's row: its events, faults, outcomes, findings and broken rules."""
    verdict.events += episode.events
    verdict.deliveries += episode.deliveries
    verdict.faults.update(injector.injected)
    verdict.handled += episode.handled
    verdict.dlq += episode.dlq
    verdict.lost += episode.lost
    verdict.outside_policy += episode.stops_without_warning + episode.busy_stopped
    verdict.ledger_mismatches += episode.undecided
    verdict.resent_non_idempotent += episode.checkpoints_resent
    verdict.resent += episode.resent + episode.checkpoints_resent  # "resent" includes the non-idempotent ones
    verdict.findings_expected += episode.warnings_expected
    verdict.findings_published += episode.warnings_published
    verdict.findings_unsent += episode.warnings_unsent
    verdict.findings_lost += episode.warnings_lost
    verdict.slowest_seconds = max(verdict.slowest_seconds, episode.slowest_seconds)
    if limit is not None and episode.slowest_seconds > limit:
        verdict.over_timeout += 1
        verdict.problems.append(
            f"idle: an attempt needed {episode.slowest_seconds:.0f}s, over the {limit:.0f}s timeout"
        )
    verdict.stop_now_clicks += episode.stop_clicks
    verdict.stop_now_accepted += episode.stop_accepted
    verdict.stop_now_stopped += episode.stop_stopped
    verdict.stop_now_refused += episode.stop_refused
    verdict.stop_now_lost += episode.stop_lost
    verdict.problems.extend(episode.problems)
    verdict.notes.extend(episode.notes)
    if episode.not_stopped:
        verdict.notes.append(f"idle: {episode.not_stopped} idle instance(s) not stopped yet when the episode ended")
