"""Issue 35: nothing lost, nothing twice, under the faults the soak did not count.

Each test reproduces one path that lost a finding, a message, a checkpoint or the ledger's truth, or sent a
non-idempotent SSM command twice, through the real handlers (DynamoDB, EC2, CloudWatch and SSM on moto where a
condition or an AWS behaviour matters; in-memory fakes where the path is pure).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import time_machine
from moto import mock_aws

from governor import runner
from governor.adapters.ec2 import Ec2Actions
from governor.adapters.ledger import DynamoLedger
from governor.domain.breaker import BREAKER_KIND
from governor.domain.decision import Decision, Finding
from governor.domain.once import send_command_once
from governor.domain.ports import PublishError
from governor.idle.domain import MARK_KIND
from governor.idle.handler import handle as idle_handle
from governor.outbox import STALE_AFTER, Outbox
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_ledger_table, create_shared
from governor_cli.demo.capabilities.interactions.stop_clicks import recorded_click
from governor_cli.testing.deployment import LambdaContext
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _runtime, _state
from tests.unit.sinks import RefusesFirstBatch
from tests.unit.test_spot_handler import INSTANCE_ID, World, fixture, gpu

REGION = "us-east-1"


@pytest.fixture
def idempotency(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with mock_aws():
        local = create_shared(REGION)
        monkeypatch.setenv("IDEMPOTENCY_TABLE", local.idempotency_table)
        monkeypatch.setenv("AWS_REGION", REGION)
        yield local.idempotency_table


# --- 1. staged findings are delivered whatever happens to their instance ------------------------------------------


def test_a_spot_finding_parked_with_its_event_is_delivered_by_the_replay_after_the_instance_is_gone() -> None:
    world = World(gpu(), enforce=True)
    world.sink = world.runtime.sink = RefusesFirstBatch(PublishError("FailedEntryCount: 1"))
    warning = fixture("interruption-warning.json")
    with pytest.raises(PublishError):  # every attempt refused: Lambda parks the event, its finding staged
        world.run(warning)
    assert len(world.commands.sent) == 1 and not world.sink.findings
    world.reader.instances.clear()  # the instance is reclaimed two minutes later
    world.run(warning)  # `governor dlq replay spot`
    (finding,) = world.sink.findings
    assert finding.resource == INSTANCE_ID and "checkpoint command cmd-1 sent" in finding.detail
    assert len(world.commands.sent) == 1


@mock_aws
def test_the_idle_sweep_publishes_what_any_function_left_unsent() -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    (busy,) = _launch(ec2, "g5.xlarge")
    _metrics(busy, 75.0)
    runtime = _runtime()
    spot = Finding(
        policy="spot",
        rule="spot-interruption",
        resource="i-0gone",
        title="Spot interruption",
        detail="x",
        severity="warning",
    )
    staged_at = T0 - STALE_AFTER * 2
    Outbox(runtime.ledger, MemorySink(), event_id="spot-event-1", clock=lambda: staged_at).add([spot])
    idle_handle(_event(T0, "sweep-1"), runtime, _aws())
    published = [f for f in runtime.sink.findings if f.policy == "spot"]  # type: ignore[attr-defined]
    assert [f.resource for f in published] == ["i-0gone"]  # no replay needed, nor a Spot event for a gone instance


# --- 2. a lost answer on the idempotency write does not wedge a time-bound action --------------------------------


class _Killed(BaseException):
    """The invocation ends without Powertools seeing an exception: its in-progress record stays, as when the answer
    to the record's PutItem was lost and every retry of that invocation met its own record."""


def test_a_spot_warning_whose_in_progress_record_was_left_behind_is_checkpointed_by_lambdas_first_retry(
    idempotency: str,
) -> None:
    from governor.spot.handler import handle

    world = World(gpu(), enforce=True)
    reader = world.reader
    original = reader.instance

    def dies_once(instance_id: str) -> Any:
        reader.instance = original  # type: ignore[method-assign]
        raise _Killed

    reader.instance = dies_once  # type: ignore[method-assign]
    warning = fixture("interruption-warning.json")
    start = dt.datetime.now(dt.UTC)
    with time_machine.travel(start, tick=False), pytest.raises(_Killed):
        handle(warning, world.runtime, world.ports, LambdaContext("spot", remaining_ms=180_000))
    with time_machine.travel(start + dt.timedelta(seconds=61), tick=False):  # Lambda's first asynchronous retry
        result = handle(warning, world.runtime, world.ports, LambdaContext("spot", remaining_ms=180_000))
    assert result["checkpoint"]["delivered"] and len(world.commands.sent) == 1


# --- 3. a replay delivers what a fixed configuration now allows ---------------------------------------------------


