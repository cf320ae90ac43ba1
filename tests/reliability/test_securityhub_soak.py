"""The soak's Security Hub export, small: findings routed to the securityhub function under BatchImportFindings faults
(answers lost, throttling, 5xx, access denied), duplicates and an older open finding delivered after its fix; after
the runbook every record is in the state its newest finding gives it and the clean run left, none missing, none
ACTIVE again after its fix (the long run is ``bench/soak.py``)."""

from __future__ import annotations

from unittest import mock

from governor_cli.testing import faults
from governor_cli.testing.deployment import REGION, Deployment
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.hub_state import HubVerdict, clean_states, hub_states, judge
from governor_cli.testing.invariants import Verdict, check, follow_runbook, references, run_cases
from governor_cli.testing.scenarios import Scenarios

KINDS = ("read_timeout", "throttling", "server_error", "access_denied")


def _soak(deployment: Deployment) -> tuple[Verdict, HubVerdict]:
    scenarios = Scenarios(seed=5)
    with FaultInjector() as recorder:
        clean_runs = run_cases(deployment, scenarios.one_of_each(), recorder)
    clean = references(clean_runs)
    clean_hub = clean_states(clean_runs, hub_states(REGION))
    cases = scenarios.make(12, invalid_share=0.0, capabilities=("securityhub",))
    with FaultInjector(0.6, KINDS, seed=5, only=faults.is_batch_import) as injector:
        runs = run_cases(
            deployment,
            cases,
            injector,
            duplicate_share=0.3,
            seed=5,
            after=lambda done: follow_runbook(deployment, done, injector),
        )
    verdict = check("securityhub", 0.6, clean, runs, injector, runbook=True)
    return verdict, judge(runs, hub_states(REGION), clean_hub)


def test_every_record_ends_as_its_newest_finding_says_under_import_faults(deployment: Deployment) -> None:
    verdict, hub = _soak(deployment)
    assert hub.records == 12, hub
    assert (hub.lost, hub.resurrected, hub.differs) == (0, 0, 0), hub.problems
    assert verdict.lost == 0 and verdict.double_actions == 0, verdict.problems
    assert sum(verdict.faults.values()) > 0


def test_an_export_that_ignores_the_findings_own_order_is_caught_resurrecting(deployment: Deployment) -> None:
    # The deliberately broken export: every finding written, whatever newer one its record has seen.
    with mock.patch("governor.securityhub.handler.claim_newest", return_value=True):
        _, hub = _soak(deployment)
    assert hub.resurrected > 0, hub.problems
