"""Issue 46.1: an act that happened is in the ledger, whatever failed after it.

Through the idle function on moto, the ledger on moto's DynamoDB and its writes throttled by botocore hooks (the
reliability runs' fault injector: every attempt answered ``ThrottlingException``, so botocore's own retries run out).
Before, the runner wrote the outcome before ``after()`` ran: a throttled outcome write after StopInstances left the
sweep's record saying only "failed: ... PutItem", and after a throttle burst the retried sweep no longer listed the
stopped instance, so its decision kept no outcome at all. Now the runner writes the act's intent before the call and
completes it after; a later run repairs an intent left open from the cloud's state (the instance is stopped).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.domain.decision import Decision
from governor.idle.handler import handle as idle_handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.testing.faults import ApiCall, FaultInjector
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _state

REGION = "us-east-1"
INTENT_KIND = "action-intent"  # governor.acts.INTENT_KIND


@pytest.fixture
def world() -> Iterator[tuple[Any, str, Runtime, str]]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        (idle,) = _launch(ec2, "g5.xlarge")
        _metrics(idle, 0.3)
        table = "governor-ledger"
        create_ledger_table(table, REGION)
        runtime = Runtime(
            policy=parse_policy({"idle": {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100}}),
            ledger=DynamoLedger(table, region=REGION, sleep=lambda _: None),
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region=REGION,
        )
        yield ec2, idle, runtime, table


def _ledger_puts(table: str, *, after_stop: bool, kinds: tuple[str, ...] = ("action",)) -> Callable[[ApiCall], bool]:
    """Throttle the ledger's writes of these kinds (or, ``after_stop``, every ledger write once StopInstances ran)."""
    stopped = {"yes": False}

    def throttled(call: ApiCall) -> bool:
        if call.operation == "StopInstances":
            stopped["yes"] = True
            return False
        if call.service != "dynamodb":
            return False
        if after_stop:
            return stopped["yes"] and call.operation in ("PutItem", "BatchWriteItem")
        pk = str(((call.params.get("Item") or {}).get("pk") or {}).get("S") or "")
        return call.operation == "PutItem" and pk.split("#", 1)[0] in kinds

    return throttled


def _decision(ledger: DynamoLedger, instance: str, event_id: str) -> dict[str, Any]:
    (found,) = [d for d in ledger.query_kind("decision") if d["resource"] == instance and d["event_id"] == event_id]
    return found


def test_a_throttled_outcome_write_after_a_stop_leaves_the_stop_in_the_ledger(world: Any) -> None:
    ec2, idle, runtime, table = world
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)  # warned
    at = T0 + dt.timedelta(minutes=30)
    faults = FaultInjector(1.0, ("throttling",), only=_ledger_puts(table, after_stop=False))
    with faults, faults.label("sweep-2"):
        result = idle_handle(_event(at, "sweep-2"), runtime, aws)
    assert _state(ec2, idle) in ("stopping", "stopped")
    ledger = runtime.ledger
    assert isinstance(ledger, DynamoLedger)
    recorded = _decision(ledger, idle, "sweep-2")
    assert recorded["evidence"]["done"][0] == "stopped", recorded["evidence"]["done"]  # not "failed: ... PutItem"
    assert result["done"][idle][0] == "stopped"
    intent = ledger.get_item(INTENT_KIND, f"{idle}#sweep-2#stop")
    assert intent is not None and not intent.get("completed_at")  # written before StopInstances, left open
    later = at + dt.timedelta(minutes=15)
    idle_handle(_event(later, "sweep-3"), runtime, aws)  # the next sweep: it no longer lists the stopped instance
    outcome = ledger.get_item("action", f"{idle}#sweep-2#stop")
    assert outcome is not None and outcome["ok"] is True and outcome["done"].startswith("stopped")
    closed = ledger.get_item(INTENT_KIND, f"{idle}#sweep-2#stop")
    assert closed is not None and closed.get("completed_at")


