"""Kubernetes drains as a fault mode, small: an EKS GPU node idle by DCGM reclaimed by the deployed idle function
through the cluster's API while that API fails (an eviction 500 or 429, a cordon answered 504, the node vanishing
mid-drain, a PodDisruptionBudget), judged by the drain's rules; and drains deliberately broken, which the rules catch
(the long run is ``bench/soak.py``)."""

from __future__ import annotations

from unittest import mock

import pytest

import governor_cli.testing.faults  # noqa: F401  (the botocore hooks, before any client exists)
from governor.idle import sweep_run
from governor.idle.kubernetes import drain
from governor_cli.testing import drain_scenarios


@pytest.mark.parametrize("scenario", drain_scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_a_drain_under_a_failing_cluster_api_keeps_the_drains_rules(scenario: object) -> None:
    result = scenario()  # type: ignore[operator]
    assert result.problems == [] and result.lost == 0, result.problems
    assert result.findings_published > 1  # the warning, then what the drain did


def test_a_drain_that_gives_up_without_un_cordoning_is_caught() -> None:
    with mock.patch.object(drain, "_undo", lambda api, found, now, steps: found):
        result = drain_scenarios.pdb_blocks()
    assert "gave up and left the node cordoned" in result.problems
    assert "gave up without a finding saying the node was un-cordoned" in result.problems


def test_a_sweep_that_says_terminated_whatever_the_drain_did_is_caught() -> None:
    # The deliberately broken sweep: the decision's own "terminated" finding, not what the drain did.
    with mock.patch.object(sweep_run, "drain_finding", lambda finding, *_: finding):
        result = drain_scenarios.eviction_500()
    assert any("reported terminated while the node is still in the cluster" in p for p in result.problems)
    assert any(p.startswith("terminated said 3 times") for p in result.problems)
