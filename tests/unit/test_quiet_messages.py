"""Quiet by design (issue 37, item 4): what is posted at once, and how a message reads.

A report-only "would be stopped now" and "reported, not reclaimed" wait for the daily digest (the owner was warned
once for the episode); a message says its title once, carries no rule or event id, and uses one time format.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from governor.core_policy import NotificationsPolicy
from governor.domain.decision import Finding
from governor.notifier.domain import MergedFinding, posts_now, route
from governor.notifier.render import email_for, slack_messages

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
EVENT = "6f1c2b9e-1d2a-4c3b-9e8f-0a1b2c3d4e5f"


def idle(
    rule: str, enforced: bool, title: str = "Idle GPU instance i-0abc (g5.xlarge) would be stopped now"
) -> Finding:
    action = {"type": "stop", "enforced": enforced} if rule == "idle.acted" else {"type": "notify", "enforced": True}
    return Finding(
        policy="idle",
        rule=rule,
        severity="warning",
        resource="i-0abc",
        title=title,
        detail="idle by every signal since 2026-11-20T07:00:00+00:00; warned at 2026-11-20T07:45:12.5+00:00",
        owner="ana",
        team="vision",
        account="123456789012",
        region="us-east-1",
        event_id=EVENT,
        enforced=enforced,
        actions=[action],
        at=NOW,
    )


def test_report_only_idle_outcomes_wait_for_the_digest_and_real_ones_post_now() -> None:
    policy = NotificationsPolicy(immediate="actionable")
    assert not posts_now(idle("idle.acted", enforced=False), policy)  # "would be stopped now (report-only)"
    assert not posts_now(idle("idle.reported", enforced=False), policy)
    assert not posts_now(idle("idle.reported", enforced=True), policy)  # reported, not reclaimed: nothing to do now
    assert posts_now(idle("idle.acted", enforced=True), policy)  # it was stopped: the owner hears now
    assert posts_now(idle("idle.warned", enforced=False), policy)  # the one warning of the episode, with its buttons
    where = route(idle("idle.acted", enforced=False), policy)
    assert where.digest and "report-only idle outcome" in where.reason
    assert posts_now(idle("idle.acted", enforced=False), NotificationsPolicy(immediate="all"))


def test_a_message_says_its_title_once_without_rule_or_event_ids_in_one_time_format() -> None:
    finding = idle("idle.warned", enforced=False, title="Idle GPU instance i-0abc (g5.xlarge) would be reported")
    message = slack_messages([MergedFinding(finding)])[0]
    text = json.dumps(message["blocks"])
    assert text.count("would be reported") == 1
    assert message["blocks"][0]["type"] == "header"
    assert "idle.warned" not in text and EVENT not in text
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text)
    assert "2026-11-20 07:00 UTC" in text and "2026-11-20 07:45 UTC" in text
    email = email_for([MergedFinding(finding)])
    assert EVENT not in email.text and "idle.warned" not in email.text
    assert "2026-11-20 07:45 UTC" in email.text and "T07:45" not in email.text


def test_several_findings_keep_each_title_under_a_summary_header() -> None:
    first = idle("idle.warned", enforced=False, title="Idle GPU instance i-0abc would be reported")
    second = first.model_copy(update={"resource": "i-0def", "title": "Idle GPU instance i-0def would be reported"})
    message = slack_messages([MergedFinding(first), MergedFinding(second)])[0]
    text = json.dumps(message["blocks"])
    assert message["blocks"][0]["text"]["text"] == "GPU Fleet Governor: 2 warning findings"
    assert text.count("i-0abc would be reported") == 1 and text.count("i-0def would be reported") == 1