def test_work_that_parked_its_event_runs_again_on_the_replay(idempotency: str) -> None:
    dlq = MemoryDeadLetters()
    runs: list[str] = []
    event = {"id": "finding-event-1", "detail": {}}

    def notify() -> dict[str, Any]:
        runs.append("ran")
        if len(runs) == 1:  # the webhook secret is wrong: parked as undeliverable, the invocation succeeds
            dlq.send(event, "undeliverable: slack: invalid_token")
            return {"status": "undeliverable"}
        return {"status": "sent"}

    first = runner.once_per_event(event=event, name="test.notify", work=notify)
    replayed = runner.once_per_event(event=event, name="test.notify", work=notify)  # after the secret was fixed
    again = runner.once_per_event(event=event, name="test.notify", work=notify)  # a duplicate of the delivered one
    assert first["status"] == "undeliverable" and replayed["status"] == "sent" and again["status"] == "sent"
    assert runs == ["ran", "ran"]


# --- 5. at most one SendCommand across overlapping invocations -----------------------------------------------------


class _Commands:
    """SSM as seen by two overlapping invocations: a command sent is listed only once the send returned."""

    def __init__(self, during_send: Any = None) -> None:
        self.sent: list[str] = []
        self.listed: dict[str, str] = {}
        self.during_send = during_send

    def find(self, instance_id: str, comment: str) -> str | None:
        return self.listed.get(comment)

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> Any:
        self.sent.append(instance_id)
        if self.during_send is not None:
            other, self.during_send = self.during_send, None
            other()  # the second invocation runs while this send is on the wire
        self.listed[comment] = f"cmd-{len(self.sent)}"
        return type("Sent", (), {"delivered": True, "command_id": f"cmd-{len(self.sent)}", "error": None})()


def test_two_overlapping_invocations_send_one_checkpoint() -> None:
    ledger = MemoryLedger()
    once = {"event_id": "idle-spell:2026-12-01", "instance_id": "i-0a", "command": "ckpt", "timeout_seconds": 60}
    seen: list[Any] = []
    commands = _Commands()
    commands.during_send = lambda: seen.append(send_command_once(ledger, commands, **once))
    first = send_command_once(ledger, commands, **once)
    assert commands.sent == ["i-0a"]  # the sweep and the Stop now click signalled the job once
    assert first.delivered and not seen[0].delivered and str(seen[0].error).startswith("in flight")


# --- 6. a held-back action is recorded as held back on the real ledger --------------------------------------------


@mock_aws
def test_an_action_held_back_by_the_reread_is_recorded_as_not_done_in_dynamodb() -> None:
    create_ledger_table("ledger", REGION)
    ledger = DynamoLedger("ledger", region=REGION)
    from governor.idle.actions import Stop

    decision = Decision(policy="idle", verdict="act", resource="i-0a", actions=[Stop(enforced=True)], rule="idle")
    skipped = decision.model_copy(update={"verdict": "ok", "evidence": {"status": "idle"}, "reasons": ["busy now"]})
    run = runner.Run("sweep-1", ledger, parse_policy({}), aws=None)
    settled = run.settle(decision, reread=lambda _: runner.Hold("skipped: busy now", skipped))
    assert settled.held is not None
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName="ledger", Key={"pk": {"S": "decision#i-0a"}, "sk": {"S": "idle#sweep-1"}}
    )["Item"]
    assert item["verdict"]["S"] == "ok" and item["reasons"]["L"][0]["S"] == "busy now"


# --- 7. the breaker is written with a condition: overlapping sweeps trip it once -------------------------------------


class _OverlappingSweep(MemoryLedger):
    """A second sweep runs to its end between the first sweep's read of the breaker and its write."""

    def __init__(self) -> None:
        super().__init__()
        self.second: Any = None

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        found = super().get_item(kind, key)
        if kind == BREAKER_KIND and self.second is not None:
            second, self.second = self.second, None
            second()
        return found


@mock_aws
def test_two_overlapping_sweeps_trip_the_breaker_with_one_critical_finding() -> None:
    from tests.adapters.test_idle_sweep import turned_idle_together

    ec2 = boto3.client("ec2", region_name=REGION)
    ids = turned_idle_together(ec2)
    runtime = _runtime(max_fleet_percent=20)
    ledger = _OverlappingSweep()
    runtime.ledger = ledger
    aws = _aws()
    for k in range(12):  # every sweep overlaps another one, from before the breaker trips until long after
        at = T0 + dt.timedelta(minutes=15 * k)
        ledger.second = lambda at=at, k=k: idle_handle(_event(at, f"sweep-b-{k}"), runtime, aws)
        idle_handle(_event(at, f"sweep-a-{k}"), runtime, aws)
    critical = [f for f in runtime.sink.findings if f.severity == "critical"]  # type: ignore[attr-defined]
    assert len(critical) == 1 and critical[0].rule == "idle.circuit-breaker"
    assert all(_state(ec2, i) == "running" for i in ids)


