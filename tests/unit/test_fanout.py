"""The organisation fan-out's planner and consumer on in-memory fakes (governor.fanout): what reaches each target's
sweep, what a failing target becomes, and how each target's state stays its own."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from governor import fanout
from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND
from governor.idle.domain import MARK_KIND
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

AT = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
HUB, B, C = "111111111111", "222222222222", "333333333333"
CONFIG = fanout.FanoutConfig(queue_url="q", regions=("us-east-1", "eu-west-1"), home_account=HUB, accounts=(B, C))


def runtime() -> Runtime:
    return Runtime(
        parse_policy({"idle": {"enforce": True}}),
        MemoryLedger(),
        MemorySink(),
        MemoryDeadLetters(),
        region="us-east-1",
        extras={"fanout": CONFIG},
    )


class Queue:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def send(self, bodies: Any) -> None:
        self.bodies.extend(bodies)


def schedule() -> dict[str, Any]:
    return {"id": "round", "detail-type": "Scheduled Event", "source": "aws.scheduler", "time": "2026-12-03T12:00:00Z"}


def record(target: fanout.Target, attempt: int = 1, message_id: str = "m1") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "body": target.model_dump_json(),
        "attributes": {"ApproximateReceiveCount": str(attempt)},
        "eventSource": "aws:sqs",
    }


def target(account: str = B, region: str = "eu-west-1", **extra: Any) -> fanout.Target:
    return fanout.Target(sweep="idle", account=account, region=region, round_id="round", time=AT, **extra)


def test_the_planner_sends_every_account_in_every_region_hub_first() -> None:
    queue = Queue()
    answer = fanout.dispatch(schedule(), runtime(), "idle", lambda e, r: {}, queue=lambda c: queue)
    assert answer is not None and answer["targets"] == 6
    assert [(b["account"], b["region"]) for b in queue.bodies] == [
        (a, r) for a in (HUB, B, C) for r in ("us-east-1", "eu-west-1")
    ]


def test_each_target_sweeps_its_own_scheduled_event_in_its_region() -> None:
    seen: list[tuple[dict[str, Any], str | None]] = []
    rt = runtime()
    answer = fanout.consume(
        {"Records": [record(target())]}, rt, lambda e, r: seen.append((e, r.region)) or {"status": "swept"}, attempts=3
    )
    assert answer["batchItemFailures"] == []
    ((event, region),) = seen
    assert (event["account"], event["region"], event["detail-type"], region) == (
        B,
        "eu-west-1",
        "Scheduled Event",
        "eu-west-1",
    )
    assert event["id"] == target().event_id == target().event_id  # the same id on every delivery: idempotent
    assert event["id"] != target(region="us-east-1").event_id


def test_a_failure_before_the_last_attempt_is_retried_and_the_last_becomes_a_finding() -> None:
    rt = runtime()

    def broken(event: dict[str, Any], scoped: Any) -> dict[str, Any]:
        raise PermissionError("AccessDenied assuming GovernorSpoke-eu-west-1")

    first = fanout.consume({"Records": [record(target(), attempt=1)]}, rt, broken, attempts=3)
    assert first["batchItemFailures"] == [{"itemIdentifier": "m1"}] and not rt.sink.findings
    last = fanout.consume({"Records": [record(target(), attempt=3)]}, rt, broken, attempts=3)
    assert last["batchItemFailures"] == []  # done with: it never blocks or repeats for the others
    (finding,) = rt.sink.findings
    assert (finding.rule, finding.account, finding.region, finding.severity) == (
        fanout.SWEEP_FAILED,
        B,
        "eu-west-1",
        "warning",
    )
    assert "AccessDenied" in finding.detail
    (_, decision), *_ = rt.ledger.decisions
    assert decision.rule == fanout.SWEEP_FAILED and decision.evidence["attempts"] == 3


def test_a_message_the_planner_did_not_write_is_parked_not_retried() -> None:
    rt = runtime()
    bad = {"messageId": "x", "body": json.dumps({"sweep": "idle", "account": "me"}), "eventSource": "aws:sqs"}
    answer = fanout.consume({"Records": [bad]}, rt, lambda e, r: {}, attempts=3)
    assert answer["batchItemFailures"] == [] and len(rt.dead_letters.messages) == 1


def test_each_target_keeps_its_own_breaker_and_sees_only_its_own_marks() -> None:
    ledger = MemoryLedger()
    b, c = fanout.TargetLedger(ledger, B, "eu-west-1"), fanout.TargetLedger(ledger, C, "eu-west-1")
    b.put_item(BREAKER_KIND, BREAKER_KEY, {"tripped_at": AT.isoformat()})
    assert b.get_item(BREAKER_KIND, BREAKER_KEY) is not None and c.get_item(BREAKER_KIND, BREAKER_KEY) is None
    assert ledger.get_item(BREAKER_KIND, fanout.breaker_key(B, "eu-west-1")) is not None
    b.put_item(MARK_KIND, "i-0b", {"instance_id": "i-0b"})
    c.put_item(MARK_KIND, "i-0c", {"instance_id": "i-0c"})
    ledger.put_item(MARK_KIND, "i-0h", {"instance_id": "i-0h"})  # from Stop now in the hub: unstamped
    assert sorted(m["instance_id"] for m in b.query_kind(MARK_KIND)) == ["i-0b", "i-0h"]
    assert fanout.open_breakers(ledger) == [f"{B}#eu-west-1"]


def test_the_organisation_breaker_holds_the_round_report_only() -> None:
    rt = runtime()
    for account in (B, C):
        fanout.TargetLedger(rt.ledger, account, "us-east-1").put_item(
            BREAKER_KIND, BREAKER_KEY, {"tripped_at": AT.isoformat()}
        )
    queue = Queue()
    config = CONFIG.model_copy(update={"breaker_targets": 2})
    answer = fanout.plan(schedule(), rt, "idle", config, queue=queue)
    assert answer["breaker"] == "open" and all(b["hold"] for b in queue.bodies)
    (alarm,) = rt.sink.findings
    assert alarm.rule == fanout.ORG_BREAKER and alarm.severity == "critical"
    enforced: list[bool] = []
    held = fanout.Target.model_validate(queue.bodies[0])
    fanout.run_target(held, rt, lambda e, r: enforced.append(r.policy.idle.enforce) or {})
    assert enforced == [False] and rt.policy.idle.enforce  # only the held round's copy is report-only
    network = fanout.plan(schedule(), rt, "network", config, queue=Queue())
    assert network["breaker"] == "closed"  # idle breakers hold idle rounds, not the network drift sweep


@pytest.mark.parametrize("event", [{"detail-type": "Stop Requested", "source": "governor.interactions", "id": "s"}, {}])
def test_anything_else_goes_on_as_in_a_single_account(event: dict[str, Any]) -> None:
    assert fanout.dispatch(event, runtime(), "idle", lambda e, r: {}) is None
    single = runtime()
    single.extras.clear()
    assert fanout.dispatch(schedule(), single, "idle", lambda e, r: {}) is None


def test_account_wide_parts_of_a_sweep_run_in_the_first_region_only() -> None:
    from governor.keys.handler import ALL_KINDS, parse_trigger

    assert fanout.SWEEP_PARTS["keys"][0] == ALL_KINDS
    planned = fanout.targets("keys", [HUB, B], ["us-east-1", "eu-west-1"], round_id="r", time=AT)
    kinds = {(t.account, t.region): t.detail["kinds"] for t in planned}
    assert kinds[(B, "us-east-1")] == ["kms", "access_keys", "secrets"]  # IAM is global: once per account
    assert kinds[(B, "eu-west-1")] == ["kms", "secrets"]
    sweep = parse_trigger(planned[1].event())
    assert sweep.kinds == ("kms", "secrets") and sweep.region == "eu-west-1"  # type: ignore[union-attr]
    only_iam = fanout.targets("keys", [B], ["us-east-1", "eu-west-1"], round_id="r", time=AT, parts=["access_keys"])
    assert [(t.region, t.detail["kinds"]) for t in only_iam] == [("us-east-1", ["access_keys"])]
    assert fanout.targets("idle", [B], ["us-east-1"], round_id="r", time=AT)[0].event()["detail"] == {}
