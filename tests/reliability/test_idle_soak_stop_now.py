"""Issue 46.7: the soak's idle episode exercises Stop now for real.

Before, its stop requests were made-up invocations of the idle function with no verified click behind them: every one
was refused as ``idle.stop-now-unverified``, so RELIABILITY.md's "0 lost" said nothing about Stop now. Now the owner
clicks Stop now as Slack sends it (signed POST to the interactions Function URL), the endpoint's worker and the idle
function run what each was handed, and the episode counts the clicks in their own column.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from moto import mock_aws

from governor_cli.testing.deployment import Deployment
from governor_cli.testing.faults import FaultInjector, fake_slack
from governor_cli.testing.idle_soak import idle_policy, run_idle


def _episode(rate: float = 0.0, **faults: Any) -> tuple[Any, list[dict[str, Any]]]:
    with contextlib.redirect_stdout(io.StringIO()), mock_aws(config={"lambda": {"use_docker": False}}), fake_slack():
        deployed = Deployment(idle_policy())
        try:
            with FaultInjector(rate, seed=3, **faults) as injector:
                episode = run_idle(deployed, injector, seed=3, sweeps=3, idle=1, requests=1, duplicate_share=0.0)
            decisions = deployed.ledger_decisions()
        finally:
            deployed.close()
    return episode, decisions


def test_the_idle_episode_stops_an_instance_through_a_verified_stop_now_click() -> None:
    episode, decisions = _episode()
    stopped = [d for d in decisions if d.get("rule") == "idle.stop-now" and d["evidence"].get("done")]
    assert [d["evidence"]["done"][0] for d in stopped] == ["stopped"]
    assert not [d for d in decisions if d.get("rule") == "idle.stop-now-unverified"]
    assert (getattr(episode, "stop_clicks", 0), getattr(episode, "stop_stopped", 0)) == (1, 1)
    assert getattr(episode, "stop_lost", None) == 0 and episode.problems == []


def test_a_click_whose_hand_over_answer_was_lost_is_clicked_again_and_handed_over_once() -> None:
    """Every Invoke's answer lost (executed, then a read timeout): Slack shows the person an error, they click again;
    the second click's worker finds the message's Stop now claimed and hands nothing over."""
    episode, decisions = _episode(1.0, kinds=("read_timeout",), operations={"Invoke"})
    assert getattr(episode, "stop_clicks", 0) == 3 and getattr(episode, "stop_stopped", 0) == 1
    held = [d for d in decisions if d.get("rule") == "interactions.refused"]
    assert held and all("already requested" in d["reasons"][0] for d in held)
    assert getattr(episode, "stop_lost", None) == 0
