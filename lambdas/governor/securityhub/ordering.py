"""Security Hub and OCSF updates in the order of the findings' own time, whatever order they are delivered in.

A Lambda retry (the first import's answer lost), EventBridge's at-least-once delivery and the runbook's DLQ replay
can all deliver an older finding after a newer one: an ACTIVE finding after the ARCHIVED one that resolved it. Each
record (one ASFF ``Id``) has one ledger item holding the time of the newest finding exported to it; a finding is
written only if it is newer, claimed with a conditional write (compare-and-set on that time), so two concurrent
invocations cannot both win. The same finding again (a retry of an export that failed half-way) may write again:
its records are the same. Security Hub's own rule (an import whose ``UpdatedAt`` is not later than the stored one is
ignored) orders the ASFF side a second time, since ``UpdatedAt`` is the finding's time too.
"""

from __future__ import annotations

import hashlib
from typing import Any

from governor.domain.decision import Finding
from governor.domain.ports import Ledger

KIND = "securityhub-latest"
#: Compare-and-set attempts before giving up (Lambda then retries the event): only concurrent writers conflict.
ATTEMPTS = 5


class Contended(RuntimeError):
    """Other invocations kept moving the record's newest time: the event is retried."""


def _millis(finding: Finding) -> int:
    return int(finding.at.timestamp() * 1000)


def claim_newest(ledger: Ledger, uid: str, finding: Finding) -> bool:
    """True when ``finding`` is the newest this record has seen (or that same finding again), and now recorded as
    such; False when a newer finding (or another one of the same time) was exported already: writing this one would
    turn the record back."""
    key = hashlib.sha256(uid.encode()).hexdigest()
    mine: dict[str, Any] = {"uid": uid, "updated_ms": _millis(finding), "finding_id": finding.id or ""}
    for _ in range(ATTEMPTS):
        stored = ledger.get_item(KIND, key)
        if stored is None:
            if ledger.claim(KIND, key, mine):
                return True
            continue
        theirs = int(stored.get("updated_ms") or 0)
        if theirs == mine["updated_ms"]:
            return stored.get("finding_id") == mine["finding_id"]
        if theirs > mine["updated_ms"]:
            return False
        if ledger.claim(KIND, key, mine, replacing=("updated_ms", theirs)):
            return True
    raise Contended(f"{uid}: its newest time kept changing under concurrent exports")
