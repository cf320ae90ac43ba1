"""The Spot handler on in-memory fakes: what is sent, recorded and reported for each event, and in which order."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from botocore.exceptions import ClientError

from governor.domain.fleet import Instance
from governor.domain.interruptions import interruption_stats
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor.spot.handler import Adapters, handle
from governor.spot.ports import Candidate, Deregistration, LaunchAttempt, LifecycleOutcome, Replacement
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.conftest import ROOT
from tests.unit.sinks import RefusesFirstBatch

FIXTURES = ROOT / "tests" / "fixtures" / "spot"
INSTANCE_ID = "i-1234567890abcdef0"
WARNED = dt.datetime(2026, 12, 1, 10, 15, tzinfo=dt.UTC)


def fixture(name: str, **detail: Any) -> dict[str, Any]:
    event = json.loads((FIXTURES / name).read_text())
    event["detail"].update(detail)
    return event


@dataclass(frozen=True)
class Sent:
    delivered: bool
    command_id: str | None = None
    error: str | None = None


@dataclass
class FakeReader:
    instances: dict[str, Instance] = field(default_factory=dict)

    def instance(self, instance_id: str) -> Instance | None:
        return self.instances.get(instance_id)


@dataclass
class FakeCommands:
    ledger: MemoryLedger
    deliver: bool = True
    final_status: str = "Success"
    sent: list[tuple[str, str, int]] = field(default_factory=list)
    decisions_before_send: list[int] = field(default_factory=list)
    comments: dict[str, str] = field(default_factory=dict)

    def find(self, instance_id: str, comment: str) -> str | None:
        return self.comments.get(comment)

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> Sent:
        self.decisions_before_send.append(len(self.ledger.decisions))
        self.sent.append((instance_id, command, timeout_seconds))
        if self.deliver:
            self.comments[comment] = f"cmd-{len(self.sent)}"
        if not self.deliver:
            return Sent(False, None, "InvalidInstanceId: Instances not in a valid state for account")
        return Sent(True, f"cmd-{len(self.sent)}")

    def status(self, command_id: str, instance_id: str) -> str:
        return self.final_status


@dataclass
class FakeRecovery:
    groups: list[str] = field(default_factory=lambda: ["arn:aws:elasticloadbalancing:tg/web/1"])
    fail_deregister: bool = False
    replacement: Replacement = field(default_factory=lambda: Replacement("i-0fedcba9876543210"))
    deregistered: list[str] = field(default_factory=list)
    lifecycle_completed: list[str] = field(default_factory=list)
    replaced: list[tuple[str, list[Candidate], str]] = field(default_factory=list)

    def deregister(self, instance: Instance, fleet_tags: Mapping[str, str]) -> Deregistration:
        if self.fail_deregister:
            raise RuntimeError("elbv2 unavailable")
        self.deregistered.append(instance.id)
        return Deregistration(list(self.groups), [])

    def complete_lifecycle_action(self, instance_id: str) -> LifecycleOutcome:
        self.lifecycle_completed.append(instance_id)
        return LifecycleOutcome("trainers", "Terminating:Wait", ("drain",), "continued drain")

    def replace(
        self, instance: Instance, candidates: Sequence[Candidate], market: Literal["spot", "on-demand"]
    ) -> Replacement:
        self.replaced.append((instance.id, list(candidates), market))
        return self.replacement


def gpu(**tags: str) -> Instance:
    return Instance(
        id=INSTANCE_ID,
        type="g5.xlarge",
        state="running",
        launch_time=WARNED - dt.timedelta(hours=10),
        tags={"owner": "ana", "team": "vision", "gpu-fleet": "true", **tags},
        lifecycle="spot",
        zone="us-east-2a",
        launch_template_id="lt-0abc",
        launch_template_version="2",
    )


class World:
    def __init__(self, instance: Instance | None = None, **spot: Any) -> None:
        self.ledger = MemoryLedger()
        self.sink = MemorySink()
        self.dlq = MemoryDeadLetters()
        self.runtime = Runtime(parse_policy({"spot": spot}), self.ledger, self.sink, self.dlq)
        self.reader = FakeReader({INSTANCE_ID: instance} if instance else {})
        self.commands = FakeCommands(self.ledger)
        self.recovery = FakeRecovery()
        self.ports = Adapters(self.reader, self.commands, self.recovery)

    def run(self, event: dict[str, Any]) -> dict[str, Any]:
        return handle(copy.deepcopy(event), self.runtime, self.ports)

    def record(self) -> dict[str, Any]:
        item = self.ledger.get_item("interruption", INSTANCE_ID)
        assert item is not None
        return item


def test_enforced_warning_records_first_then_checkpoints_and_notifies_owner_and_team() -> None:
    world = World(gpu(**{"governor:checkpoint-command": "train"}), enforce=True)
    world.runtime.policy = parse_policy(
        {"spot": {"enforce": True}, "fleet": {"checkpoint_commands": {"train": "pkill -USR1 -f train.py"}}}
    )
    result = world.run(fixture("interruption-warning.json"))
    assert result["status"] == "acted" and result["checkpoint"]["delivered"]
    assert world.commands.sent == [(INSTANCE_ID, "pkill -USR1 -f train.py", 90)]
    assert world.commands.decisions_before_send == [1]  # the decision was in the ledger before the command left
    record = world.record()
    assert record["instance_type"] == "g5.xlarge" and record["zone"] == "us-east-2a"
    assert record["age_seconds"] == 36000 and (record["owner"], record["team"]) == ("ana", "vision")
    assert record["checkpoint_delivered"] and record["command_id"] == "cmd-1" and record["status"] == "interrupted"
    assert record["target_groups"] == ["arn:aws:elasticloadbalancing:tg/web/1"]
    (finding,) = world.sink.findings
    assert (finding.owner, finding.team, finding.severity, finding.enforced) == ("ana", "vision", "warning", True)
    assert "checkpoint command cmd-1 sent" in finding.detail and finding.event_id == result["event_id"]


def test_report_only_warning_changes_nothing_but_records_and_notifies() -> None:
    world = World(gpu())
    result = world.run(fixture("interruption-warning.json"))
    assert result["status"] == "reported"
    assert world.commands.sent == [] and world.recovery.deregistered == [] and world.recovery.replaced == []
    record = world.record()
    assert record["enforced"] is False and record["checkpoint_attempted"] is False
    (finding,) = world.sink.findings
    assert finding.enforced is False and "report-only" in finding.detail
    (_, decision) = world.ledger.decisions[0]
    assert all(not action.enforced for action in decision.actions)


def test_undelivered_checkpoint_is_critical_and_releases_the_lifecycle_action_at_once() -> None:
    world = World(gpu(**{"aws:autoscaling:groupName": "trainers"}), enforce=True)
    world.commands.deliver = False
    world.run(fixture("interruption-warning.json"))
    record = world.record()
    assert record["checkpoint_delivered"] is False and "InvalidInstanceId" in record["checkpoint_error"]
    assert world.recovery.lifecycle_completed == [INSTANCE_ID] and record["lifecycle_action"] == "continued drain"
    assert world.sink.findings[0].severity == "critical"


def test_lifecycle_action_waits_for_the_checkpoint_then_ssm_status_releases_it() -> None:
    world = World(gpu(**{"aws:autoscaling:groupName": "trainers"}), enforce=True)
    world.run(fixture("interruption-warning.json"))
    assert world.record()["lifecycle_action"] == "pending" and world.recovery.lifecycle_completed == []
    status = fixture("command-status-success.json", **{"command-id": "cmd-1"})
    result = world.run(status)
    assert result["status"] == "recorded" and world.recovery.lifecycle_completed == [INSTANCE_ID]
    record = world.record()
    assert record["checkpoint_status"] == "Success" and record["lifecycle_action"] == "continued drain"
    foreign = world.run(fixture("command-status-success.json", **{"command-id": "someone-elses"}))
    assert foreign["status"] == "ignored"


def test_state_change_completes_the_record_with_final_and_ssm_status() -> None:
    world = World(gpu(), enforce=True)
    world.run(fixture("interruption-warning.json"))
    world.commands.final_status = "TimedOut"
    findings_before = len(world.sink.findings)
    result = world.run(fixture("state-change-terminated.json"))
    assert result == {
        "status": "recorded",
        "event_id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "instance_id": INSTANCE_ID,
        "verdict": "act",
        "final_status": "terminated",
        "checkpoint_status": "TimedOut",
    }
    record = world.record()
    assert record["status"] == "terminated" and record["final_at"].startswith("2026-12-01T10:17:05")
    (late,) = world.sink.findings[findings_before:]
    assert "TimedOut" in late.title and late.team == "vision"


def test_state_change_for_an_instance_never_warned_about_is_ignored() -> None:
    world = World(gpu(), enforce=True)
    result = world.run(fixture("state-change-terminated.json"))
    assert result["status"] == "ignored" and world.ledger.decisions[0][1].verdict == "ignored"
    assert world.ledger.items == {} and world.sink.findings == []


def test_gone_instance_is_recorded_as_ignored_without_raising() -> None:
    world = World(None, enforce=True)
    result = world.run(fixture("interruption-warning.json"))
    assert result["status"] == "ignored" and "no longer exists" in result["reason"]
    assert world.commands.sent == [] and len(world.ledger.decisions) == 1


def test_malformed_and_foreign_events_go_to_the_dlq_with_one_reason() -> None:
    world = World(gpu(), enforce=True)
    bad = json.loads((FIXTURES / "malformed-warning.json").read_text())
    result = world.run(bad)
    assert result["status"] == "rejected" and result["event_id"] == bad["id"]
    assert "instance-id" in result["reason"]
    foreign = fixture("interruption-warning.json") | {"detail-type": "EC2 AMI State Change"}
    assert world.run(foreign)["status"] == "rejected"
    assert [reason for _, reason in world.dlq.messages] == [
        result["reason"],
        "the spot function does not handle aws.ec2 'EC2 AMI State Change' events",
    ]
    assert world.commands.sent == [] and world.ledger.decisions == []


def test_failures_after_the_checkpoint_are_recorded_not_raised() -> None:
    world = World(gpu(), enforce=True)
    world.recovery.fail_deregister = True
    result = world.run(fixture("interruption-warning.json"))
    assert result["checkpoint"]["delivered"] and result["errors"] == ["deregister: elbv2 unavailable"]
    assert "deregister: elbv2 unavailable" in world.sink.findings[0].detail


def test_replacement_launches_from_the_template_and_capacity_failure_is_a_finding() -> None:
    world = World(gpu(), enforce=True, replacement="spot", fallback_instance_types=["g5.2xlarge", "g6.xlarge"])
    result = world.run(fixture("interruption-warning.json"))
    assert result["replacement_id"] == "i-0fedcba9876543210"
    (_, wanted, market) = world.recovery.replaced[0]
    assert [c.instance_type for c in wanted] == ["g5.2xlarge", "g6.xlarge"] and market == "spot"

    world = World(gpu(), enforce=True, replacement="on-demand")
    world.recovery.replacement = Replacement(
        None,
        (LaunchAttempt("g5.xlarge", None, "capacity: InsufficientInstanceCapacity: none left"),),
        "no candidate could be launched (g5.xlarge@any: capacity: InsufficientInstanceCapacity: none left)",
    )
    result = world.run(fixture("interruption-warning.json"))
    assert result["replacement_id"] is None
    record = world.record()
    assert "InsufficientInstanceCapacity" in record["replacement_reason"]
    assert record["replacement_attempts"][0]["error"].startswith("capacity")
    replacement_findings = [f for f in world.sink.findings if f.rule == "spot-replacement"]
    assert len(replacement_findings) == 1 and "InsufficientInstanceCapacity" in replacement_findings[0].detail


def test_a_second_interruption_of_a_stopped_instance_keeps_the_first_record() -> None:
    world = World(gpu(), enforce=True)
    world.run(fixture("interruption-warning.json", **{"instance-action": "stop"}))
    world.run(fixture("state-change-terminated.json", state="stopped"))
    again = fixture("interruption-warning.json") | {"id": "second-warning", "time": "2026-12-02T08:00:00Z"}
    world.run(again)
    records = world.ledger.query_kind("interruption")
    assert sorted(r["event_id"] for r in records) == ["12345678-1234-1234-1234-123456789012", "second-warning"]
    assert world.record()["event_id"] == "second-warning"
    assert interruption_stats(records).total == 2


def test_rebalance_checkpoints_early_or_only_records() -> None:
    world = World(gpu(), enforce=True)
    result = world.run(fixture("rebalance-recommendation.json"))
    assert result["checkpoint"]["delivered"] and len(world.commands.sent) == 1
    assert world.sink.findings[0].severity == "info" and "early checkpoint sent" in world.sink.findings[0].detail
    quiet = World(gpu(), enforce=True, on_rebalance="record")
    assert quiet.run(fixture("rebalance-recommendation.json"))["checkpoint"] == {"attempted": False}
    assert quiet.commands.sent == [] and len(quiet.ledger.decisions) == 1 and quiet.sink.findings


def test_a_retry_after_a_failed_publish_neither_resends_the_checkpoint_nor_relaunches() -> None:
    world = World(gpu(), enforce=True, replacement="spot")
    world.runtime.sink = world.sink = RefusesFirstBatch(RuntimeError("PutEvents throttled"))
    warning = fixture("interruption-warning.json")
    with pytest.raises(RuntimeError, match="PutEvents throttled"):  # fails the invocation, so Lambda retries it
        world.run(warning)
    retried = world.run(warning)
    assert len(world.commands.sent) == 1 and len(world.recovery.replaced) == 1
    assert retried["checkpoint"]["command_id"] == "cmd-1" and retried["replacement_id"] == "i-0fedcba9876543210"
    assert len(world.sink.findings) == 1


def test_a_retried_rebalance_sends_its_early_checkpoint_once() -> None:
    world = World(gpu(), enforce=True)
    world.runtime.sink = world.sink = RefusesFirstBatch(RuntimeError("PutEvents throttled"))
    rebalance = fixture("rebalance-recommendation.json")
    with pytest.raises(RuntimeError):
        world.run(rebalance)
    assert world.run(rebalance)["checkpoint"]["command_id"] == "cmd-1"
    assert len(world.commands.sent) == 1


class LedgerFailingOnce(MemoryLedger):
    """Refuses the n-th interruption write once (AccessDenied is not retried by botocore)."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.writes = 0

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        self.writes += 1
        if self.writes == self.fail_on:
            raise RuntimeError("AccessDeniedException")
        super().put_item(kind, key, item)


