"""Issue 35's named fault scenarios, each through the deployed handlers on its own emulator, then the runbook.

The soak's rows inject faults at random; these are the orderings random faults rarely produce and that lost
something before issue 35: an invocation killed between an act and its record, a lost answer on the idempotency
write, two sweeps (or a sweep and a Stop now click) overlapping on one instance, a replay after the instance is gone
or after the configuration was fixed, and a sweep stamped in the future. Each ends as an operator's incident ends
(:mod:`governor_cli.testing.runbook`: every DLQ replayed once with the faults off, then a sweep past the stale age)
and is judged by the rules: an event still parked is lost, a finding still unsent is lost, a checkpoint command
(SSM ``SendCommand``, no client token) sent twice to one instance is a non-idempotent call resent.

Lambda's retries of an asynchronous invocation come about one and three minutes after a failure: the harness runs
each attempt at that time (``time_machine``), so Powertools' in-progress records expire as they would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from governor_cli.testing.deployment import Delivery, Deployment
from governor_cli.testing.faults import ApiCall, FaultInjector

#: When Lambda retries an asynchronous invocation that failed (seconds after the first attempt).
RETRY_AT = (0, 60, 180)


class Killed(BaseException):
    """The invocation's process ends here (Lambda's timeout, an out-of-memory kill): no ``except Exception`` runs,
    Powertools keeps its in-progress record."""


@dataclass
class ScenarioResult:
    """One row of RELIABILITY.md's scenario table."""

    name: str
    story: str
    events: int = 0
    replayed: int = 0
    lost: int = 0
    findings_expected: int = 0
    findings_published: int = 0
    findings_lost: int = 0
    resent_non_idempotent: int = 0
    problems: list[str] = field(default_factory=list)


class World:
    """A deployment on the emulator, a recording injector, and a clock for the idle function; every delivery is an
    asynchronous invocation with Lambda's retries at their real times."""

    def __init__(self, deployment: Deployment, injector: FaultInjector, start: dt.datetime) -> None:
        self.deployment = deployment
        self.injector = injector
        self.start = start
        self.now = start
        self.sent: list[tuple[str, Any, bool]] = []  # (label, event, ended handled)
        self.times: dict[str, dt.datetime] = {}
        self._labels = 0
        #: The Lambda context's remaining time per function at the start of an invocation (its timeout); Powertools
        #: makes an in-progress record last that long. Functions not named get the harness's 60 s.
        self.remaining_ms: dict[str, int] = {}

    def clock(self) -> dt.datetime:
        return self.now

    def deliver(self, function: str, event: Any, at: dt.datetime | None = None, *, park: bool = True) -> Delivery:
        """One asynchronous delivery at ``at``: up to three attempts at Lambda's retry times, then the DLQ."""
        import time_machine

        from governor_cli.testing.deployment import LambdaContext
        from governor_cli.testing.idle_clock import clocked_idle

        at = at or self.now
        label = f"idle/{self._labels}"
        self._labels += 1
        self.times[label] = at
        error: BaseException | None = None
        delivery = Delivery(function, event.get("id"), "dlq", 0)
        for attempt, offset in enumerate(RETRY_AT, 1):
            self.now = at + dt.timedelta(seconds=offset)
            with time_machine.travel(self.now, tick=False), clocked_idle(self.clock):
                try:
                    with self.injector.label(f"{label}#{attempt}"):
                        remaining = self.remaining_ms.get(function)
                        context = LambdaContext(function, remaining) if remaining else None
                        result = self.deployment.invoke(function, event, context)
                except (Exception, Killed) as caught:  # Lambda retries whatever ended the attempt
                    error = caught
                    continue
            status = "rejected" if result.get("status") == "rejected" else "handled"
            delivery = Delivery(function, event.get("id"), status, attempt, result.get("reason"), result)
            break
        else:
            if park:
                self.deployment._park(function, event, error)
        self.now = at
        self.sent.append((label, event, delivery.status != "dlq"))
        return delivery

    def runbook(self, functions: list[str], at: dt.datetime) -> int:
        """The operator's runbook at ``at``, faults off: every DLQ replayed once, then a sweep past the stale age."""
        from governor.outbox import STALE_AFTER
        from governor_cli.testing.runbook import replay_all

        self.injector.rate = 0.0
        replayed = replay_all(
            self.deployment, functions, deliver=lambda function, event: self.deliver(function, event, at, park=False)
        )
        later = at + STALE_AFTER + dt.timedelta(minutes=1)
        self.deliver("idle", sweep_event(later), later)
        return replayed

    def calls(self) -> list[ApiCall]:
        return [c for c in self.injector.calls if c.label]

    def parked(self, functions: list[str]) -> set[str]:
        return {str(m.get("event_id")) for f in functions for m in self.deployment.dlq_messages(f)}


