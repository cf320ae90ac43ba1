"""The DynamoDB ledger: one entry per decision, kept across retries, and period queries by kind."""

from __future__ import annotations

import datetime as dt

from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.domain.decision import Decision
from governor.network.actions import RevokeIngress
from governor_cli.demo.bootstrap import create_ledger_table


def _table() -> None:
    create_ledger_table("ledger")


def _decision(verdict: str) -> Decision:
    actions = [RevokeIngress(enforced=True)] if verdict == "act" else []
    return Decision(policy="network", verdict=verdict, resource="sg-1", actions=actions, reasons=[verdict])  # type: ignore[arg-type]


@mock_aws
def test_a_retry_that_finds_the_fix_done_keeps_the_act_entry() -> None:
    _table()
    ledger = DynamoLedger("ledger", region="us-east-1")
    ledger.record(_decision("act"), event_id="e-1")
    ledger.record(_decision("ok"), event_id="e-1")  # the retry: the rule is already gone
    entries = ledger.query_kind("decision")
    assert [(e["verdict"], e["event_id"]) for e in entries] == [("act", "e-1")]
    assert entries[0]["actions"][0]["type"] == "revoke_ingress"


@mock_aws
def test_one_entry_per_event_and_period_queries() -> None:
    _table()
    ledger = DynamoLedger("ledger", region="us-east-1")
    old = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    ledger.record(_decision("ok"), event_id="e-old", at=old)
    ledger.record(_decision("ok"), event_id="e-2")
    ledger.record(_decision("ok"), event_id="e-2")  # a duplicate delivery
    assert len(ledger.query_kind("decision")) == 2
    recent = ledger.query_kind("decision", since=dt.datetime(2026, 11, 15, tzinfo=dt.UTC))
    assert [e["event_id"] for e in recent] == ["e-2"]
    ledger.put_item("idle-mark", "i-1", {"idle_since": "2026-12-01T00:00:00+00:00"})
    assert ledger.get_item("idle-mark", "i-1")["idle_since"].startswith("2026-12-01")
    assert ledger.get_item("idle-mark", "i-2") is None
