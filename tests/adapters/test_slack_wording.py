"""Issue 48: what a Slack message promises matches what will happen (the Stop now confirmation in report-only mode),
through the notifier handler with its ledger on DynamoDB (moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.testing.events import finding
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.unit.test_notify_handler import FakeOutbox
from tests.unit.test_owner_digest import NOW, warning


@pytest.fixture
def ledger() -> Iterator[DynamoLedger]:
    with mock_aws():
        create_ledger_table("ledger")
        yield DynamoLedger("ledger", region="us-east-1")


def _posted(ledger: DynamoLedger, enforced: bool) -> str:
    from governor.notifier.handler import handle

    policy = parse_policy(
        {
            "notifications": {"enforce": True, "immediate": "all"},
            "interactions": {"enforce": True, "buttons": True},
        }
    )
    runtime = Runtime(policy=policy, ledger=ledger, sink=MemorySink(), dead_letters=MemoryDeadLetters())
    warned = warning("i-0abc", "ana@demo.example", 4.1)
    actions: list[dict[str, Any]] = [{**warned.actions[0], "enforced": enforced}]
    body = warned.model_copy(update={"actions": actions, "enforced": enforced}).model_dump(mode="json")
    outbox = FakeOutbox()
    handle(finding(body, event_id=f"e-{enforced}", time=NOW.isoformat()), runtime, outbox, NOW)
    ((_, messages),) = outbox.slack
    confirms = [
        e["confirm"]["text"]["text"]
        for m in messages
        for b in m["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if "confirm" in e
    ]
    assert len(confirms) == 1, json.dumps(messages)[:500]
    return str(confirms[0])


def test_stop_now_in_report_only_mode_does_not_promise_a_stop(ledger: DynamoLedger) -> None:
    text = _posted(ledger, enforced=False)
    assert "then stops it" not in text
    assert text.startswith("Report-only") and "nothing is stopped" in text


def test_stop_now_of_an_enforced_warning_says_it_stops(ledger: DynamoLedger) -> None:
    assert _posted(ledger, enforced=True) == "The governor re-checks that it is still idle, then stops it."
