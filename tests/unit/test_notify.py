"""Routing, merging and Slack / email rendering of findings: what owners and leads actually receive."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from governor.core_policy import NotificationsPolicy, TeamRoute
from governor.domain.decision import Finding
from governor.domain.messages import MAX_BLOCKS, MAX_SECTION_CHARS, split_text
from governor.notifier.domain import (
    MergedFinding,
    merge,
    merge_batch,
    plan_deliveries,
    route,
)
from governor.notifier.render import email_for, slack_messages
from governor_cli.main import main
from governor_cli.testing import events

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)


def finding(resource: str = "i-0abc", severity: str = "warning", rule: str = "idle.warned", **extra: object) -> Finding:
    return Finding.model_validate(
        {
            "policy": rule.split(".")[0],
            "rule": rule,
            "severity": severity,
            "resource": resource,
            "title": f"Idle GPU instance {resource} will be stopped",
            "detail": "idle by every signal for 120 min",
            "owner": "ana",
            "team": "vision",
            "at": NOW,
            "actions": [{"type": "stop", "enforced": False}],
            **extra,
        }
    )


def _sections(messages: list[dict]) -> list[str]:
    return [b["text"]["text"] for m in messages for b in m["blocks"] if b["type"] == "section"]


def test_below_min_severity_goes_nowhere_and_says_why() -> None:
    where = route(finding(severity="info"), NotificationsPolicy(min_severity="warning", immediate="actionable"))
    assert where.empty
    assert "below notifications.min_severity warning" in where.reason


def test_team_route_replaces_the_default_channel_and_the_owner_gets_a_message_of_their_own() -> None:
    policy = NotificationsPolicy(
        immediate="actionable",
        email_sender="governor@example.com",
        email_recipients=["platform@example.com"],
        teams={"vision": TeamRoute(slack_secret_name="governor/slack-vision", email=["vision@example.com"])},
        owner_email_domains=["example.com"],
    )
    ours = route(finding(owner="ana@example.com"), policy)
    assert ours.slack_secrets == ("governor/slack-vision",)
    assert ours.emails == ("vision@example.com",) and ours.owner_email == "ana@example.com"
    other = route(finding(team="speech", owner="bob"), policy)
    assert other.slack_secrets == ("governor/slack-webhook",)
    assert other.emails == ("platform@example.com",)


def test_no_email_without_a_sender() -> None:
    policy = NotificationsPolicy(email_recipients=["platform@example.com"], immediate="actionable")
    assert route(finding(), policy).emails == ()


def test_same_resource_and_rule_merge_within_the_window_then_the_next_message_says_how_many() -> None:
    first = merge(finding(), None, 60, NOW)
    assert first.send and first.item.merged == 0
    state = first.state
    for minutes in (10, 20, 30):
        step = merge(finding(), state, 60, NOW + dt.timedelta(minutes=minutes))
        assert not step.send
        state = step.state
    assert state["merged"] == 3
    later = merge(finding(), state, 60, NOW + dt.timedelta(minutes=61))
    assert later.send and later.item.merged == 3 and later.item.since == NOW
    assert later.state["merged"] == 0
    blocks = json.dumps(slack_messages([later.item]))
    assert "3 more findings about this resource and rule since 2026-11-20 09:00 UTC" in blocks


def test_escalation_breaks_through_the_window_and_zero_window_never_merges() -> None:
    first = merge(finding(severity="warning"), None, 60, NOW)
    escalated = merge(finding(severity="critical"), first.state, 60, NOW + dt.timedelta(minutes=5))
    assert escalated.send
    again = merge(finding(), None, 0, NOW)
    assert merge(finding(), again.state, 0, NOW).send


def test_findings_delivered_together_merge_and_the_most_severe_leads() -> None:
    items = merge_batch([finding(), finding(severity="critical"), finding(resource="i-0def")])
    assert len(items) == 2
    lead = next(i for i in items if i.finding.resource == "i-0abc")
    assert lead.finding.severity == "critical" and lead.merged == 1


def test_many_findings_split_over_messages_within_slack_limits() -> None:
    items = [MergedFinding(finding(resource=f"i-{n:08x}")) for n in range(120)]
    messages = slack_messages(items)
    assert len(messages) > 1
    for number, message in enumerate(messages, start=1):
        assert len(message["blocks"]) <= MAX_BLOCKS
        assert message["blocks"][0]["type"] == "header"
        assert f"(part {number}/{len(messages)})" in message["blocks"][0]["text"]["text"]
        assert message["text"]
        for block in message["blocks"]:
            if block["type"] == "section":
                assert len(block["text"]["text"]) <= MAX_SECTION_CHARS
    text = json.dumps(messages)
    assert all(f"i-{n:08x}" in text for n in range(120))


def test_a_long_detail_is_split_into_sections_without_losing_text() -> None:
    detail = "\n".join(f"rule {n}: 0.0.0.0/0 on port {n}" for n in range(600)) + "\n" + "x" * 7000
    messages = slack_messages([MergedFinding(finding(detail=detail))])
    sections = _sections(messages)
    assert all(len(s) <= MAX_SECTION_CHARS for s in sections)
    joined = "".join(sections)
    assert "rule 599: 0.0.0.0/0 on port 599" in joined and joined.count("x") >= 7000


def test_split_text_respects_the_limit_and_keeps_order() -> None:
    chunks = split_text("a" * 10 + "\n" + "b" * 25 + "\n" + "c", limit=12)
    assert all(len(c) <= 12 for c in chunks)
    assert "".join(chunks).replace("\n", "") == "a" * 10 + "b" * 25 + "c"


def test_user_text_cannot_inject_slack_links_or_mentions() -> None:
    text = json.dumps(slack_messages([MergedFinding(finding(detail="<!channel> see <http://evil|here> & more"))]))
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text and "&amp; more" in text


def test_report_only_actions_are_labelled_so_owners_know_nothing_was_done() -> None:
    text = json.dumps(slack_messages([MergedFinding(finding())]))
    assert "Would stop the instance (report-only: not done)" in text and "`stop`" not in text


def test_email_has_html_and_a_plain_text_alternative_with_the_same_facts() -> None:
    email = email_for([MergedFinding(finding(detail="opened <22> to the world"))])
    assert email.subject.startswith("GPU Fleet Governor: Idle GPU instance i-0abc")
    for fact in ("i-0abc", "ana", "vision", "Would stop the instance (report-only: not done)"):
        assert fact in email.text and fact in email.html
    assert "idle.warned" not in email.text + email.html  # rule ids stay in the ledger
    assert "&lt;22&gt;" in email.html and "<22>" in email.text


def test_deliveries_are_grouped_per_destination() -> None:
    policy = NotificationsPolicy(
        immediate="actionable",
        email_sender="governor@example.com",
        email_recipients=["platform@example.com"],
        teams={"speech": TeamRoute(slack_secret_name="governor/slack-speech")},
    )
    items = [
        MergedFinding(finding(resource=f"i-{n}", team=team)) for n, team in enumerate(["vision", "speech", "vision"])
    ]
    deliveries = {d.key: len(d.items) for d in plan_deliveries(items, policy)}
    assert deliveries == {
        "slack:governor/slack-webhook": 2,
        "slack:governor/slack-speech": 1,
        "email:platform@example.com": 3,
    }


def test_explain_shows_where_a_finding_would_go(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "governor.yaml"
    policy.write_text(
        "notifications:\n  immediate: actionable\n  teams:\n    vision: {slack_secret_name: governor/slack-vision}\n"
    )
    event = tmp_path / "finding.json"
    event.write_text(
        json.dumps(events.finding(finding().model_dump(mode="json"), event_id="f-1", time=NOW.isoformat()))
    )
    assert main(["explain", str(event), "--policy", str(policy), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (decision,) = [d for d in result["decisions"] if d["policy"] == "notifications"]
    assert decision["verdict"] == "act"
    assert decision["actions"] == [
        {"type": "notify", "enforced": True, "channel": "slack", "target": ["governor/slack-vision"]}
    ]  # delivery is on by default (issue 32): the policy above does not switch it off
    assert "merge state not read" in decision["assumptions"][0]