def sweep_event(at: dt.datetime, *, stamped: dt.datetime | None = None) -> dict[str, Any]:
    from governor_cli.testing.events import scheduled
    from governor_cli.testing.scenarios import ACCOUNT

    return scheduled(account=ACCOUNT, region="us-east-1", time=stamped or at)


def verified_click(deployment: Deployment, instance_id: str, at: dt.datetime) -> dict[str, Any]:
    """A Stop now click as the interactions function hands it over: its record in the ledger, then the event."""
    from governor.adapters.ledger import DynamoLedger
    from governor_cli.demo.hooks import provided
    from governor_cli.testing.faults import unlabelled

    with unlabelled():
        ledger = DynamoLedger(deployment.local.ledger_table, region=deployment.region)
        event: dict[str, Any] = provided("recorded_stop_click")(ledger, instance_id, at)
        return event


@contextlib.contextmanager
def _emulator(policy_name: str) -> Iterator[Deployment]:
    from moto import mock_aws

    from governor_cli.testing.faults import fake_slack
    from governor_cli.testing.idle_soak import idle_policy
    from governor_cli.testing.scenarios import soak_policy

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), mock_aws(config={"lambda": {"use_docker": False}}), fake_slack():
        deployed = Deployment(idle_policy() if policy_name == "idle" else soak_policy())
        try:
            yield deployed
        finally:
            deployed.close()


def _idle_fleet(count: int = 1) -> tuple[list[str], dt.datetime]:
    """``count`` idle GPU instances with a checkpoint command, their metrics idle from 45 minutes before a start two
    hours ahead of now until three hours after it, and one busy instance (so every sweep judges something)."""
    from governor_cli.testing.idle_soak import CHECKPOINT_TAG, _launch, _metrics
    from governor_cli.testing.scenarios import SOAK_FLEET

    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
    command = next(iter(SOAK_FLEET["checkpoint_commands"]))
    ids = _launch(count, {CHECKPOINT_TAG: command})
    for instance in ids:
        _metrics(instance, 0.3, start, 45, 180)
    for instance in _launch(1, {CHECKPOINT_TAG: command}):
        _metrics(instance, 80.0, start, 45, 180)
    return ids, start


def _judge_idle(result: ScenarioResult, world: World, idle_ids: list[str], asked: list[str] | None = None) -> None:
    from governor_cli.testing.idle_soak import IdleEpisode, _judge

    episode = IdleEpisode()
    sent = [(label, event, 1 if ok else 0) for label, event, ok in world.sent]
    _judge(episode, world.deployment, world.injector, world.times, sent, idle_ids, [], asked or [], runbook=True)
    result.events = len({event["id"] for _, event, _ in world.sent})
    result.lost += episode.lost
    result.findings_expected += episode.warnings_expected
    result.findings_published += episode.warnings_published
    result.findings_lost += episode.warnings_lost
    result.resent_non_idempotent += episode.checkpoints_resent
    result.problems += episode.problems
    if episode.stops_without_warning or episode.busy_stopped:
        result.problems.append(f"{episode.stops_without_warning + episode.busy_stopped} stop(s) outside the rules")
    stops = _stop_findings(world.calls())
    twice = [i for i, ids in stops.items() if len(ids) > 1]
    if twice:
        result.problems.append(f"stop reported under {len(stops[twice[0]])} different finding ids (two messages)")


