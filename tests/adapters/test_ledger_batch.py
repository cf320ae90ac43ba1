"""Batched ledger writes: a sweep's decisions in BatchWriteItem requests of 25, what DynamoDB leaves unprocessed
retried with backoff, and the same promise as single writes (an "act" entry of the same event is never erased)."""

from __future__ import annotations

from typing import Any

import pytest
from moto import mock_aws

from governor.adapters import ledger as ledger_module
from governor.adapters.aws import client
from governor.adapters.ledger import BATCH_ATTEMPTS, DynamoLedger, UnprocessedItemsError
from governor.domain.actions import Stop
from governor.domain.decision import Decision
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