def test_a_failure_between_sending_and_recording_never_signals_the_job_twice() -> None:
    world = World(gpu(), enforce=True)
    world.runtime.ledger = world.ledger = world.commands.ledger = LedgerFailingOnce(fail_on=2)
    warning = fixture("interruption-warning.json")
    with pytest.raises(RuntimeError):
        world.run(warning)  # the intent was claimed, the command sent, its id not recorded
    world.run(warning)
    assert len(world.commands.sent) == 1  # the retry found the command by its intent id instead of resending it
    assert world.record()["command_id"] == "cmd-1" and not world.record()["checkpoint_error"]
    (finding,) = world.sink.findings
    assert "in doubt" not in finding.title


def test_a_send_that_failed_is_sent_again_on_the_retry() -> None:
    world = World(gpu(), enforce=True)
    calls = {"n": 0}
    send = world.commands.send

    def throttled_once(*args: Any, **kwargs: Any) -> Sent:
        calls["n"] += 1
        if calls["n"] == 1:  # SSM answered with an error: the command was certainly not sent
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "SendCommand")
        return send(*args, **kwargs)

    world.commands.send = throttled_once  # type: ignore[method-assign]
    warning = fixture("interruption-warning.json")
    with pytest.raises(ClientError):
        world.run(warning)
    assert world.run(warning)["checkpoint"]["delivered"] and calls["n"] == 2
    assert world.record()["checkpoint_error"] is None
