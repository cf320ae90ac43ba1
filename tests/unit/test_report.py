"""The report's content: security counts from the shared CloudTrail records, costs and savings from a ledger."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

import pytest

from governor.audit.engine import run_audit
from governor.domain.messages import MAX_BLOCKS, MAX_SECTION_CHARS
from governor.policy import Policy
from governor.report.build import build_report
from governor.report.domain import period_for
from governor.report.render.csv_files import csv_files
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text, slack_messages
from tests.conftest import CLOUDTRAIL_DIR

DAY = dt.datetime(2023, 7, 10, tzinfo=dt.UTC)
NEXT_DAY = DAY + dt.timedelta(days=1)


def at(hour: float, day: dt.datetime = DAY) -> str:
    return (day + dt.timedelta(hours=hour)).isoformat()


def _session(instance: str, kind: str, gpus: int, price: float, team: str, owner: str, **times: Any) -> dict:
    return {
        "kind": "session",
        "instance_id": instance,
        "instance_type": kind,
        "gpus": gpus,
        "lifecycle": times.pop("lifecycle", "on-demand"),
        "team": team,
        "owner": owner,
        "price_per_hour": price,
        "on_demand_per_hour": times.pop("on_demand", price),
        **times,
    }


def _idle(instance: str, when: str, status: str, utilisation: float, **extra: Any) -> dict:
    return {
        "kind": "decision",
        "policy": "idle",
        "verdict": "act" if status in ("warned", "acted") else "ok",
        "resource": instance,
        "at": when,
        "rule": f"idle.{status}",
        "severity": "warning" if status in ("warned", "acted") else "info",
        "reasons": [extra.pop("reason", f"idle policy: {status}")],
        "actions": extra.pop("actions", []),
        "evidence": {"status": status, "max_gpu_utilization": utilisation, "window_minutes": 120, **extra},
    }


def sample_ledger() -> list[dict[str, Any]]:
    """One day of a small fleet: an idle g5.12xlarge stopped at 09:00, a busy-ish Spot g5.48xlarge, one interruption."""
    items: list[dict[str, Any]] = [
        _session("i-0a11", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=at(9)),
        _session(
            "i-0b22", "g5.48xlarge", 8, 6.20, "speech", "bob", start=at(6), end=None, lifecycle="spot", on_demand=16.288
        ),
        _session(
            "i-0c33", "g5.xlarge", 1, 1.006, "vision", "carol", start=at(20, DAY - dt.timedelta(days=1)), end=at(2)
        ),
    ]
    items += [_idle("i-0a11", at(6 + q / 4), "busy", 1.0 + q / 10) for q in range(8)]
    items.append(_idle("i-0a11", at(8.5), "warned", 1.5))
    items.append(
        _idle(
            "i-0a11",
            at(9),
            "acted",
            1.6,
            idle_since=at(6.5),
            actions=[{"type": "stop", "enforced": True}, {"type": "tag", "enforced": True}],
        )
    )
    items += [_idle("i-0b22", at(7 + h), "busy", u) for h, u in enumerate([12.0, 18.5, 20.0, 9.0, 14.0])]
    items.append(
        {
            "kind": "interruption",
            "instance_id": "i-0d44",
            "event_id": "spot-1",
            "warned_at": at(14),
            "instance_action": "terminate",
            "instance_type": "g4dn.xlarge",
            "zone": "us-east-1a",
            "launched_at": at(10),
            "age_seconds": 4 * 3600,
            "owner": "dan",
            "team": "speech",
            "enforced": True,
            "checkpoint_attempted": True,
            "checkpoint_delivered": True,
            "checkpoint_status": "Success",
        }
    )
    items += [
        {
            "kind": "decision",
            "policy": "network",
            "rule": "network.security-group",
            "resource": "sg-0123456789abcdef0",
            "at": at(11.8),
            "verdict": "act",
            "severity": "warning",
            "reasons": ["ingress 0.0.0.0/0 on tcp/22 is open to the whole internet"],
            "actions": [{"type": "revoke_ingress", "enforced": False}],
            "evidence": {"owner": "arn:aws:sts::123456789012:assumed-role/ml-engineer/ana", "team": "vision"},
        },
        {
            "kind": "decision",
            "policy": "keys",
            "rule": "keys.kms.rotation_off",
            "resource": "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "at": at(3),
            "verdict": "act",
            "severity": "warning",
            "reasons": ["automatic rotation is off"],
            "actions": [{"type": "enable_key_rotation", "enforced": False}],
            "evidence": {"owner": "bob", "team": "speech"},
        },
        {
            "kind": "decision",
            "policy": "keys",
            "rule": "keys.kms.rotation_off",
            "resource": "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "at": at(5),
            "verdict": "ok",
            "severity": "info",
            "reasons": ["rotation is on, every 90 days"],
        },
    ]
    items.append(
        {
            "kind": "decision",
            "policy": "spot",
            "rule": "spot-rebalance",
            "resource": "i-0b22",
            "at": at(13),
            "verdict": "act",
        }
    )
    return items


@pytest.fixture(scope="module")
def audit() -> Any:
    return run_audit(CLOUDTRAIL_DIR, start=DAY, end=NEXT_DAY)


def test_security_section_counts_every_query_on_the_shared_records(audit: Any) -> None:
    report = build_report(kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit=audit.results)
    counts = {q.name: q.count for q in report.security}
    expected = {name: r["count"] for name, r in audit.results.items() if name != "gpu_instance_hours"}
    assert counts == expected
    assert counts["world_open_ingress"] == 2 and counts["unauthorized_api_calls"] == 60
    busiest = report.security[0]
    assert busiest.name == "unauthorized_api_calls" and len(busiest.top_rows) == Policy().reports.top_rows
    assert [q.count for q in report.security] == sorted((q.count for q in report.security), reverse=True)


def test_change_since_the_previous_period(audit: Any) -> None:
    previous = {name: {"count": 1, "rows": [{}]} for name in audit.results}
    report = build_report(
        kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit=audit.results, previous_audit=previous
    )
    world = next(q for q in report.security if q.name == "world_open_ingress")
    assert world.change == 1 and world.change_text() == "+1 vs previous period"
    quiet = next(q for q in report.security if q.count == 0)
    assert quiet.change_text() == "-1 vs previous period"


def test_csvs_carry_every_row_not_just_the_top_rows(audit: Any) -> None:
    report = build_report(kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit=audit.results)
    files = csv_files(report, audit.results)
    rows = list(csv.DictReader(io.StringIO(files["security_unauthorized_api_calls.csv"])))
    assert len(rows) == 60
    assert {"gpu_hours_by_team.csv", "gpu_hours_by_owner.csv", "gpu_hours_by_type.csv", "rightsizing.csv"} <= set(files)


def test_cost_section_from_the_ledger() -> None:
    report = build_report(
        kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit={}, ledger_items=sample_ledger()
    )
    cost = report.cost
    teams = {r["team"]: r for r in cost.by_team.rows}
    assert teams["vision"]["gpu_hours"] == pytest.approx(9 * 4 + 2 * 1)
    assert teams["vision"]["cost_usd"] == pytest.approx(9 * 5.672 + 2 * 1.006, abs=0.01)
    assert teams["speech"]["gpu_hours"] == pytest.approx(18 * 8)  # open Spot session runs to the period's end
    assert teams["speech"]["cost_usd"] == pytest.approx(18 * 6.20, abs=0.01)
    assert {r["instance_type"] for r in cost.by_type.rows} == {"g5.12xlarge", "g5.48xlarge", "g5.xlarge"}
    assert cost.gpu_hours_total == pytest.approx(36 + 2 + 144)
    assert cost.idle_gpu_hours_detected == pytest.approx(2.5 * 4)  # idle since 06:30, judged until 09:00
    assert cost.idle_gpu_hours_reclaimed == pytest.approx(15 * 4)  # stopped at 09:00, not restarted
    assert cost.savings_usd == pytest.approx(15 * 5.672, abs=0.01)
    assert cost.spot.interruptions == 1 and cost.spot.rebalance_recommendations == 1
    assert (cost.spot.checkpoints_requested, cost.spot.checkpoints_delivered) == (1, 1)


def test_rightsizing_names_instances_that_never_got_busy_and_a_cheaper_type() -> None:
    report = build_report(
        kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit={}, ledger_items=sample_ledger()
    )
    rows = {r["instance_id"]: r for r in report.cost.rightsizing.rows}
    assert rows["i-0b22"]["max_gpu_utilization"] == 20.0
    assert rows["i-0b22"]["suggestion"].startswith("g5.12xlarge (saves $10.62/hour)")
    assert rows["i-0a11"]["suggestion"].startswith("g5.xlarge")
    busy = build_report(
        kind="daily",
        start=DAY,
        end=NEXT_DAY,
        policy=Policy.model_validate({"reports": {"rightsizing_max_utilization": 15}}),
        audit={},
        ledger_items=sample_ledger(),
    )
    assert "i-0b22" not in {r["instance_id"] for r in busy.cost.rightsizing.rows}


def test_html_slack_and_text_show_the_same_figures(audit: Any) -> None:
    report = build_report(
        kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit=audit.results, ledger_items=sample_ledger()
    )
    page = render_html(report)
    for needle in ("unauthorized api calls", "182.0", "$85.08", "$164.66", "g5.12xlarge (saves $10.62/hour)", "<svg"):
        assert needle in page, needle
    email = render_html(report, chart_src="cid:chart", inline_svg=False)
    assert "src='cid:chart'" in email and "<svg" not in email
    messages = slack_messages(report)
    for message in messages:
        assert len(message["blocks"]) <= MAX_BLOCKS
        for block in message["blocks"]:
            if block["type"] == "section":
                assert len(block["text"]["text"]) <= MAX_SECTION_CHARS
    slack = json.dumps(messages)
    assert "$164.66 on 182.0 GPU-hours" in slack and "$85.08 reclaimed" in slack
    text = render_text(report)
    assert "GPU spend $164.66 on 182.0 GPU-hours" in text and "reclaimed 60.0 GPU-hours, $85.08" in text


def test_an_empty_period_says_so_instead_of_failing() -> None:
    report = build_report(
        kind="weekly",
        start=DAY - dt.timedelta(days=400),
        end=DAY - dt.timedelta(days=393),
        policy=Policy(),
        audit={"world_open_ingress": {"count": 0, "rows": []}},
        ledger_items=sample_ledger(),
    )
    assert report.empty
    assert any("nothing happened" in note for note in report.notes)
    assert "nothing happened" in render_html(report) and slack_messages(report)


def test_daily_and_weekly_periods_are_whole_utc_days() -> None:
    now = dt.datetime(2026, 11, 23, 7, 0, 12, tzinfo=dt.UTC)  # a Monday
    assert period_for("daily", now) == (
        dt.datetime(2026, 11, 22, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 23, tzinfo=dt.UTC),
    )
    start, end = period_for("weekly", now)
    assert start.weekday() == 0 and (end - start).days == 7


def test_without_a_ledger_gpu_hours_come_from_the_cloudtrail_query() -> None:
    hours = {
        "gpu_instance_hours": {
            "count": 2,
            "rows": [
                {
                    "creator": "arn:aws:iam::123456789012:user/Ana",
                    "instance_type": "g5.12xlarge",
                    "instances": 2,
                    "instance_hours": 3.0,
                },
                {
                    "creator": "arn:aws:sts::123456789012:assumed-role/ml/bob",
                    "instance_type": "x9.mystery",
                    "instances": 1,
                    "instance_hours": 1.5,
                },
            ],
        }
    }
    report = build_report(kind="daily", start=DAY, end=NEXT_DAY, policy=Policy(), audit=hours)
    assert "gpu_instance_hours" not in {q.name for q in report.security}
    owners = {r["owner"]: r for r in report.cost.by_owner.rows}
    assert owners["ana"]["gpu_hours"] == pytest.approx(12.0)  # the IAM user ARN is counted under the person
    assert owners["ana"]["cost_usd"] == pytest.approx(3 * 5.672, abs=0.01)
    assert owners["bob"]["cost_usd"] == 0
    assert report.cost.source == "cloudtrail"
    assert any("x9.mystery" in note and "dollars not" in note for note in report.cost.notes)
