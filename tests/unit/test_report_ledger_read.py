"""The report's compacted ledger read keeps every value as read: equal values are shared, never merged across types,
and only keys the report never reads are left out."""

from __future__ import annotations

from governor.report.ledger_read import Compactor, read_kind
from governor_cli.testing.memory import MemoryLedger


def test_equal_values_are_shared_but_one_and_true_stay_apart() -> None:
    compactor = Compactor()
    first = compactor.item({"pk": "decision#i-1", "evidence": {"gpus": 1, "flag": True, "parts": {"kind": "spot"}}})
    second = compactor.item({"pk": "decision#i-2", "evidence": {"gpus": True, "flag": 1, "parts": {"kind": "spot"}}})

    assert first == {"evidence": {"gpus": 1, "flag": True, "parts": {"kind": "spot"}}}
    assert type(first["evidence"]["gpus"]) is int and type(second["evidence"]["gpus"]) is bool
    assert first["evidence"]["parts"] is second["evidence"]["parts"]  # one object for the repeated flat part


def test_only_keys_the_report_never_reads_are_left_out() -> None:
    ledger = MemoryLedger()
    ledger.put_item("decision", "a", {"actions": [], "assumptions": ["x"], "reasons": [], "rule": "idle.busy"})
    ledger.put_item("decision", "b", {"actions": [{"type": "stop"}], "reasons": ["idle"], "rule": "idle.acted"})

    read = {item["rule"]: item for item in read_kind(ledger, "decision", None, Compactor())}

    assert "actions" not in read["idle.busy"] and "assumptions" not in read["idle.busy"]
    assert read["idle.busy"]["reasons"] == []  # read as it was: only an empty ``actions`` reads the same absent
    assert read["idle.acted"]["actions"] == [{"type": "stop"}] and read["idle.acted"]["reasons"] == ["idle"]