def test_after_a_throttle_burst_the_retried_sweep_records_the_stop_it_no_longer_lists(world: Any) -> None:
    ec2, idle, runtime, table = world
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    at = T0 + dt.timedelta(minutes=30)
    faults = FaultInjector(1.0, ("throttling",), only=_ledger_puts(table, after_stop=True))
    with faults, faults.label("sweep-2"), pytest.raises(ClientError, match="ThrottlingException"):
        idle_handle(_event(at, "sweep-2"), runtime, aws)  # every ledger write after the stop throttled
    assert _state(ec2, idle) in ("stopping", "stopped")
    ledger = runtime.ledger
    assert isinstance(ledger, DynamoLedger)
    assert _decision(ledger, idle, "sweep-2")["evidence"].get("done") is None  # the burst: nothing after the stop
    idle_handle(_event(at, "sweep-2", delivered=at + dt.timedelta(minutes=1)), runtime, aws)  # Lambda's retry
    recorded = _decision(ledger, idle, "sweep-2")["evidence"]
    assert (recorded.get("done") or ["nothing recorded"])[0].startswith("stopped"), recorded
    assert "repaired" in recorded
    outcome = ledger.get_item("action", f"{idle}#sweep-2#stop")
    assert outcome is not None and outcome["ok"] is True


# --- the mechanism is the runner's, for every capability that acts ------------------------------------------------


def test_an_act_no_capability_can_read_back_is_recorded_as_unknown_once_its_retries_are_over() -> None:
    """A network revoke whose outcome write was lost: no reader confirms it, so after an hour the ledger says so."""
    from governor import acts
    from governor.network.actions import RevokeIngress

    ledger = MemoryLedger()
    decision = Decision(
        policy="network",
        verdict="act",
        resource="sg-0123456789abcdef0",
        actions=[RevokeIngress(enforced=True, group_id="sg-0123456789abcdef0", rule_ids=["sgr-1"])],
        reasons=["SSH open to the world"],
    )
    ledger.record(decision, event_id="ct-1")
    started = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    intents = acts.Intents(ledger, decision, "ct-1", started)
    intents.intend(decision.actions[0])  # the call was made; the invocation ended before writing anything else
    assert acts.repair(ledger, now=started + dt.timedelta(minutes=10), event_id="sweep-x") == 0  # retries may come
    assert acts.repair(ledger, now=started + dt.timedelta(hours=2), event_id="sweep-y") == 1
    entry = ledger.entry("sg-0123456789abcdef0", "network", "ct-1")
    assert entry is not None and entry.evidence["done"] == ["revoke_ingress: outcome not recorded"]
    item = ledger.get_item("action", "sg-0123456789abcdef0#ct-1#revoke_ingress")
    assert item is not None and item["ok"] is False and item["error_code"] == "OutcomeNotRecorded"


def test_an_intent_whose_outcome_was_recorded_only_completes_the_decision() -> None:
    from governor import acts
    from governor.domain.actions import Outcome
    from governor.keys.actions import EnableKeyRotation

    ledger = MemoryLedger()
    decision = Decision(
        policy="keys",
        verdict="act",
        resource="key-1",
        actions=[EnableKeyRotation(enforced=True, key_id="key-1")],
        reasons=["rotation off"],
    )
    started = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    intents = acts.Intents(ledger, decision, "ct-2", started)
    intents.intend(decision.actions[0])
    action = decision.actions[0]
    recorded = acts.outcome_item(decision, action, Outcome(ok=True, done="rotation enabled"), "ct-2")
    ledger.put_item("action", "key-1#ct-2#enable_key_rotation", recorded)
    assert acts.repair(ledger, now=started + dt.timedelta(minutes=6), event_id="sweep-z") == 1
    entry = ledger.entry("key-1", "keys", "ct-2")
    assert entry is not None and entry.evidence["done"] == ["rotation enabled"]
