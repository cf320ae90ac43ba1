"""The findings outbox: staged with the decision, published until accepted, and found again by a retry or a sweep."""

from __future__ import annotations

import datetime as dt

import pytest

from governor.domain.decision import Finding
from governor.domain.ports import PublishError
from governor.outbox import STALE_AFTER, Outbox
from governor_cli.testing.memory import MemoryLedger, MemorySink

NOW = dt.datetime(2026, 12, 3, 6, 0, tzinfo=dt.UTC)


def _finding(resource: str, rule: str = "keys.kms_rotation") -> Finding:
    return Finding(policy="keys", rule=rule, severity="warning", resource=resource, title=f"{resource} is off")


class _Refusing(MemorySink):
    """EventBridge accepts only the findings whose resource is listed (FailedEntryCount for the rest)."""

    def __init__(self, accept: set[str]) -> None:
        super().__init__()
        self.accept = accept

    def publish(self, findings: list[Finding]) -> None:
        taken = [f for f in findings if f.resource in self.accept]
        self.findings.extend(taken)
        if len(taken) < len(findings):
            raise PublishError("rejected", [f.id or "" for f in taken])


def test_ids_are_deterministic_per_event_resource_and_rule() -> None:
    one = Outbox(MemoryLedger(), MemorySink(), event_id="e-1").identify(_finding("k-1"))
    two = Outbox(MemoryLedger(), MemorySink(), event_id="e-1").identify(_finding("k-1"))
    other = Outbox(MemoryLedger(), MemorySink(), event_id="e-2").identify(_finding("k-1"))
    assert one.id == two.id != other.id


def test_only_accepted_entries_are_marked_sent_and_a_retry_publishes_the_rest() -> None:
    ledger = MemoryLedger()
    first = Outbox(ledger, _Refusing({"k-1"}), event_id="e-1", clock=lambda: NOW)
    first.add([_finding("k-1"), _finding("k-2")])
    with pytest.raises(PublishError):
        first.flush()
    sink = MemorySink()
    retry = Outbox(ledger, sink, event_id="e-1", clock=lambda: NOW)
    retry.resume()  # the retry re-read the key, found it fixed, and decided nothing of its own
    sent = retry.flush()
    assert [f.resource for f in sink.findings] == ["k-2"]  # k-1 was accepted the first time: not sent again
    assert len(sent) == 2


def test_a_sweep_publishes_what_earlier_invocations_left_unsent() -> None:
    ledger = MemoryLedger()
    failed = Outbox(ledger, _Refusing(set()), event_id="e-1", clock=lambda: NOW)
    failed.add([_finding("k-1")])
    failed.flush(raise_on_failure=False)
    sink = MemorySink()
    too_soon = Outbox(ledger, sink, event_id="sweep-1", clock=lambda: NOW + STALE_AFTER / 2)
    assert too_soon.flush_stale("keys") == 0  # may still belong to a running invocation
    later = Outbox(ledger, sink, event_id="sweep-2", clock=lambda: NOW + STALE_AFTER * 2)
    assert later.flush_stale("keys") == 1 and later.flush_stale("network") == 0
    assert [f.resource for f in sink.findings] == ["k-1"]
    assert Outbox(ledger, sink, event_id="sweep-3", clock=lambda: NOW + STALE_AFTER * 3).flush_stale("keys") == 0


def test_a_restaged_finding_keeps_its_id_and_an_accepted_one_is_never_reset() -> None:
    ledger = MemoryLedger()
    sink = MemorySink()
    box = Outbox(ledger, sink, event_id="e-1", clock=lambda: NOW)
    (staged,) = box.add([_finding("k-1")])
    box.stage(staged.model_copy(update={"detail": "done: rotation enabled"}))
    box.flush()
    again = Outbox(ledger, sink, event_id="e-1", clock=lambda: NOW)
    again.add([_finding("k-1")])
    again.flush()
    assert [(f.id, f.detail) for f in sink.findings] == [(staged.id, "done: rotation enabled")]