def _stop_findings(calls: list[ApiCall]) -> dict[str, set[str]]:
    """Instance -> ids of the accepted findings that report its stop."""
    from governor_cli.testing.idle_soak import STOP_RULES

    found: dict[str, set[str]] = {}
    for call in calls:
        if call.operation != "PutEvents" or not call.ok or "failed_entries" in call.faults:
            continue
        for entry in call.params.get("Entries") or []:
            detail = json.loads(entry.get("Detail") or "{}")
            if detail.get("rule") in STOP_RULES:
                found.setdefault(str(detail.get("resource")), set()).add(str(detail.get("id")))
    return found


def _schedule(world: World, sweeps: int = 7) -> dt.datetime:
    """The idle schedule from the world's start: ``sweeps`` sweeps one interval apart. Returns when the next is due."""
    from governor.idle.domain import sweep_interval

    interval = sweep_interval(world.deployment.policy.idle)
    for number in range(sweeps):
        at = world.start + interval * number
        world.deliver("idle", sweep_event(at), at)
    return world.start + interval * sweeps


# --- the scenarios --------------------------------------------------------------------------------------------------


def crash_between_act_and_record() -> ScenarioResult:
    """The sweep's StopInstances is answered, then the invocation is killed before anything is written."""
    import governor.adapters.ec2 as ec2_adapter

    result = ScenarioResult(
        "crash between act and record",
        "the sweep's StopInstances answered, then the invocation killed (no record, no finding written by it); "
        "Lambda's retries, the next sweep",
    )
    with _emulator("idle") as deployed, FaultInjector() as injector:
        ids, start = _idle_fleet()
        world = World(deployed, injector, start)
        original = ec2_adapter.Ec2Actions.stop
        state = {"killed": False}

        def stop_then_die(self: Any, *args: Any, **kwargs: Any) -> Any:
            answer = original(self, *args, **kwargs)
            if not state["killed"]:
                state["killed"] = True
                raise Killed
            return answer

        ec2_adapter.Ec2Actions.stop = stop_then_die  # type: ignore[method-assign]
        try:
            end = _schedule(world)
        finally:
            ec2_adapter.Ec2Actions.stop = original  # type: ignore[method-assign]
        result.replayed = world.runbook(["idle"], end)
        _judge_idle(result, world, ids)
        if not state["killed"]:
            result.problems.append("the scenario did not reach StopInstances")
    return result


def _first_put(table: str) -> tuple[Callable[[ApiCall], bool], dict[str, bool]]:
    """A fault predicate matching only the first PutItem on ``table`` (Powertools' in-progress write), and whether
    it was reached."""
    hit = {"done": False}

    def first(call: ApiCall) -> bool:
        if hit["done"] or call.operation != "PutItem" or call.params.get("TableName") != table:
            return False
        hit["done"] = True
        return True

    return first, hit


def lost_idempotency_answer() -> ScenarioResult:
    """Spot: the idempotency record's PutItem is executed, its answer lost; the retry meets its own record."""
    result = ScenarioResult(
        "lost idempotency answer",
        "Spot warning: Powertools' in-progress PutItem executed, its answer lost; Lambda retries at +1 and +3 min",
    )
    with _emulator("soak") as deployed:
        first_idempotency_put, hit = _first_put(deployed.local.idempotency_table)
        from governor_cli.testing.scenarios import Scenarios

        case = Scenarios(seed=35).build("spot_warning", 0)
        with FaultInjector(1.0, ("read_timeout",), only=first_idempotency_put) as injector:
            world = World(deployed, injector, dt.datetime.now(dt.UTC).replace(microsecond=0))
            world.deliver("spot", case.event)
            result.replayed = world.runbook(["spot"], world.start + dt.timedelta(minutes=10))
        _judge_event(result, world, "spot", case.event, case.resource)
        if not hit["done"]:
            result.problems.append("the scenario did not reach the idempotency write")
    return result


