"""Issue 35's named fault scenarios (``governor_cli.testing.fault_scenarios``), each through the deployed handlers on
the emulator and ended by the runbook: nothing still parked, no finding still unsent, no checkpoint sent twice."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from governor_cli.testing import fault_scenarios
from governor_cli.testing.fault_scenarios import ScenarioResult


@pytest.mark.parametrize("scenario", fault_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_nothing_is_lost_and_no_checkpoint_is_sent_twice(scenario: Callable[[], ScenarioResult]) -> None:
    result = scenario()
    assert result.events > 0 and result.findings_expected > 0
    assert result.problems == []
    assert (result.lost, result.findings_lost, result.resent_non_idempotent) == (0, 0, 0)
    assert result.findings_published == result.findings_expected
