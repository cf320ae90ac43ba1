"""The Security Hub export's scenarios: governor findings routed to the ``securityhub`` function as the bus rule
delivers them, each imported into Security Hub (ASFF), and a resolved record whose older, still-open finding arrives
after the fix (a retry or a replay): the record must stay archived.

Each finding is staged in the governor's outbox first, as the function that made it would have (the export trusts no
finding the outbox does not hold). Each case names the Security Hub record it leaves behind and the state the
newest of its findings (by the finding's own time) gives that record: ``testing.hub_state`` reads Security Hub after
the run and judges it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import TYPE_CHECKING, Any

from governor.domain.decision import Finding
from governor.domain.verification import Verification
from governor_cli.demo.hooks import provided
from governor_cli.testing.scenarios import Case

if TYPE_CHECKING:
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True, "asff": True}


def _staged(finding: Finding) -> Finding:
    """``finding`` recorded in the deployed ledger's outbox and marked accepted by the bus, as its maker leaves it."""
    from governor.adapters.ledger import DynamoLedger
    from governor.outbox import Outbox
    from governor_cli.demo.bootstrap import LocalStack
    from governor_cli.testing.deployment import REGION
    from governor_cli.testing.faults import unlabelled
    from governor_cli.testing.memory import MemorySink

    with unlabelled():
        box = Outbox(DynamoLedger(LocalStack().ledger_table, region=REGION), MemorySink(), event_id=str(uuid.uuid4()))
        [staged] = box.add([finding])
        box.flush()
    return staged


def _record(finding: Finding) -> str:
    from governor.securityhub.domain import finding_uid
    from governor_cli.testing.deployment import REGION
    from governor_cli.testing.events import ACCOUNT

    return finding_uid(finding, ACCOUNT, REGION)


def securityhub_finding(scenarios: Scenarios, index: int) -> Case:
    """A critical finding about its own resource: one Security Hub record, ACTIVE."""
    finding = _staged(provided("critical_finding")())
    case = Case(f"Security Hub export #{index}", "securityhub", scenarios.finding_event(finding), finding.resource)
    case.record = (_record(finding), "ACTIVE")
    return case


def securityhub_fixed_then_stale(scenarios: Scenarios, index: int) -> Case:
    """The governor's fix (re-read and seen done: ARCHIVED), then the record's older open finding delivered again
    (a Lambda retry or a DLQ replay of the first export): the record must stay ARCHIVED."""
    opened = provided("critical_finding")()
    fixed_at = opened.at + dt.timedelta(minutes=2)
    fixed = opened.model_copy(
        update={
            "id": uuid.uuid4().hex,
            "at": fixed_at,
            "enforced": True,
            "actions": [{"type": "revoke_ingress", "enforced": True}],
            "verified": Verification(fixed=True, seen=f"rule(s) gone from {opened.resource}"),
        }
    )
    stale = _staged(opened)
    archived = _staged(fixed)
    case = Case(
        f"Security Hub fix, then a stale open finding #{index}",
        "securityhub",
        scenarios.finding_event(archived),
        opened.resource,
    )
    later = scenarios.finding_event(stale)
    later["id"] = str(uuid.uuid4())
    case.then = (later,)
    case.record = (_record(archived), "ARCHIVED")
    return case


CASES = ((2, securityhub_finding), (1, securityhub_fixed_then_stale))


def record_states(region: str) -> dict[str, str]:
    """Every record in this account's Security Hub: its ``Id`` and ``RecordState`` (``testing.hub_state`` judges
    them after a reliability run)."""
    from governor.adapters.aws import client

    states: dict[str, str] = {}
    for page in client("securityhub", region).get_paginator("get_findings").paginate():
        for record in page["Findings"]:
            states[str(record["Id"])] = str(record.get("RecordState"))
    return states