def _judge_event(result: ScenarioResult, world: World, function: str, event: dict[str, Any], resource: str) -> None:
    """One event's end: not parked, its finding accepted, its checkpoint command sent at most once."""
    result.events += 1
    if str(event["id"]) in world.parked([function]):
        result.lost += 1
        result.problems.append(f"{function} event still parked after the runbook")
    calls = world.calls()
    result.findings_expected += 1
    published = any(
        json.loads(e.get("Detail") or "{}").get("resource") == resource
        for c in calls
        if c.operation == "PutEvents" and c.ok and "failed_entries" not in c.faults
        for e in c.params.get("Entries") or []
    )
    if published:
        result.findings_published += 1
    else:
        result.findings_lost += 1
        result.problems.append(f"no finding about {resource} accepted by the bus")
    sends = sum(c.executed for c in calls if c.operation == "SendCommand")
    result.resent_non_idempotent += max(0, sends - 1)
    if sends == 0 and function == "spot":
        result.problems.append("no checkpoint command sent")


def _overlap(name: str, story: str, second: Callable[[World, str, dt.datetime], dict[str, Any]]) -> ScenarioResult:
    """While the sweep's SendCommand is on the wire, a second invocation about the same instance runs to its end."""
    import governor.adapters.ssm as ssm_adapter

    result = ScenarioResult(name, story)
    with _emulator("idle") as deployed, FaultInjector() as injector:
        ids, start = _idle_fleet()
        world = World(deployed, injector, start)
        original = ssm_adapter.SsmCommands.send
        state = {"ran": False}

        def send_while_another_runs(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not state["ran"]:
                state["ran"] = True
                saved = world.now
                at = saved + dt.timedelta(seconds=20)
                world.deliver("idle", second(world, ids[0], at), at)
                world.now = saved
            return original(self, *args, **kwargs)

        ssm_adapter.SsmCommands.send = send_while_another_runs  # type: ignore[method-assign]
        try:
            end = _schedule(world)
        finally:
            ssm_adapter.SsmCommands.send = original  # type: ignore[method-assign]
        result.replayed = world.runbook(["idle"], end)
        _judge_idle(result, world, ids)
        if not state["ran"]:
            result.problems.append("the scenario did not reach SendCommand")
    return result


def overlapping_sweeps() -> ScenarioResult:
    return _overlap(
        "overlapping sweeps",
        "a second sweep runs to its end while the first one's checkpoint SendCommand is on the wire",
        lambda world, instance, at: sweep_event(at),
    )


def sweep_and_click() -> ScenarioResult:
    return _overlap(
        "sweep plus Stop now click",
        "a verified Stop now click is handled while the sweep's checkpoint SendCommand is on the wire",
        lambda world, instance, at: verified_click(world.deployment, instance, at),
    )


def replay_after_instance_gone() -> ScenarioResult:
    """Spot: every PutEvents refused, the event parked; the instance is reclaimed; the operator replays."""
    result = ScenarioResult(
        "replay after the instance is gone",
        "Spot warning: every PutEvents refused (FailedEntryCount), event parked; instance terminated; DLQ replayed",
    )
    with _emulator("soak") as deployed:
        from governor.adapters.aws import client
        from governor_cli.testing.faults import is_put_events, unlabelled
        from governor_cli.testing.scenarios import Scenarios

        case = Scenarios(seed=36).build("spot_warning", 0)
        with FaultInjector(1.0, ("failed_entries",), only=is_put_events) as injector:
            world = World(deployed, injector, dt.datetime.now(dt.UTC).replace(microsecond=0))
            world.deliver("spot", case.event)
            parked = str(case.event["id"]) in world.parked(["spot"])
            with unlabelled():
                client("ec2", deployed.region).terminate_instances(InstanceIds=[case.resource])
            result.replayed = world.runbook(["spot"], world.start + dt.timedelta(minutes=10))
        _judge_event(result, world, "spot", case.event, case.resource)
        if not parked:
            result.problems.append("the scenario did not park the event")
    return result


def replay_after_configuration_fix() -> ScenarioResult:
    """Notifier: Slack answers 403 invalid_token (a wrong webhook secret); the message is parked; the operator fixes
    the secret and replays."""
    result = ScenarioResult(
        "replay after a configuration fix",
        "finding to deliver: Slack answers 403 invalid_token, message parked; secret fixed; DLQ replayed",
    )
    with _emulator("soak") as deployed:
        from governor_cli.testing.scenarios import Scenarios

        case = Scenarios(seed=37).build("notifier_security_finding", 0)
        with FaultInjector(1.0, ("access_denied",), services={"slack"}) as injector:
            world = World(deployed, injector, dt.datetime.now(dt.UTC).replace(microsecond=0))
            world.deliver("notifier", case.event)
            parked = str(case.event["id"]) in world.parked(["notifier"])
            result.replayed = world.runbook(["notifier"], world.start + dt.timedelta(minutes=10))
        result.events = 1
        if str(case.event["id"]) in world.parked(["notifier"]):
            result.lost += 1
            result.problems.append("message still parked after the replay")
        posts = [c for c in world.calls() if c.service == "slack" and c.operation == "PostWebhook"]
        result.findings_expected = 1
        if any(c.ok for c in posts):
            result.findings_published = 1
        else:
            result.findings_lost = 1
            result.problems.append("the Slack message was never delivered")
        delivered = sum(1 for c in posts if c.ok)
        if delivered > 1:
            result.problems.append(f"the Slack message was delivered {delivered} times")
        if not parked:
            result.problems.append("the scenario did not park the message")
    return result


def future_stamped_sweep() -> ScenarioResult:
    """A sweep event stamped two hours ahead of the function's clock between two regular sweeps."""
    from governor.idle.domain import sweep_interval

    result = ScenarioResult(
        "future-stamped sweep",
        "after the warning, a sweep stamped 2 h ahead of the clock (skew, a hand-made replay); then the schedule",
    )
    with _emulator("idle") as deployed, FaultInjector() as injector:
        ids, start = _idle_fleet()
        world = World(deployed, injector, start)
        world.deliver("idle", sweep_event(start), start)
        early = start + dt.timedelta(minutes=5)
        world.deliver("idle", sweep_event(early, stamped=start + dt.timedelta(hours=2)), early)
        interval = sweep_interval(deployed.policy.idle)
        for number in range(1, 6):
            at = start + interval * number
            world.deliver("idle", sweep_event(at), at)
        result.replayed = world.runbook(["idle"], start + interval * 6)
        _judge_idle(result, world, ids)
        warnings: Counter[str] = Counter()
        for call in world.calls():
            if call.operation == "PutEvents" and call.ok:
                for entry in call.params.get("Entries") or []:
                    detail = json.loads(entry.get("Detail") or "{}")
                    if detail.get("rule") == "idle.warned":
                        warnings[str(detail.get("id"))] += 1
        if len(warnings) > 1:
            result.problems.append(f"{len(warnings)} different warnings for one idle spell (marks reset)")
    return result


#: The notifier's Lambda timeout (infra/constructs/notifications.py ``TIMEOUT``): longer than Lambda's first retry
#: comes, so a stuck in-progress record blocks it.
NOTIFIER_TIMEOUT_MS = 180_000


def idempotency_record_write_refused() -> ScenarioResult:
    """Notifier: Powertools' own record write is refused after the work ran (AccessDenied on the UpdateItem that
    completes it; on the DeleteItem that releases it after the work failed). The record stays in progress until the
    invocation's deadline (3 min), past Lambda's retries: before issue 35d a delivered message ended parked."""
    result = ScenarioResult(
        "idempotency record write refused",
        "finding to deliver (notifier, 3 min timeout): Powertools' completing UpdateItem refused after Slack took the "
        "message; for a second finding a ledger write fails and the DeleteItem releasing the record is refused",
    )
    with _emulator("soak") as deployed:
        from governor_cli.testing.scenarios import Scenarios

        table = deployed.local.idempotency_table
        cases = [
            Scenarios(seed=38).build("notifier_security_finding", 0),
            Scenarios(seed=39).build("notifier_security_finding", 0),
        ]
        refused: set[str] = set()

        def refuse(call: ApiCall) -> bool:
            """Case 0: the first completing UpdateItem. Case 1: the first ledger PutItem, then the DeleteItem."""
            first = (call.label or "").startswith("idle/0#")
            if first and call.operation == "UpdateItem" and call.params.get("TableName") == table:
                key = "complete"
            elif not first and call.operation == "PutItem" and call.params.get("TableName") != table:
                key = "ledger"
            elif not first and call.operation == "DeleteItem" and call.params.get("TableName") == table:
                key = "release"
            else:
                return False
            if key in refused:
                return False
            refused.add(key)
            return True

        with FaultInjector(1.0, ("access_denied",), only=refuse) as injector:
            world = World(deployed, injector, dt.datetime.now(dt.UTC).replace(microsecond=0))
            world.remaining_ms["notifier"] = NOTIFIER_TIMEOUT_MS
            for case in cases:
                delivery = world.deliver("notifier", case.event)
                if delivery.status == "dlq":
                    result.problems.append(
                        f"a finding's message parked by Lambda's retries ({delivery.reason or 'in progress'})"
                    )
            result.replayed = world.runbook(["notifier"], world.start + dt.timedelta(minutes=10))
        result.events = len(cases)
        parked = world.parked(["notifier"])
        posts = [c for c in world.calls() if c.service == "slack" and c.operation == "PostWebhook" and c.ok]
        for case in cases:
            result.findings_expected += 1
            if str(case.event["id"]) in parked:
                result.lost += 1
                result.problems.append("message still parked after the replay")
            if any(case.resource in json.dumps(c.params, default=str) for c in posts):
                result.findings_published += 1
            else:
                result.findings_lost += 1
                result.problems.append(f"the Slack message about {case.resource} was never delivered")
        if refused != {"complete", "ledger", "release"}:
            result.problems.append(f"the scenario refused only {sorted(refused)}")
    return result


def lost_idempotency_answer_long_timeout() -> ScenarioResult:
    """Notifier (3 min timeout): the idempotency record's PutItem is executed, its answer lost, botocore resends it."""
    result = ScenarioResult(
        "lost idempotency answer, 3-minute function",
        "finding to deliver (notifier): Powertools' in-progress PutItem executed, its answer lost, botocore resends "
        "it; the record lasts past Lambda's retries",
    )
    with _emulator("soak") as deployed:
        from governor_cli.testing.scenarios import Scenarios

        first_idempotency_put, hit = _first_put(deployed.local.idempotency_table)
        case = Scenarios(seed=40).build("notifier_security_finding", 0)
        with FaultInjector(1.0, ("read_timeout",), only=first_idempotency_put) as injector:
            world = World(deployed, injector, dt.datetime.now(dt.UTC).replace(microsecond=0))
            world.remaining_ms["notifier"] = NOTIFIER_TIMEOUT_MS
            delivery = world.deliver("notifier", case.event)
            if delivery.status == "dlq":
                result.problems.append(f"the message parked by Lambda's retries ({delivery.reason or 'in progress'})")
            result.replayed = world.runbook(["notifier"], world.start + dt.timedelta(minutes=10))
        result.events = result.findings_expected = 1
        if str(case.event["id"]) in world.parked(["notifier"]):
            result.lost += 1
            result.problems.append("message still parked after the replay")
        posts = [c for c in world.calls() if c.service == "slack" and c.operation == "PostWebhook" and c.ok]
        if posts:
            result.findings_published = 1
        else:
            result.findings_lost = 1
            result.problems.append("the Slack message was never delivered")
        if not hit["done"]:
            result.problems.append("the scenario did not reach the idempotency write")
    return result


SCENARIOS: list[Callable[[], ScenarioResult]] = [
    crash_between_act_and_record,
    lost_idempotency_answer,
    overlapping_sweeps,
    sweep_and_click,
    replay_after_instance_gone,
    replay_after_configuration_fix,
    future_stamped_sweep,
    idempotency_record_write_refused,
    lost_idempotency_answer_long_timeout,
]