# --- 4 and 8: a stop is always reported, once; a sweep from the future changes no mark ------------------------------


class _TagFailsAfterStop(Ec2Actions):
    """StopInstances succeeds, then the tag that records it fails (throttled past botocore's retries)."""

    def tag(self, instance_id: str, tags: dict[str, str]) -> None:
        raise RuntimeError("RequestLimitExceeded: Request limit exceeded.")


@pytest.fixture
def idle_fleet() -> Iterator[tuple[Any, str]]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        (idle,) = _launch(ec2, "g5.xlarge")
        _metrics(idle, 0.3)
        yield ec2, idle


def test_a_stop_followed_by_a_failure_is_still_reported_and_recorded_as_a_stop(idle_fleet: Any) -> None:
    ec2, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    aws.actions = _TagFailsAfterStop(REGION)
    second = idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert _state(ec2, idle) in ("stopping", "stopped")
    stopped = [f for f in runtime.sink.findings if f.rule == "idle.acted"]  # type: ignore[attr-defined]
    assert len(stopped) == 1 and "stopped" in stopped[0].detail
    assert second["done"][idle][0] == "stopped"
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == idle]  # type: ignore[attr-defined]
    assert recorded[-1].evidence["done"][0] == "stopped"


def _click(runtime: Runtime, instance_id: str, click: str, at: dt.datetime) -> dict[str, Any]:
    """A verified Stop now click made at ``at``, as the notifier and the interactions function leave it."""
    return recorded_click(runtime.ledger, instance_id, at, seed=click)


def test_two_stop_now_clicks_that_both_pass_the_reread_post_one_stopped_message(idle_fleet: Any) -> None:
    ec2, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    aws.respond = lambda url, body: True
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    at = T0 + dt.timedelta(minutes=2)
    first = _click(runtime, idle, "click-1", at)
    second = _click(runtime, idle, "click-2", at)
    mark = runtime.ledger.get_item(MARK_KIND, idle)

    aws.clock = lambda: at
    assert idle_handle(first, runtime, aws)["status"] == "stopped"
    runtime.ledger.put_item(MARK_KIND, idle, mark or {})  # the second click read the mark before it was cleared
    ec2.start_instances(InstanceIds=[idle])  # and the instance before it stopped
    assert idle_handle(second, runtime, aws)["status"] == "stopped"
    stopped = [f for f in runtime.sink.findings if f.rule == "idle.stop-now"]  # type: ignore[attr-defined]
    assert len({f.id for f in stopped}) == 1 and len(stopped) == 1


def test_a_stop_now_retried_after_its_stop_reports_the_stop_not_a_refusal(idle_fleet: Any) -> None:
    _, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    answers: list[str] = []
    aws.respond = lambda url, body: answers.append(str(body)) or True
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    at = T0 + dt.timedelta(minutes=2)
    aws.clock = lambda: at
    click = _click(runtime, idle, "click-1", at)
    aws.actions = _TagFailsAfterStop(REGION)
    with pytest.raises(RuntimeError):
        idle_handle(click, runtime, aws)  # stopped, then the tag failed: Lambda retries the invocation
    aws.actions = Ec2Actions(REGION)
    result = idle_handle(click, runtime, aws)
    assert result["status"] == "stopped" and "Not stopped" not in answers[-1]
    assert [f.rule for f in runtime.sink.findings if f.rule == "idle.stop-now"] == ["idle.stop-now"]  # type: ignore[attr-defined]


def test_a_sweep_stamped_in_the_future_keeps_every_mark(idle_fleet: Any) -> None:
    _, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    mark = runtime.ledger.get_item(MARK_KIND, idle)
    assert mark is not None and mark["idle_since"]
    # stamped two hours ahead of the function's clock (skew, a hand-made replay): no samples exist from then
    idle_handle(_event(T0 + dt.timedelta(hours=2), "sweep-2", delivered=T0 + dt.timedelta(minutes=5)), runtime, aws)
    after = runtime.ledger.get_item(MARK_KIND, idle)
    assert after is not None and after["idle_since"] == mark["idle_since"]
    warnings = {f.id for f in runtime.sink.findings if f.rule == "idle.warned"}  # type: ignore[attr-defined]
    assert len(warnings) == 1


class _KilledAfterStop(Ec2Actions):
    """StopInstances is answered, then the invocation's process ends (a timeout, a kill): nothing after it runs."""

    def stop(self, instance_id: str) -> None:
        super().stop(instance_id)
        raise _Killed


