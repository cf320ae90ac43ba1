"""Restart risk before stopping a scarce GPU type (issue 38, item 5): the decision records it and says it in its
reasons (so the warning and the report say it); ``idle.scarce_action: warn`` keeps such instances report-only."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.adapters.ledger import DynamoLedger
from governor.idle.handler import handle
from governor.policy import PolicyError, parse_policy
from governor.report.handler import ledger_items
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _state


def _runtime(local: Any, sink: MemorySink, **idle: Any) -> Runtime:
    settings = {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, **idle}
    return Runtime(
        policy=parse_policy({"idle": settings, "fleet": {"gpu_families": ["p", "g"]}}),
        ledger=DynamoLedger(local.ledger_table, region="us-east-1"),
        sink=sink,
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


@pytest.mark.parametrize("action", ["stop", "warn"])
def test_a_scarce_type_carries_its_restart_risk_and_warn_keeps_it_running(action: str) -> None:
    with mock_aws():
        local = create_shared("us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        (scarce,) = _launch(ec2, "p5.48xlarge")
        (common,) = _launch(ec2, "g5.xlarge")
        for instance_id in (scarce, common):
            _metrics(instance_id, 0.2)
        sink = MemorySink()
        runtime = _runtime(local, sink, scarce_action=action)
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        for step in range(4):
            handle(_event(T0 + dt.timedelta(minutes=30 * step), f"sweep-{step}"), runtime, aws)

        assert _state(ec2, common) == "stopped"
        assert _state(ec2, scarce) == ("stopped" if action == "stop" else "running")
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        decisions = [i for i in items if i.get("resource") == scarce and i.get("policy") == "idle"]
        risk = decisions[-1]["evidence"]["restart_risk"]
        assert risk["scarce"] is True and risk["pattern"] == "p5.*" and risk["action"] == action
        assert not any("restart_risk" in (i.get("evidence") or {}) for i in items if i.get("resource") == common), (
            "a common type carries no restart risk"
        )
        warned = [f for f in sink.findings if f.resource == scarce and f.rule == "idle.warned"]
        assert warned and "InsufficientInstanceCapacity" in warned[0].detail
        if action == "warn":
            assert all(a.get("type") != "stop" for d in decisions for a in d.get("actions") or [])
            assert any("idle.scarce_action is warn" in r for d in decisions for r in d.get("reasons") or [])
        else:
            acted = [d for d in decisions if (d.get("evidence") or {}).get("status") == "acted"]
            assert acted and any("restart risk:" in r for r in acted[-1]["reasons"])


def test_scarce_types_are_validated() -> None:
    assert "p5.*" in parse_policy({}).idle.scarce_types and parse_policy({}).idle.scarce_action == "stop"
    with pytest.raises(PolicyError):
        parse_policy({"idle": {"scarce_types": ["P5 LARGE"]}})
