"""What a reader sees in the report: findings with a fix, money by person and team, budgets, trends, charts, Slack."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from typing import Any

import pytest
from PIL import Image
from slack_sdk.models.blocks import Block

from governor.domain.identity import normalise_owner
from governor.policy import Policy, PolicyError, parse_policy
from governor.report import charts
from governor.report.build import build_report, with_history
from governor.report.chart_image import render_fleet_png
from governor.report.model import TrendPoint
from governor.report.render.csv_files import csv_files
from governor.report.render.format import age_text, format_value, human_header, money
from governor.report.render.html_page import render_html
from governor.report.render.slack import slack_messages
from governor.report.sections.budgets import budget_alerts, month_bounds
from tests.unit.test_report import DAY, NEXT_DAY, _idle, _session, at, sample_ledger


def report_over(items: list[dict[str, Any]], policy: Policy | None = None, **kwargs: Any) -> Any:
    return build_report(
        kind=kwargs.pop("kind", "daily"),
        start=kwargs.pop("start", DAY),
        end=kwargs.pop("end", NEXT_DAY),
        policy=policy or Policy(),
        audit=kwargs.pop("audit", {}),
        ledger_items=items,
        now=NEXT_DAY,
        **kwargs,
    )


# --- identities ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "owner"),
    [
        ("chen", "chen"),
        ("  Chen ", "chen"),
        ("chen@example.com", "chen"),
        ("arn:aws:iam::123456789012:user/chen", "chen"),
        ("arn:aws:iam::123456789012:user/division/team/chen", "chen"),
        ("arn:aws:iam::123456789012:role/ml-engineer/chen", "chen"),
        ("arn:aws:sts::123456789012:assumed-role/ml-engineer/chen", "chen"),
        ("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_ML_abc123/Chen@Example.com", "chen"),
        ("arn:aws-us-gov:sts::123456789012:assumed-role/ml/chen", "chen"),
        ("arn:aws:sts::123456789012:federated-user/chen", "chen"),
        ("arn:aws:iam::123456789012:root", "root"),
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_one_person_is_one_owner(raw: Any, owner: str) -> None:
    assert normalise_owner(raw) == owner


def test_cost_by_owner_merges_the_session_the_user_and_the_tag() -> None:
    sessions = [
        _session("i-1", "g5.xlarge", 1, 1.0, "vision", "chen", start=at(0), end=at(2)),
        _session("i-2", "g5.xlarge", 1, 1.0, "vision", "arn:aws:iam::123456789012:user/chen", start=at(0), end=at(3)),
        _session(
            "i-3",
            "g5.xlarge",
            1,
            1.0,
            "vision",
            "arn:aws:sts::123456789012:assumed-role/ml/chen",
            start=at(0),
            end=at(1),
        ),
    ]
    owners = {r["owner"]: r for r in report_over(sessions).cost.by_owner.rows}
    assert list(owners) == ["chen"]
    assert owners["chen"]["sessions"] == 3 and owners["chen"]["cost_usd"] == pytest.approx(6.0)


# --- findings ------------------------------------------------------------------------------------------------------


def test_findings_come_first_with_owner_age_status_and_a_fix() -> None:
    report = report_over(sample_ledger())
    by_resource = {f.resource: f for f in report.findings}
    network = by_resource["sg-0123456789abcdef0"]
    assert (network.status, network.severity, network.owner, network.team) == ("open", "warning", "ana", "vision")
    assert age_text(network.first_seen, report.end) == "12 h"
    assert "ingress rule" in network.remediation and "network.protected_groups" in network.remediation
    idle = by_resource["i-0a11"]
    assert (idle.status, idle.resolution) == ("resolved", "stopped by the governor")
    key = next(f for f in report.findings if f.policy == "keys")
    assert key.status == "resolved" and key.resolution == "Rotation is on, every 90 days"
    assert report.findings[0] is network  # open before resolved
    page = render_html(report)
    assert page.index("Needs attention") < page.index("<h2>Money") < page.index("Audit activity")
    todo = page[page.index("<ol class='todo'>") : page.index("</ol>")]
    assert "sg-0123456789abcdef0" in todo and "(ana, vision), open 12 h" in todo


def test_an_idle_warning_stays_open_while_the_instance_stays_idle_and_closes_when_it_works() -> None:
    warned = _idle("i-9", at(8), "warned", 1.0)
    still_idle = _idle("i-9", at(9), "idle", 1.0)  # an "ok" sweep that still judges it idle: not a resolution
    items = [warned, still_idle]
    (finding,) = report_over(items).findings
    assert finding.status == "open"
    assert (
        "governor:keep-until=<ISO 8601 time>" in finding.remediation and "governor:exempt=true" in finding.remediation
    )
    busy = _idle("i-9", at(10), "busy", 80.0, reason="busy: GPU max 80%")
    (finding,) = report_over([*items, busy]).findings
    assert (finding.status, finding.resolution) == ("resolved", "Busy: GPU max 80%")
    rewarned = _idle("i-9", at(12), "warned", 2.0)
    (finding,) = report_over([*items, busy, rewarned]).findings
    assert finding.status == "open" and finding.first_seen == dt.datetime.fromisoformat(at(12))


def test_findings_resolved_before_the_period_are_left_out_open_ones_stay_however_old() -> None:
    old_day = DAY - dt.timedelta(days=3)
    closed = [_idle("i-1", at(8, old_day), "warned", 1.0), _idle("i-1", at(9, old_day), "busy", 90.0)]
    still_open = [_idle("i-2", at(8, old_day), "warned", 1.0)]
    report = report_over(closed + still_open)
    assert [(f.resource, f.status) for f in report.findings] == [("i-2", "open")]
    assert age_text(report.findings[0].first_seen, report.end) == "3 days"


def test_audit_activity_is_not_counted_as_findings() -> None:
    audit = {"gpu_instance_launches": {"count": 20, "rows": [{"eventname": "RunInstances"}] * 20}}
    report = report_over([], audit=audit)
    assert report.findings == []
    page = render_html(report)
    assert "Nothing needs doing today" in page and "<b>0 open</b>findings" in page
    assert "activity worth a look, not findings" in page


# --- money, formatting ---------------------------------------------------------------------------------------------


def test_money_counts_and_headers_read_like_a_report() -> None:
    assert money(1002.5) == "$1,002.50" and money(0) == "$0.00" and money(-3.2) == "-$3.20"
    assert format_value("cost_usd", 1234567.891) == "$1,234,567.89"
    assert format_value("gpu_hours", 1002.456) == "1,002.5" and format_value("sessions", 12000) == "12,000"
    assert human_header("gpu_hours") == "GPU-hours" and human_header("cost_usd") == "Spend"
    assert human_header("some_new_column") == "Some new column"
    report = report_over(sample_ledger())
    page = render_html(report)
    assert "<th class='num'>Spend</th>" in page and "<td class='num' data-label='Spend'>$111.60</td>" in page
    assert "cost_usd" not in page and "gpu_hours<" not in page
    assert not re.search(r"\b1 (rows|interruptions|instances|events)\b", page)
    assert "1 interruption," in page and "1 rebalance recommendation;" in page


def test_long_ids_are_shortened_with_the_full_value_in_a_tooltip() -> None:
    report = report_over(sample_ledger())
    page = render_html(report)
    arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    # CSS cuts it to the column with an ellipsis; hovering shows it all, copying copies it all.
    assert f"<span class='id' title='{arn}'>" in page
    assert ".id{display:inline-block;max-width:14em;overflow:hidden;text-overflow:ellipsis" in page


def test_every_csv_has_a_header_row_even_when_empty() -> None:
    audit = {"root_account_usage": {"count": 0, "rows": [], "columns": ["eventtime", "eventname"]}}
    files = csv_files(report_over([], audit=audit), audit)
    for name, text in files.items():
        assert text.strip(), f"{name} is empty"
        header = next(csv.reader(io.StringIO(text)))
        assert header and all(header), name
    assert files["security_root_account_usage.csv"] == "eventtime,eventname\n"
    assert files["findings.csv"].startswith("severity,status,usd_per_day,summary,resource,owner,team")


def test_report_only_says_would_reclaim_never_saved() -> None:
    items = [
        _session("i-7", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=None),
        _idle(
            "i-7",
            at(10),
            "acted",
            1.0,
            idle_since=at(8),
            actions=[{"type": "stop", "enforced": False}, {"type": "tag", "enforced": False}],
        ),
    ]
    report = report_over(items)
    cost = report.cost
    assert not cost.idle_enforced and cost.savings_usd == 0
    assert cost.would_reclaim_gpu_hours == pytest.approx(14 * 4)  # from the report-only stop at 10:00 to midnight
    assert cost.would_save_usd == pytest.approx(14 * 5.672, abs=0.01)
    page = render_html(report)
    assert "</b>would reclaim<" in page and "</b>reclaimed<" not in page and "saved" not in page
    assert "switching idle.enforce on would have reclaimed 56.0 GPU-hours, $79.41" in page
    digest = json.dumps(slack_messages(report))
    assert "report-only: would stop 1 instance(s), would reclaim 56.0 GPU-hours, $79.41 with idle.enforce on" in digest
    assert "stopped" not in digest


# --- budgets -------------------------------------------------------------------------------------------------------


def test_budget_burn_rate_and_month_end_forecast() -> None:
    policy = parse_policy({"budgets": {"teams": {"vision": 100.0, "speech": 5000.0}}})
    report = report_over(sample_ledger(), policy)
    budgets = {b.team: b for b in report.budgets}
    vision = budgets["vision"]
    # This month (from 1 Jul): 9 h x $5.672 on 10 Jul, and 6 h x $1.006 from 9 Jul 20:00 to 10 Jul 02:00.
    assert vision.spent_usd == pytest.approx(9 * 5.672 + 6 * 1.006, abs=0.01)
    assert vision.days_elapsed == pytest.approx(10.0) and vision.days_in_month == 31
    assert vision.burn_per_day_usd == pytest.approx(5.71, abs=0.01)
    assert vision.forecast_usd == pytest.approx(57.084 * 31 / 10, abs=0.05)
    assert [(row.team, t) for row, t in budget_alerts(report.budgets, [50, 80, 100])] == [("vision", 50)]
    page = render_html(report)
    assert "Month-end forecast" in page and "$100.00" in page
    assert "forecast of budget (vision)" in page
    assert "Budget: vision is on course for $176.95 this month, 177% of its $100.00 budget." in page


def test_budget_months_are_utc_calendar_months() -> None:
    assert month_bounds(dt.datetime(2026, 3, 1, tzinfo=dt.UTC)) == (
        dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
    )
    assert month_bounds(dt.datetime(2026, 12, 31, 23, tzinfo=dt.UTC))[1] == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ({"teams": {"vision": -5}}, "budgets.teams.vision: Input should be greater than 0"),
        ({"alert_thresholds": [80, 80]}, "alert_thresholds must not repeat"),
        ({"alert_thresholds": [0]}, "budgets.alert_thresholds.0: Input should be greater than or equal to 1"),
        ({"team": {}}, "budgets.team: unknown field"),
    ],
)
def test_bad_budgets_name_the_field(budgets: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_policy({"budgets": budgets})


def test_no_budgets_no_budget_section() -> None:
    report = report_over(sample_ledger())
    assert report.budgets == [] and "Monthly budgets" not in render_html(report)
    assert "budgets.csv" not in csv_files(report)


# --- trends --------------------------------------------------------------------------------------------------------


def _point(day: dt.datetime, spend: float, kind: str = "daily") -> TrendPoint:
    return TrendPoint(kind=kind, start=day, end=day + dt.timedelta(days=1), spend_usd=spend, idle_usd=1, gpu_hours=2)


def test_trends_appear_only_with_history_and_compare_with_the_period_before() -> None:
    alone = report_over(sample_ledger())
    page = render_html(alone)
    assert "Trend over" not in page and "vs the period before" not in page
    history = [_point(DAY - dt.timedelta(days=n), 100.0 + n) for n in range(1, 12)]
    history += [_point(DAY - dt.timedelta(days=1), 1.0, "weekly")]
    report = with_history(report_over(sample_ledger()), history)
    assert len(report.trends) == 8 and all(t.kind == "daily" for t in report.trends)
    assert report.trends[-1].start == DAY - dt.timedelta(days=1)
    page = render_html(report)
    assert "Trend over the last 9 daily reports" in page
    assert "▲ $63.66 vs the period before" in page  # $164.66 now, $101.00 the day before


def test_no_change_is_claimed_without_a_previous_period() -> None:
    audit = {"world_open_ingress": {"count": 2, "rows": [{}, {}]}}
    report = report_over([], audit=audit)
    assert report.security[0].change_text() == "no previous period"
    assert "vs previous period" not in render_html(report)


# --- charts --------------------------------------------------------------------------------------------------------


def big_fleet(instances: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for n in range(instances):
        instance = f"i-{n:05d}"
        items.append(
            _session(instance, "g5.xlarge", 1, 1.006, f"team-{n % 40}", f"user{n % 300}", start=at(0), end=None)
        )
        if n % 3 == 0:
            items += [_idle(instance, at(h), "busy", 50.0) for h in range(0, 24, 1)]
        elif n % 3 == 1:
            items += [_idle(instance, at(h), "idle", 0.5) for h in range(0, 6)]
            items.append(_idle(instance, at(6), "warned", 0.5, idle_since=at(0)))
    return items


def test_the_fleet_chart_accounts_for_every_gpu_hour_as_busy_idle_or_unmonitored() -> None:
    report = report_over(sample_ledger())
    usage = report.charts.usage
    assert len(usage) == 48 and report.charts.bucket_minutes == 30
    total = sum(b.busy + b.idle + b.unmonitored for b in usage)
    assert total == pytest.approx(report.cost.gpu_hours_total, abs=0.01)
    assert sum(b.idle for b in usage) == pytest.approx(report.cost.idle_gpu_hours_detected, abs=0.01)


def test_charts_stay_readable_at_a_thousand_instances() -> None:
    report = report_over(big_fleet(1000))
    fleet = report.charts
    assert len(fleet.usage) == 48
    assert len(fleet.heatmap) == charts.HEATMAP_ROWS  # only the top offenders, never 1,000 rows
    assert len(fleet.idle_cost_by_team) <= 12
    assert sum(b.busy + b.idle + b.unmonitored for b in fleet.usage) == pytest.approx(24 * 1000, rel=1e-6)
    svg = charts.usage_svg(fleet, report.end)
    assert svg.count("<rect") <= 3 * 48 and "i-00" not in svg
    page = render_html(report)
    assert len(page) < 400_000
    assert page.count("<tr>") < 150  # tables show the top rows; the CSVs carry the rest
    assert "…and 308 more in findings.csv" in page
    assert "All 333 in idle_offenders.csv" in page


def test_weekly_charts_use_four_hour_bars() -> None:
    report = report_over(sample_ledger(), kind="weekly", start=DAY - dt.timedelta(days=6), end=NEXT_DAY)
    assert report.charts.bucket_minutes == 240 and len(report.charts.usage) == 42


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_html_and_png_use_the_same_colours() -> None:
    report = report_over(sample_ledger())
    page = render_html(report)
    png = render_fleet_png(report.charts, title="fleet", period=(report.start, report.end))
    with Image.open(io.BytesIO(png)) as image:
        colours = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=900 * 360) or []}
    for name in ("busy", "idle", "unmonitored"):
        colour = charts.PALETTE[name]
        assert f"fill='{colour}'" in page, name
        assert _rgb(colour) in colours, f"{name} {colour} is not in the PNG"


# --- Slack ---------------------------------------------------------------------------------------------------------


def _validate(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        assert message["text"] and len(message["blocks"]) <= 50
        for raw in message["blocks"]:
            block = Block.parse(raw)
            assert block is not None, raw
            block.validate_json()  # raises SlackObjectFormationError on anything Slack would refuse
            assert block.to_dict() == raw


def test_the_report_digest_is_short_valid_block_kit_with_a_link_that_states_its_expiry() -> None:
    report = report_over(sample_ledger(), policy=parse_policy({"budgets": {"teams": {"vision": 100}}}))
    report.report_url = "https://bucket.s3.amazonaws.com/reports/daily/2023-07-10/report.html?X-Amz-Signature=abc"
    report.report_url_expires = dt.datetime(2023, 7, 12, 7, tzinfo=dt.UTC)
    messages = slack_messages(report)
    _validate(messages)
    assert len(messages) == 1 and len(messages[0]["blocks"]) <= 8
    text = json.dumps(messages)
    assert "What to do today" in text and "sg-0123456789abcdef0" in text
    assert "<https://bucket.s3.amazonaws.com/reports/daily/2023-07-10/report.html?X-Amz-Signature=abc|" in text
    assert "The link expires 12 Jul 2023 07:00 UTC" in text
    assert "budget vision: $57.08 of $100.00 (57%), forecast $176.95 by month end" in text
    assert "=" not in re.sub(r"<https?://[^>]+>", "", text).replace('"type": ', "")  # no key=value dumps


def test_a_huge_fleet_digest_is_still_one_valid_message() -> None:
    report = report_over(big_fleet(1000))
    messages = slack_messages(report)
    _validate(messages)
    assert len(messages) == 1
    assert "more open finding" in json.dumps(messages) and "more team" in json.dumps(messages)


# --- finding notifications -----------------------------------------------------------------------------------------


def test_finding_messages_speak_in_sentences_and_say_how_to_snooze() -> None:
    from governor.domain.decision import Finding
    from governor.notifier.domain import MergedFinding
    from governor.notifier.render import action_sentence
    from governor.notifier.render import slack_messages as finding_messages

    warn = {
        "type": "warn",
        "enforced": False,
        "owner": "ana",
        "due": "2026-11-20T09:00:00+00:00",
        "planned": "stop",
        "snooze_tag": "team:keep",
        "exempt_tag": "team:exempt",
    }
    sentence = action_sentence(warn) or ""
    assert sentence.startswith("ana: it would be stopped at 2026-11-20 09:00 UTC if idle enforcement were on")
    assert "tag it team:keep=<ISO 8601 time> (snooze until then) or team:exempt=true (exempt)" in sentence
    assert action_sentence({**warn, "enforced": True}) == (
        "ana: it will be stopped at 2026-11-20 09:00 UTC unless it is used. To keep it, tag it "
        "team:keep=<ISO 8601 time> (snooze until then) or team:exempt=true (exempt)."
    )
    assert action_sentence({"type": "stop", "enforced": False}) == "Would stop the instance (report-only: not done)"
    assert action_sentence({"type": "stop", "enforced": True}) == "Stopped the instance"
    revoke = {"type": "revoke_ingress", "enforced": True, "protocol": "tcp", "ports": "22", "source": "0.0.0.0/0"}
    assert action_sentence({**revoke, "group_id": "sg-1"}) == "Revoked the ingress rule tcp 22 from 0.0.0.0/0 on sg-1"
    for quiet in ("notify", "record", "tag", "untag"):
        assert action_sentence({"type": quiet, "enforced": False}) is None
    finding = Finding(
        policy="idle",
        rule="idle.acted",
        severity="warning",
        resource="i-0a11",
        title="Idle GPU instance i-0a11 (g5.12xlarge) would be stopped (report-only: not done)",
        actions=[
            {"type": "stop", "enforced": False},
            {"type": "tag", "enforced": False, "tags": {"governor:idle-action": "stop@2026-11-20T09:00:00+00:00"}},
            {"type": "notify", "enforced": False},
        ],
    )
    messages = finding_messages([MergedFinding(finding)])
    _validate(messages)
    text = json.dumps(messages)
    assert "Would stop the instance (report-only: not done)" in text
    assert "tags=" not in text and "{'" not in text and "`notify`" not in text
    assert " stopped (report-only)" not in text


def test_a_team_view_is_that_teams_share_of_the_fleet_report() -> None:
    from governor.report.build import team_view

    items = [
        _session("i-7", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=None),
        _session("i-8", "g5.xlarge", 1, 1.006, "nlp", "bo", start=at(0), end=None),
        _idle(
            "i-7",
            at(10),
            "acted",
            1.0,
            idle_since=at(8),
            actions=[{"type": "stop", "enforced": False}, {"type": "tag", "enforced": False}],
        ),
    ]
    fleet = report_over(items)
    vision, nlp = team_view(fleet, "vision"), team_view(fleet, "nlp")
    assert vision.cost.cost_total_usd + nlp.cost.cost_total_usd == pytest.approx(fleet.cost.cost_total_usd)
    assert vision.cost.would_reclaim_gpu_hours == fleet.cost.would_reclaim_gpu_hours == pytest.approx(56.0)
    assert nlp.cost.would_reclaim_gpu_hours == 0 and nlp.cost.would_save_usd == 0
    assert [r["team"] for r in vision.cost.by_team.rows] == ["vision"] and not vision.security
    assert all(f.team == "vision" for f in vision.findings)
    assert "for team vision" in json.dumps(slack_messages(vision))
