"""What the Security Hub export left in Security Hub, judged record by record after a run and its runbook.

Each Security Hub case names its record and the state the newest of its findings (by the finding's own time) gives
it (``Case.record``). After the runbook, Security Hub is read once (GetFindings, outside the faults) and each record
is judged twice: against that rule, and against the clean run's record of the same kind. A record missing where the
clean run has one is lost (its event parked without an alarm, or handled without importing); an ACTIVE record whose
newest finding archived it is resurrected (an older finding overwrote the fix); any other state unlike the clean
run's differs. The emulator's BatchImportFindings keeps the last import whatever its ``UpdatedAt`` (Security Hub
ignores an older one), so only the export's own ordering (``governor.securityhub.ordering``) keeps a fix archived
here: the judgement sees the export's order, not Security Hub's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from governor_cli.testing.invariants import CaseRun, Verdict


@dataclass
class HubVerdict:
    """Security Hub records judged: how many, and those lost, resurrected or otherwise unlike the clean run's."""

    records: int = 0
    lost: int = 0
    resurrected: int = 0
    differs: int = 0
    problems: list[str] = field(default_factory=list)


def hub_states(region: str) -> dict[str, str]:
    """Every record the export left, by ``Id``: its state (the capability that provides ``record_states`` reads its
    service, outside the faults); none when no capability does."""
    from governor_cli.demo.hooks import defining
    from governor_cli.testing.faults import unlabelled

    with unlabelled():
        return {k: v for _, read in defining("record_states") for k, v in read(region).items()}


def clean_states(runs: Iterable[CaseRun], states: Mapping[str, str]) -> dict[str, str | None]:
    """The clean run's record state per case kind (None: the clean run left no record)."""
    return {run.case.kind: states.get(run.case.record[0]) for run in runs if run.case.record}


def judge(runs: Iterable[CaseRun], states: Mapping[str, str], clean: Mapping[str, str | None]) -> HubVerdict:
    """Each case's record against the newest finding's state and against the clean run's."""
    verdict = HubVerdict()
    for run in runs:
        if run.case.record is None:
            continue
        record, newest = run.case.record
        found = states.get(record)
        expected = clean.get(run.case.kind)
        verdict.records += 1
        if found is None:
            verdict.lost += 1
            verdict.problems.append(f"{run.case.name}: no Security Hub record (the clean run left it {expected})")
        elif newest == "ARCHIVED" and found == "ACTIVE":
            verdict.resurrected += 1
            verdict.problems.append(f"{run.case.name}: Security Hub record ACTIVE again after its fix (resurrected)")
        elif found != newest or found != expected:
            verdict.differs += 1
            verdict.problems.append(
                f"{run.case.name}: Security Hub record {found}; its newest finding says {newest}, "
                f"the clean run left {expected}"
            )
    return verdict


def fold_hub(verdict: Verdict, hub: HubVerdict) -> None:
    """Add the Security Hub judgement to a row's verdict."""
    verdict.hub_records += hub.records
    verdict.hub_lost += hub.lost
    verdict.hub_resurrected += hub.resurrected
    verdict.hub_differs += hub.differs
    verdict.problems.extend(hub.problems)
