"""Issue 37 item 3: every message about an instance names its owner and pings them when their Slack identity is known
(``interactions.slack_users``); an untagged instance's warning names the creator lifecycle recorded (the person the
report attributes it to), not "Owner unknown"."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from moto import mock_aws

from governor.domain.fleet import LAUNCH_KIND, Instance
from governor.idle.tell import owner
from governor.notifier.domain import MergedFinding
from governor.notifier.render import slack_messages, slack_people
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_notify import finding

WARN = {
    "type": "warn",
    "enforced": False,
    "owner": "bo@example.com",
    "due": "2026-11-20T10:00:00+00:00",
    "planned": "stop",
}


def test_a_known_owner_is_mentioned_in_the_owner_line_and_the_warning() -> None:
    people = slack_people({"U0BOBOBO": "Bo@Example.com"})
    item = MergedFinding(finding(owner="bo@example.com", actions=[WARN]))
    text = json.dumps(slack_messages([item], people))
    assert "*Owner* <@U0BOBOBO> (bo)" in text  # the one name (issue 48)
    assert "<@U0BOBOBO>: it would be stopped at 2026-11-20 10:00 UTC" in text


def test_an_unknown_owner_is_said_to_be_unknown_and_nobody_else_is_pinged() -> None:
    people = slack_people({"U0BOBOBO": "bo@example.com"})
    text = json.dumps(slack_messages([MergedFinding(finding(owner="unknown", team="unknown"))], people))
    assert "unknown (no owner tag or recorded creator)" in text and "<@" not in text
    text = json.dumps(slack_messages([MergedFinding(finding(owner="ana@example.com"))], people))
    assert "<@" not in text  # an owner with no Slack identity is named, not pinged


def test_an_untagged_instance_is_owned_by_the_creator_lifecycle_recorded() -> None:
    ledger = MemoryLedger()
    runtime = Runtime(parse_policy({}), ledger, MemorySink(), MemoryDeadLetters(), "us-east-1")
    untagged = Instance("i-0dara", "g5.xlarge", "running", dt.datetime(2026, 11, 20, tzinfo=dt.UTC), {"team": "nlp"})
    assert owner(untagged, runtime).owner == "unknown"
    ledger.put_item(LAUNCH_KIND, "i-0dara", {"instance_id": "i-0dara", "creator": "dara"})
    who = owner(untagged, runtime)
    assert (who.owner, who.team, who.source) == ("dara", "nlp", "creator")
    tagged = Instance("i-0bo", "g5.xlarge", "running", untagged.launch_time, {"owner": "bo", "team": "nlp"})
    ledger.put_item(LAUNCH_KIND, "i-0bo", {"instance_id": "i-0bo", "creator": "dara"})
    assert owner(tagged, runtime).owner == "bo"  # the owner tag wins over the launch record


class _FakeSlack:
    """Slack's Web API as slack_sdk's WebClient sees it: users.lookupByEmail answers for one member only."""

    calls: list[str] = []

    def __init__(self, token: str = "", **_: object) -> None:
        assert token == "xoxb-test"

    def users_lookupByEmail(self, email: str) -> dict[str, object]:
        from slack_sdk.errors import SlackApiError

        _FakeSlack.calls.append(email)
        if email == "bo@corp.example":
            return {"ok": True, "user": {"id": "U0BOLOOK", "deleted": False}}
        raise SlackApiError("users_not_found", {"ok": False, "error": "users_not_found"})


def test_an_owner_missing_from_slack_users_is_looked_up_by_email_once_and_only_in_allowed_domains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """users.lookupByEmail (scope users:read.email) with the bot token, cached per container; an address outside
    notifications.owner_email_domains (a tag anyone can set) is never looked up."""
    import slack_sdk

    from governor.notifier import handler

    monkeypatch.setattr(slack_sdk, "WebClient", _FakeSlack)
    _FakeSlack.calls = []
    handler._looked_up.cache_clear()
    policy = parse_policy(
        {
            "notifications": {"owner_email_domains": ["corp.example"]},
            "interactions": {"bot_token_secret_name": "governor/slack-bot", "slack_users": {"U0ANAANA": "a@x.example"}},
        }
    )
    with mock_aws():
        boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="governor/slack-bot", SecretString='{"token": "xoxb-test"}'
        )
        runtime = Runtime(policy, MemoryLedger(), MemorySink(), MemoryDeadLetters(), region="us-east-1")
        bo = finding(owner="bo@corp.example", actions=[{**WARN, "owner": "bo@corp.example"}])
        people = handler.people_for(bo, runtime)
        assert people["bo@corp.example"] == "U0BOLOOK"
        assert handler.people_for(bo, runtime)["bo@corp.example"] == "U0BOLOOK"
        assert _FakeSlack.calls == ["bo@corp.example"]  # cached: asked once
        text = json.dumps(slack_messages([MergedFinding(bo)], people))
        assert "*Owner* <@U0BOLOOK> (bo)" in text
        assert "bo@corp.example" not in handler.people_for(finding(owner="bo@elsewhere.example"), runtime)
        assert "ghost@corp.example" not in handler.people_for(finding(owner="ghost@corp.example"), runtime)
        assert _FakeSlack.calls == ["bo@corp.example", "ghost@corp.example"]  # never the other domain
    handler._looked_up.cache_clear()


def test_emails_name_the_owner_and_the_owners_own_email_is_addressed_to_them() -> None:
    """Issue 37: the email path names the owner as Slack mentions them, and the copy sent to the owner (only at an
    address in notifications.owner_email_domains) says it is theirs."""
    from governor.notifier.handler import handle
    from governor_cli.testing.events import finding as finding_event
    from tests.unit.test_notify_handler import FakeOutbox

    now = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
    policy = parse_policy(
        {
            "notifications": {
                "enforce": True,
                "email_sender": "governor@corp.example",
                "email_recipients": ["platform@corp.example"],
                "owner_email_domains": ["corp.example"],
            }
        }
    )
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    body = {
        "policy": "idle",
        "rule": "idle.warned",
        "severity": "warning",
        "resource": "i-0abc",
        "title": "Idle GPU instance i-0abc will be stopped",
        "owner": "ana@corp.example",
        "team": "vision",
        "at": now.isoformat(),
        # the warn action recorded no owner (an older sweep): the email still says whose it is
        "actions": [{"type": "warn", "enforced": True, "planned": "stop", "due": now.isoformat()}],
    }
    outbox = FakeOutbox()
    assert handle(finding_event(body, event_id="e-1", time=now.isoformat()), rt, outbox, now)["status"] == "sent"
    emails = {tuple(to): email for to, email in outbox.emails}
    team, own = emails[("platform@corp.example",)], emails[("ana@corp.example",)]
    assert "Owner: ana\n" in team.text and "ana: it will be stopped" in team.text  # the one name (issue 48)
    assert "(yours)" not in team.subject and "To ana@corp.example" not in team.text
    assert own.subject.endswith("(yours)") and "To ana@corp.example: you are the owner" in own.text
    assert "To ana@corp.example: you are the owner" in own.html

    # an owner outside the allowed domains is named, never emailed; an unknown one is said to be unknown
    outbox = FakeOutbox()
    stranger = {**body, "owner": "mallory@elsewhere.example", "resource": "i-0def"}
    handle(finding_event(stranger, event_id="e-2", time=now.isoformat()), rt, outbox, now)
    assert [to for to, _ in outbox.emails] == [["platform@corp.example"]]
    assert "Owner: mallory\n" in outbox.emails[0][1].text
    outbox = FakeOutbox()
    nobody = {**body, "owner": None, "resource": "i-0fed"}
    handle(finding_event(nobody, event_id="e-3", time=now.isoformat()), rt, outbox, now)
    assert "Owner: unknown (no owner tag or recorded creator)" in outbox.emails[0][1].text


def test_an_owner_known_by_role_arn_is_one_name_and_pinged_in_every_message() -> None:
    """Issue 48 item 5: an instance was "unknown" in the findings, "dara" in the offenders' table and a role ARN in
    Slack with no mention. The owner a finding carries (a role session ARN, as the creator tag records it) is the one
    name the report gives (``identity.normalise_owner``), mentioned when the people name them by address."""
    from governor.notifier.render import email_for

    arn = "arn:aws:sts::123456789012:assumed-role/ml-engineer/dara"
    people = slack_people({"U0DARA00": "dara@demo.example"})
    item = MergedFinding(finding(owner=arn, actions=[{**WARN, "owner": arn}]))
    text = json.dumps(slack_messages([item], people))
    assert "*Owner* <@U0DARA00> (dara)" in text and "arn:aws" not in text
    assert "<@U0DARA00>: it would be stopped" in text
    email = email_for([item])
    assert "Owner: dara\n" in email.text and "dara: it would be stopped" in email.text and "arn:aws" not in email.text