class _StopRefused(Ec2Actions):
    def stop(self, instance_id: str) -> None:
        raise RuntimeError("UnauthorizedOperation: not allowed to stop")


def test_a_stop_whose_invocation_dies_right_after_the_answer_is_reported_by_the_next_sweep(idle_fleet: Any) -> None:
    ec2, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    aws.actions = _KilledAfterStop(REGION)
    at = T0 + dt.timedelta(minutes=30)
    aws.clock = lambda: at
    with pytest.raises(_Killed):
        idle_handle(_event(at, "sweep-2"), runtime, aws)
    assert _state(ec2, idle) in ("stopping", "stopped")
    assert not [f for f in runtime.sink.findings if f.rule == "idle.acted"]  # type: ignore[attr-defined]
    aws.actions = Ec2Actions(REGION)
    later = at + dt.timedelta(minutes=15)
    aws.clock = lambda: later
    idle_handle(_event(later, "sweep-3"), runtime, aws)  # the next scheduled sweep: it no longer lists the instance
    (stopped,) = [f for f in runtime.sink.findings if f.rule == "idle.acted"]  # type: ignore[attr-defined]
    assert stopped.resource == idle and "stopped" in stopped.detail and "stop requested" not in stopped.detail


def test_a_finding_staged_before_a_stop_that_failed_is_withdrawn_not_published(idle_fleet: Any) -> None:
    from governor.idle.carry_out import resolve_pending as idle_resolve

    ec2, idle = idle_fleet
    runtime = _runtime()
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    aws.actions = _StopRefused(REGION)
    at = T0 + dt.timedelta(minutes=30)
    aws.clock = lambda: at
    idle_handle(_event(at, "sweep-2"), runtime, aws)  # the failure is recorded and reported; the sweep goes on
    reclaim = [i for i in runtime.ledger.query_kind("outbox") if "stop requested" in i["finding"]]
    assert [i.get("pending") for i in reclaim] == ["stop"]  # staged before the act; failed: never published as is
    staged = Outbox(runtime.ledger, runtime.sink, event_id="sweep-3", clock=lambda: at + STALE_AFTER * 2)
    staged.resolve = idle_resolve(aws)
    assert staged.flush_stale() == 0  # the instance still runs: the stop never happened
    (withdrawn,) = [i for i in runtime.ledger.query_kind("outbox") if i["finding_id"] == reclaim[0]["finding_id"]]
    assert withdrawn.get("withdrawn_at") and not withdrawn.get("sent_at") and _state(ec2, idle) == "running"
    published = [f.detail for f in runtime.sink.findings if f.resource == idle]  # type: ignore[attr-defined]
    assert not any("stop requested" in d or "; done: stopped" in d for d in published)


# --- Spot: a checkpoint another live invocation holds is not recorded as "in flight" ------------------------------


def test_a_spot_retry_overlapping_the_live_checkpoint_fails_for_a_later_retry_instead_of_recording_in_flight() -> None:
    """Lambda's retry (or a duplicate delivery) runs while the first invocation's SendCommand is on the wire. Before,
    it recorded "in flight" as the checkpoint's outcome in the interruption record and the action item, and published
    the warning's finding saying so under the finding id the first invocation then found already sent: the owner
    never learned the command id. Now it raises, so Lambda retries it once the holder has finished."""
    from governor.spot.handler import CheckpointInFlight, handle

    world = World(gpu(), enforce=True)
    warning = fixture("interruption-warning.json")
    original = world.commands.send
    overlapped: list[BaseException] = []

    def send_while_a_retry_runs(*args: Any, **kwargs: Any) -> Any:
        world.commands.send = original  # type: ignore[method-assign]
        try:
            handle(dict(warning), world.runtime, world.ports)
        except CheckpointInFlight as error:
            overlapped.append(error)
        return original(*args, **kwargs)

    world.commands.send = send_while_a_retry_runs  # type: ignore[method-assign]
    first = handle(dict(warning), world.runtime, world.ports)
    assert first["checkpoint"]["delivered"] and len(overlapped) == 1
    retried = handle(dict(warning), world.runtime, world.ports)  # Lambda's retry of the overlapping one, later
    assert retried["checkpoint"]["command_id"] == first["checkpoint"]["command_id"] == "cmd-1"
    assert len(world.commands.sent) == 1
    record = world.record()
    assert record["command_id"] == "cmd-1" and record.get("checkpoint_error") is None
    details = [f.detail for f in world.sink.findings if f.resource == INSTANCE_ID]
    assert details and all("in flight" not in d for d in details)
    assert any("checkpoint command cmd-1 sent" in d for d in details)
