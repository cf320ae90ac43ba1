"""Batched ledger writes: a sweep's decisions in BatchWriteItem requests of 25, what DynamoDB leaves unprocessed
retried with backoff, and the same promise as single writes (an "act" entry of the same event is never erased)."""

from __future__ import annotations

from typing import Any

import pytest
from moto import mock_aws

from governor.adapters import ledger as ledger_module
from governor.adapters.aws import client
from governor.adapters.ledger import BATCH_ATTEMPTS, DynamoLedger, UnprocessedItemsError
from governor.domain.decision import Decision
from governor.idle.actions import Stop
from governor_cli.demo.bootstrap import create_ledger_table


def _decision(resource: str, verdict: str = "ok") -> Decision:
    actions = [Stop(enforced=True)] if verdict == "act" else []
    return Decision(policy="idle", verdict=verdict, resource=resource, actions=actions, reasons=[verdict])  # type: ignore[arg-type]


class CountingClient:
    """The real (moto) client, counting requests; ``hold_back`` leaves that many items unprocessed per request
    for the first ``flaky`` BatchWriteItem requests, as DynamoDB does when a partition is throttled."""

    def __init__(self, real: Any, hold_back: int = 0, flaky: int = 0) -> None:
        self.real = real
        self.hold_back = hold_back
        self.flaky = flaky
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.real, name)

        def call(**kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "batch_write_item" and self.flaky > 0:
                self.flaky -= 1
                ((table, requests),) = kwargs["RequestItems"].items()
                done, left = requests[self.hold_back :], requests[: self.hold_back]
                if done:
                    method(RequestItems={table: done})
                return {"UnprocessedItems": {table: left} if left else {}}
            return method(**kwargs)

        return call


@pytest.fixture
def table() -> Any:
    with mock_aws():
        client.cache_clear()
        create_ledger_table("ledger")
        yield "ledger"
    client.cache_clear()


def _ledger(counting: CountingClient, sleeps: list[float]) -> DynamoLedger:
    ledger = DynamoLedger("ledger", region="us-east-1", sleep=sleeps.append)
    ledger._client = counting
    return ledger


def test_a_sweep_is_written_in_requests_of_25(table: str) -> None:
    counting = CountingClient(client("dynamodb", "us-east-1"))
    ledger = _ledger(counting, [])
    refs = ledger.record_many([_decision(f"i-{n:04d}") for n in range(1000)], event_id="sweep-1")
    assert len(refs) == 1000
    assert counting.calls.get("batch_write_item") == 40  # 1,000 / 25
    assert counting.calls.get("batch_get_item") == 10  # "ok" entries are checked for an "act" entry, 100 keys a call
    assert "put_item" not in counting.calls
    assert len(ledger.query_kind("decision")) == 1000


def test_unprocessed_items_are_retried_with_growing_backoff(table: str) -> None:
    sleeps: list[float] = []
    counting = CountingClient(client("dynamodb", "us-east-1"), hold_back=10, flaky=3)
    ledger = _ledger(counting, sleeps)
    ledger.record_many([_decision(f"i-{n:03d}") for n in range(25)], event_id="sweep-2")
    entries = ledger.query_kind("decision")
    assert sorted(e["resource"] for e in entries) == [f"i-{n:03d}" for n in range(25)]  # nothing lost
    assert counting.calls["batch_write_item"] == 4  # the request, then the held-back items three more times
    assert len(sleeps) == 3
    caps = [min(ledger_module.BACKOFF_CAP, ledger_module.BACKOFF_BASE * 2**n) for n in range(3)]
    assert all(0 <= s <= cap for s, cap in zip(sleeps, caps, strict=True))


def test_items_still_unprocessed_after_every_attempt_fail_the_sweep(table: str) -> None:
    counting = CountingClient(client("dynamodb", "us-east-1"), hold_back=25, flaky=BATCH_ATTEMPTS)
    ledger = _ledger(counting, [])
    with pytest.raises(UnprocessedItemsError, match="25 items unprocessed"):
        ledger.record_many([_decision(f"i-{n:03d}") for n in range(25)], event_id="sweep-3")
    assert counting.calls["batch_write_item"] == BATCH_ATTEMPTS


def test_a_retried_sweep_keeps_the_act_entry_of_the_first_attempt(table: str) -> None:
    ledger = DynamoLedger("ledger", region="us-east-1", sleep=lambda _: None)
    ledger.record_many([_decision("i-acted", "act"), _decision("i-other")], event_id="sweep-4")
    # The retry of the same schedule event now finds i-acted fine and says "ok" about both.
    ledger.record_many([_decision("i-acted"), _decision("i-other")], event_id="sweep-4")
    verdicts = {e["resource"]: e["verdict"] for e in ledger.query_kind("decision")}
    assert verdicts == {"i-acted": "act", "i-other": "ok"}
    # A later sweep (another event) is a new entry, as with single writes.
    ledger.record_many([_decision("i-acted")], event_id="sweep-5")
    assert len(ledger.query_kind("decision")) == 3


class UnreadOnce(CountingClient):
    """The first BatchGetItem answers only its first ``answered`` keys and returns the rest as UnprocessedKeys."""

    def __init__(self, real: Any, answered: int) -> None:
        super().__init__(real)
        self.answered = answered

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls["batch_get_item"] = self.calls.get("batch_get_item", 0) + 1
        ((table, request),) = RequestItems.items()
        if self.answered < 0:
            return dict(self.real.batch_get_item(RequestItems=RequestItems))
        keys, self.answered = request["Keys"], -1
        answer = self.real.batch_get_item(RequestItems={table: {**request, "Keys": keys[: len(keys) // 2]}})
        return {**answer, "UnprocessedKeys": {table: {**request, "Keys": keys[len(keys) // 2 :]}}}


def test_keyed_items_are_written_in_requests_of_25_and_read_in_requests_of_100(table: str) -> None:
    counting = CountingClient(client("dynamodb", "us-east-1"))
    ledger = _ledger(counting, [])
    ledger.put_many(("idle-mark", f"i-{n:03d}", {"n": n}) for n in range(250))
    assert counting.calls == {"batch_write_item": 10}
    found = ledger.get_many("idle-mark", [f"i-{n:03d}" for n in range(300)])  # 50 of them were never written
    assert counting.calls["batch_get_item"] == 3
    assert sorted(found) == [f"i-{n:03d}" for n in range(250)]
    assert found["i-007"] == ledger.get_item("idle-mark", "i-007")  # the same item a single read returns
    assert found["i-007"]["n"] == 7


def test_the_same_key_twice_in_one_batch_keeps_the_last_item(table: str) -> None:
    ledger = DynamoLedger("ledger", region="us-east-1", sleep=lambda _: None)
    # BatchWriteItem refuses a request naming one key twice; the last put wins, as with single puts in that order.
    ledger.put_many(
        [("outbox", "f-1", {"v": "staged"}), ("outbox", "f-2", {"v": "x"}), ("outbox", "f-1", {"v": "sent"})]
    )
    assert ledger.get_item("outbox", "f-1")["v"] == "sent"  # type: ignore[index]


def test_unprocessed_puts_and_keys_are_retried_until_nothing_is_lost(table: str) -> None:
    sleeps: list[float] = []
    counting = CountingClient(client("dynamodb", "us-east-1"), hold_back=10, flaky=2)
    ledger = _ledger(counting, sleeps)
    ledger.put_many(("outbox", f"f-{n:02d}", {"n": n}) for n in range(25))
    assert counting.calls["batch_write_item"] == 3
    reading = UnreadOnce(client("dynamodb", "us-east-1"), answered=1)
    ledger._client = reading
    found = ledger.get_many("outbox", [f"f-{n:02d}" for n in range(25)])
    assert sorted(found) == [f"f-{n:02d}" for n in range(25)]
    assert reading.calls["batch_get_item"] == 2
    assert len(sleeps) == 3  # two write retries and one read retry, each after a backoff


def test_the_memory_ledger_answers_batched_calls_like_single_ones() -> None:
    from governor_cli.testing.memory import MemoryLedger

    memory = MemoryLedger()
    memory.put_many([("outbox", "f-1", {"v": 1}), ("outbox", "f-2", {"v": 2}), ("outbox", "f-1", {"v": 3})])
    assert memory.get_many("outbox", ["f-1", "f-3"]) == {"f-1": {"v": 3}}
