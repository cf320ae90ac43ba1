"""The lifecycle handler on in-memory fakes: tagging, usage sessions, reconciliation, and bad input to the DLQ."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from governor.domain.costs import PriceBook, gpu_hours_and_cost
from governor.domain.fleet import Instance
from governor.lifecycle.handler import Adapters, handle
from governor.policy import FleetPolicy, Policy, parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.lifecycle_data import as_gpu_launch, envelope, one

LAUNCH_TIME = dt.datetime(2023, 7, 10, 11, 55, 21, tzinfo=dt.UTC)
GPU_ID = "i-0dbc91f429e48eeed"  # the real record's instance id
ACCOUNT = "123837392027"  # the real record's account


@dataclass
class FakeEc2:
    """EC2 as the handler sees it: re-reads, listings and tagging over a dict of instances."""

    by_id: dict[str, Instance] = field(default_factory=dict)
    tagged: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    reads: int = 0

    def instance(self, instance_id: str) -> Instance | None:
        self.reads += 1
        return self.by_id.get(instance_id)

    def instances(self, instance_ids: list[str]) -> list[Instance]:
        self.reads += 1
        return [self.by_id[i] for i in instance_ids if i in self.by_id]

    def gpu_instances(self, fleet: FleetPolicy, states: Any = ("running",)) -> list[Instance]:
        return [i for i in self.by_id.values() if i.state in states and fleet.is_gpu_type(i.type)]

    def tag(self, resource_id: str, tags: dict[str, str]) -> None:
        self.tagged.append((resource_id, tags))
        instance = self.by_id[resource_id]
        self.by_id[resource_id] = replace(instance, tags={**instance.tags, **tags})


@dataclass
class World:
    runtime: Runtime
    ledger: MemoryLedger
    sink: MemorySink
    dlq: MemoryDeadLetters
    ec2: FakeEc2
    clock: list[dt.datetime]

    def send(self, event: Any) -> dict[str, Any]:
        caps = Adapters(
            reader=self.ec2,
            tagger=self.ec2,
            prices=PriceBook(self.runtime.policy.pricing),
            now=lambda: self.clock[0],
        )
        return handle(event, self.runtime, caps)

    def sessions(self) -> list[dict[str, Any]]:
        """Session items as the ledger export shows them (the in-memory ledger does not store ``kind``)."""
        return [{**item, "kind": "session"} for item in self.ledger.query_kind("session")]


def make_world(policy: Policy | None = None) -> World:
    ledger, sink, dlq = MemoryLedger(), MemorySink(), MemoryDeadLetters()
    runtime = Runtime(
        policy=policy or parse_policy({"lifecycle": {"enforce": True}}),
        ledger=ledger,
        sink=sink,
        dead_letters=dlq,
        region="us-east-1",
    )
    return World(runtime, ledger, sink, dlq, FakeEc2(), [dt.datetime(2026, 12, 2, 7, tzinfo=dt.UTC)])


def gpu(instance_id: str = GPU_ID, state: str = "running", tags: dict[str, str] | None = None, **kw: Any) -> Instance:
    return Instance(
        id=instance_id,
        type=kw.pop("type", "g5.xlarge"),
        state=state,
        launch_time=kw.pop("launch_time", LAUNCH_TIME),
        tags=tags if tags is not None else {"team": "vision"},
        zone="us-east-1a",
        **kw,
    )


def state_event(state: str, at: str, instance_id: str = GPU_ID, event_id: str | None = None) -> dict[str, Any]:
    return events.envelope(
        "EC2 Instance State-change Notification",
        "aws.ec2",
        {"instance-id": instance_id, "state": state},
        event_id=event_id or f"{state}-{at}",
        time=at,
        account=ACCOUNT,
    )


def scheduled(event_id: str = "sched-1") -> dict[str, Any]:
    return events.scheduled(event_id=event_id, time="2026-12-02T07:00:00Z", account=ACCOUNT)


def test_gpu_launch_is_tagged_once_and_recorded_with_its_creator() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(state="pending", tags={"team": "vision", "StratusRedTeam": "true"})
    result = world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))
    assert result["tagged"] == 1
    [(instance_id, tags)] = world.ec2.tagged
    assert instance_id == GPU_ID
    assert tags == {
        "governor:creator": "arn:aws:iam::123837392027:user/bert-jan",
        "governor:launched-at": "2023-07-10T11:55:21Z",
    }
    launch = world.ledger.get_item("launch", GPU_ID)
    assert launch is not None and launch["creator"] == "arn:aws:iam::123837392027:user/bert-jan"
    [(event_id, decision)] = world.ledger.decisions
    assert event_id == "evt-1" and decision.verdict == "act"
    world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))  # redelivery: tags already there
    assert len(world.ec2.tagged) == 1


def test_report_only_records_the_launch_but_does_not_tag() -> None:
    world = make_world(parse_policy({}))
    world.ec2.by_id[GPU_ID] = gpu(state="pending")
    assert world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))["tagged"] == 0
    assert world.ec2.tagged == []
    assert world.ledger.get_item("launch", GPU_ID) is not None


def test_a_tag_added_between_decision_and_action_is_not_overwritten() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(state="pending", tags={"governor:creator": "ana@example.com", "team": "nlp"})
    world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))
    assert world.ec2.tagged == [(GPU_ID, {"governor:launched-at": "2023-07-10T11:55:21Z"})]
    assert world.ec2.by_id[GPU_ID].tags["governor:creator"] == "ana@example.com"


def test_failed_and_non_gpu_launches_open_nothing_and_tag_nothing() -> None:
    world = make_world()
    for raw in (one("Client.VcpuLimitExceeded", "AssumedRole"), one(None, "IAMUser")):
        world.send(envelope(raw))
    assert world.ec2.tagged == [] and world.sessions() == []
    assert world.ledger.query_kind("launch") == []
    assert {d.verdict for _, d in world.ledger.decisions} == {"ignored"}
    assert world.ec2.reads == 0


def test_session_opens_at_running_and_closes_at_stop_with_gpu_hours() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(type="g5.12xlarge", tags={"team": "vision", "owner": "ana"})
    world.send(state_event("running", "2026-12-01T08:00:00Z"))
    world.send(state_event("running", "2026-12-01T08:00:00Z", event_id="retry"))  # duplicate delivery
    [session] = world.sessions()
    assert session["end"] is None and session["gpus"] == 4 and session["team"] == "vision" and session["owner"] == "ana"
    assert (session["lifecycle"], session["zone"], session["price_per_hour"]) == ("on-demand", "us-east-1a", 5.672)
    world.ec2.by_id[GPU_ID] = gpu(type="g5.12xlarge", state="stopped", tags={"team": "vision", "owner": "ana"})
    world.send(state_event("stopping", "2026-12-01T10:30:00Z"))
    world.send(state_event("stopped", "2026-12-01T10:31:00Z"))  # already closed: nothing changes
    [closed] = world.sessions()
    assert closed["end"] == "2026-12-01T10:30:00+00:00" and closed["closed_by"] == "state-change:stopping"
    [row] = gpu_hours_and_cost(
        world.sessions(), dt.datetime(2026, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    )
    assert (row.key, row.instance_hours, row.gpu_hours, row.cost_usd) == ("vision", 2.5, 10.0, 14.18)
    assert world.ledger.get_item("open-session", GPU_ID)["open"] is False  # type: ignore[index]


def test_second_run_period_is_a_second_session() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu()
    for state, at in [
        ("running", "2026-12-01T08:00:00Z"),
        ("stopped", "2026-12-01T09:00:00Z"),
        ("running", "2026-12-01T12:00:00Z"),
        ("terminated", "2026-12-01T12:30:00Z"),
    ]:
        world.send(state_event(state, at))
    sessions = sorted(world.sessions(), key=lambda s: s["start"])
    assert [(s["start"][11:16], s["end"][11:16]) for s in sessions] == [("08:00", "09:00"), ("12:00", "12:30")]


def test_non_gpu_instance_opens_no_session() -> None:
    world = make_world()
    world.ec2.by_id["i-0123456789abcdef0"] = gpu("i-0123456789abcdef0", type="t3.micro")
    world.send(state_event("running", "2026-12-01T08:00:00Z", instance_id="i-0123456789abcdef0"))
    assert world.sessions() == []
    assert world.ledger.decisions[0][1].verdict == "ignored"


def test_instance_without_team_is_a_finding() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(tags={})
    world.send(state_event("running", "2026-12-01T08:00:00Z"))
    [finding] = world.sink.findings
    assert (finding.rule, finding.severity, finding.resource) == ("lifecycle.no-team", "warning", GPU_ID)
    assert world.sessions()[0]["team"] == "unknown"


def test_launch_event_after_running_event_fills_in_the_owner() -> None:
    world = make_world(parse_policy({}))
    world.ec2.by_id[GPU_ID] = gpu(tags={"team": "vision"})
    world.send(state_event("running", "2023-07-10T11:56:00Z"))
    assert world.sessions()[0]["owner"] == "unknown"
    world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))
    [session] = world.sessions()
    assert session["owner"] == "arn:aws:iam::123837392027:user/bert-jan" and session["ownership_source"] == "creator"


def test_recorded_creator_is_the_owner_even_when_report_only() -> None:
    world = make_world(parse_policy({}))
    world.ec2.by_id[GPU_ID] = gpu(state="pending", tags={"team": "vision"})
    world.send(envelope(as_gpu_launch(one(None, "IAMUser"))))
    world.ec2.by_id[GPU_ID] = gpu(tags={"team": "vision"})
    world.send(state_event("running", "2023-07-10T11:56:00Z"))
    assert world.sessions()[0]["owner"] == "arn:aws:iam::123837392027:user/bert-jan"


def test_reconcile_closes_vanished_and_opens_unseen_sessions() -> None:
    world = make_world()
    gone, seen, unseen = "i-00000000000000001", "i-00000000000000002", "i-00000000000000003"
    world.ec2.by_id[gone] = gpu(gone)
    world.ec2.by_id[seen] = gpu(seen, launch_time=dt.datetime(2026, 12, 1, 7, 59, tzinfo=dt.UTC))
    world.send(state_event("running", "2026-12-01T08:00:00Z", instance_id=gone))
    world.send(state_event("running", "2026-12-01T08:00:00Z", instance_id=seen))
    del world.ec2.by_id[gone]  # terminated and gone; the event was lost
    world.ec2.by_id[unseen] = gpu(unseen, launch_time=dt.datetime(2026, 12, 1, 20, tzinfo=dt.UTC), tags={})
    result = world.send(scheduled())
    assert (result["opened"], result["closed"], result["no_team"]) == (1, 1, 1)
    by_id = {s["instance_id"]: s for s in world.sessions()}
    assert by_id[gone]["end"] == "2026-12-02T07:00:00+00:00" and by_id[gone]["end_estimated"] is True
    assert by_id[unseen]["start"] == "2026-12-01T20:00:00+00:00" and by_id[unseen]["opened_by"] == "reconcile"
    assert by_id[seen]["end"] is None
    assert [f.resource for f in world.sink.findings] == [unseen]
    again = world.send(scheduled("sched-2"))
    assert (again["opened"], again["closed"]) == (0, 0)


def test_reconcile_splits_a_missed_stop_and_start() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(launch_time=dt.datetime(2026, 12, 1, 7, 59, tzinfo=dt.UTC))
    world.send(state_event("running", "2026-12-01T08:00:00Z"))
    world.ec2.by_id[GPU_ID] = gpu(launch_time=dt.datetime(2026, 12, 1, 18, tzinfo=dt.UTC))
    world.send(scheduled())
    sessions = sorted(world.sessions(), key=lambda s: s["start"])
    assert [(s["start"], s["end"]) for s in sessions] == [
        ("2026-12-01T08:00:00+00:00", "2026-12-01T18:00:00+00:00"),
        ("2026-12-01T18:00:00+00:00", None),
    ]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({**state_event("running", "2026-12-01T08:00:00Z"), "detail": {"state": "running"}}, "instance-id"),
        (
            {**state_event("running", "2026-12-01T08:00:00Z"), "detail": {"instance-id": GPU_ID, "state": "melting"}},
            "state",
        ),
        (
            {
                **state_event("running", "2026-12-01T08:00:00Z"),
                "detail": {"instance-id": "not-an-id", "state": "running"},
            },
            "instance-id",
        ),
        (
            {**state_event("running", "2026-12-01T08:00:00Z"), "detail-type": "EC2 Spot Instance Interruption Warning"},
            "does not handle",
        ),
        ({**envelope(one(None, "IAMUser")), "detail": {"eventName": "RunInstances"}}, "eventTime"),
        ("not an event", "JSON object"),
    ],
)
def test_bad_input_goes_to_the_dlq_and_changes_nothing(event: Any, reason: str) -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu()
    result = world.send(event)
    assert result["status"] == "rejected" and reason in result["reason"]
    [(parked, why)] = world.dlq.messages
    assert parked == event and reason in why
    assert world.ledger.decisions == [] and world.ledger.items == {} and world.ec2.tagged == []
