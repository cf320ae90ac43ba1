"""The notifier function on in-memory fakes: report-only, delivery, merging across invocations, failures."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from governor.adapters.ses import Attachment
from governor.domain.messages import Email, Message
from governor.notifier.handler import DeliveryFailed, UndeliverableError, handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.events import finding
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)


@dataclass
class FakeOutbox:
    slack: list[tuple[str, list[Message]]] = field(default_factory=list)
    emails: list[tuple[list[str], Email]] = field(default_factory=list)
    fail_slack: Exception | None = None
    fail_email: Exception | None = None

    def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None:
        if self.fail_slack:
            raise self.fail_slack
        self.slack.append((secret_name, list(messages)))

    def send_email(self, recipients: Sequence[str], email: Email, attachments: Sequence[Attachment] = ()) -> None:
        if self.fail_email:
            raise self.fail_email
        self.emails.append((list(recipients), email))


def runtime(**notifications: Any) -> Runtime:
    policy = parse_policy({"notifications": {"enforce": True, "immediate": "actionable", **notifications}})
    return Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())


def event(event_id: str = "e-1", **detail: Any) -> dict[str, Any]:
    body = {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": "sg-0123",
        "title": "Security group sg-0123 opened port 22 to the world",
        "owner": "ana@example.com",
        "team": "vision",
        "at": NOW.isoformat(),
        **detail,
    }
    return finding(body, event_id=event_id, time=NOW.isoformat())


def test_report_only_renders_and_records_but_sends_nothing() -> None:
    rt = runtime(enforce=False)
    outbox = FakeOutbox()
    result = handle(event(), rt, outbox, NOW)
    assert result["status"] == "report-only"
    assert outbox.slack == [] and outbox.emails == []
    decision = rt.ledger.decisions[-1][1]  # type: ignore[attr-defined]
    assert decision.policy == "notifications" and decision.actions[0].enforced is False


def test_enforced_finding_goes_to_slack_and_email_and_to_the_owner_separately() -> None:
    rt = runtime(
        email_sender="governor@example.com",
        email_recipients=["platform@example.com"],
        owner_email_domains=["example.com"],
    )
    outbox = FakeOutbox()
    assert handle(event(), rt, outbox, NOW)["status"] == "sent"
    assert outbox.slack[0][0] == "governor/slack-webhook"
    assert "sg-0123" in str(outbox.slack[0][1])
    assert sorted(recipients for recipients, _ in outbox.emails) == [["ana@example.com"], ["platform@example.com"]]
    assert all("port 22" in email.subject for _, email in outbox.emails)


def test_repeats_within_the_window_are_merged_across_invocations() -> None:
    rt = runtime(merge_window_minutes=30)
    outbox = FakeOutbox()
    assert handle(event("e-1"), rt, outbox, NOW)["status"] == "sent"
    assert handle(event("e-2"), rt, outbox, NOW + dt.timedelta(minutes=10))["status"] == "merged"
    assert handle(event("e-3"), rt, outbox, NOW + dt.timedelta(minutes=20))["status"] == "merged"
    assert len(outbox.slack) == 1
    assert handle(event("e-4"), rt, outbox, NOW + dt.timedelta(minutes=31))["status"] == "sent"
    assert "2 more findings about this resource and rule" in str(outbox.slack[-1][1])


def test_below_min_severity_is_recorded_not_sent() -> None:
    rt = runtime(min_severity="critical")
    outbox = FakeOutbox()
    result = handle(event(severity="warning"), rt, outbox, NOW)
    assert result["status"] == "not-sent" and outbox.slack == []
    assert rt.ledger.decisions[-1][1].verdict == "ignored"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("immediate", "policy", "severity", "posted"),
    [
        ("actionable", "network", "critical", True),
        ("actionable", "network", "warning", False),  # in the team's daily digest instead
        ("actionable", "keys", "warning", False),
        ("actionable", "idle", "warning", True),  # the stop is due at the end of the warning period
        ("actionable", "spot", "warning", True),
        ("critical", "idle", "warning", False),
        ("critical", "spot", "critical", True),
        ("all", "keys", "warning", True),
    ],
)
def test_only_criticals_and_time_bound_findings_are_posted_at_once(
    immediate: str, policy: str, severity: str, posted: bool
) -> None:
    rt = runtime(immediate=immediate)
    outbox = FakeOutbox()
    result = handle(event(policy=policy, rule=f"{policy}.x", severity=severity), rt, outbox, NOW)
    assert (result["status"] == "sent") is posted and (len(outbox.slack) == 1) is posted
    if not posted:
        decision = rt.ledger.decisions[-1][1]  # type: ignore[attr-defined]
        assert result["status"] == "digest" and decision.rule == "notifications.digest"
        assert f"notifications.immediate: {immediate}" in decision.reasons[0]


def test_missing_secret_parks_the_finding_in_the_dlq_with_a_clear_reason_and_does_not_crash() -> None:
    rt = runtime()
    outbox = FakeOutbox(fail_slack=UndeliverableError("Slack webhook secret 'governor/slack-webhook' not found"))
    result = handle(event(), rt, outbox, NOW)
    assert result["status"] == "undeliverable"
    ((parked, reason),) = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert parked["id"] == "e-1" and "not found" in reason


def test_failed_delivery_raises_for_a_retry_and_the_retry_skips_channels_already_delivered() -> None:
    rt = runtime(email_sender="governor@example.com", email_recipients=["platform@example.com"])
    outbox = FakeOutbox(fail_slack=RuntimeError("Slack webhook: not delivered after 4 attempts (HTTP 503)"))
    with pytest.raises(DeliveryFailed, match="HTTP 503"):
        handle(event(), rt, outbox, NOW)
    assert len(outbox.emails) == 1
    outbox.fail_slack = None
    assert handle(event(), rt, outbox, NOW)["status"] == "sent"
    assert len(outbox.emails) == 1 and len(outbox.slack) == 1


def test_anything_but_a_governor_finding_is_rejected_to_the_dlq() -> None:
    rt = runtime()
    bad = event()
    bad["source"] = "aws.ec2"
    result = handle(bad, rt, FakeOutbox(), NOW)
    assert result["status"] == "rejected"
    malformed = event()
    del malformed["detail"]["severity"]
    assert handle(malformed, rt, FakeOutbox(), NOW)["status"] == "rejected"
    assert len(rt.dead_letters.messages) == 2  # type: ignore[attr-defined]


def _slack_answering(code: int, body: bytes) -> FakeOutbox:
    """An outbox whose Slack goes through the real webhook client, answered by ``code`` and ``body``."""
    import urllib.error
    from email.message import Message as Headers

    from governor.adapters.slack import SlackWebhook

    answers: list[int] = []

    def opener(request: Any, timeout: float) -> Any:
        answers.append(code)
        raise urllib.error.HTTPError(request.full_url, code, "refused", Headers(), io.BytesIO(body))

    class Outbox(FakeOutbox):
        def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None:
            SlackWebhook(
                "https://hooks.slack.com/services/T000/B000/XXXX", opener=opener, sleep=lambda _: None
            ).post_all(messages)

    outbox = Outbox()
    outbox.answers = answers  # type: ignore[attr-defined]
    return outbox


@pytest.mark.parametrize(
    ("code", "body"), [(403, b"invalid_token"), (404, b"channel_not_found"), (410, b"channel_is_archived")]
)
def test_a_slack_answer_no_retry_can_change_parks_the_finding_at_once(code: int, body: bytes) -> None:
    rt = runtime()
    outbox = _slack_answering(code, body)
    result = handle(event(), rt, outbox, NOW)  # no exception: Lambda does not retry the event three times
    assert result["status"] == "undeliverable"
    assert outbox.answers == [code]  # type: ignore[attr-defined]  # asked once, not four times
    ((parked, reason),) = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert parked["id"] == "e-1" and body.decode() in reason and "hooks.slack.com" not in reason


def test_a_slack_outage_is_still_retried_not_parked() -> None:
    rt = runtime()
    outbox = _slack_answering(503, b"")
    with pytest.raises(DeliveryFailed, match="HTTP 503"):
        handle(event(), rt, outbox, NOW)
    assert len(outbox.answers) == 4 and rt.dead_letters.messages == []  # type: ignore[attr-defined]


def test_an_email_ses_refuses_is_parked_at_once() -> None:
    from botocore.exceptions import ClientError

    rt = runtime(email_sender="governor@example.com", email_recipients=["platform@example.com"])
    refused = ClientError(
        {"Error": {"Code": "MessageRejected", "Message": "Email address is not verified."}}, "SendEmail"
    )
    result = handle(event(), rt, FakeOutbox(fail_email=refused), NOW)
    assert result["status"] == "partly-undeliverable"
    ((_, reason),) = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert "MessageRejected" in reason


def test_a_finding_published_again_by_an_outbox_reaches_each_channel_once() -> None:
    rt = runtime(merge_window_minutes=30)
    outbox = FakeOutbox()
    assert handle(event("e-1", id="finding-1"), rt, outbox, NOW)["status"] == "sent"
    # The same finding (same id) on a new EventBridge event: the producer's PutEvents answer was lost and resent.
    handle(event("e-2", id="finding-1"), rt, outbox, NOW + dt.timedelta(minutes=31))
    assert len(outbox.slack) == 1
    assert handle(event("e-3", id="finding-2"), rt, outbox, NOW + dt.timedelta(minutes=62))["status"] == "sent"
    assert len(outbox.slack) == 2
