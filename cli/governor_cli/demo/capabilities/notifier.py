"""The notifier's scenarios: findings from the governor bus to Slack and email, each delivered exactly once; in the
demo, what it held for the channel's digest and how many digests it posted."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from governor_cli.demo.hooks import provided
from governor_cli.testing.scenarios import EMAIL_SENDER, SLACK_WEBHOOK_SECRET, Case

if TYPE_CHECKING:
    from governor.policy import Policy
    from governor_cli.demo.run import DemoResult
    from governor_cli.testing.scenarios import Scenarios

# Every finding goes out at once to one Slack channel and one mailbox; reports are sent; buttons act.
SOAK: dict[str, Any] = {
    "enforce": True,
    "slack_secret_name": SLACK_WEBHOOK_SECRET,
    "email_sender": EMAIL_SENDER,
    "email_recipients": ["platform@example.com"],
    "immediate": "all",
}


def notifier_security_finding(scenarios: Scenarios, index: int) -> Case:
    """A critical security finding about its own resource: one Slack message and one email, each exactly once."""
    finding = provided("critical_finding")()
    return Case(f"finding to deliver #{index}", "notifier", scenarios.finding_event(finding), finding.resource)


def notifier_idle_warning(scenarios: Scenarios, index: int) -> Case:
    """An idle warning: delivered with its buttons (the token's record goes to the ledger first)."""
    resource = f"i-{uuid.uuid4().hex[:17]}"
    finding = provided("warning_finding")(resource).model_copy(update={"id": uuid.uuid4().hex})
    return Case(f"idle warning to deliver #{index}", "notifier", scenarios.finding_event(finding), resource)


CASES = ((3, notifier_security_finding), (1, notifier_idle_warning))


# --- the demo ---------------------------------------------------------------------------------------------------

DEMO_SENDER = "gpu-governor@demo.example"  # verified in the emulated SES when the policy names no sender
DEMO_RECIPIENTS = ("platform-team@demo.example",)


def policy_sections(policy: Policy) -> dict[str, Any]:
    """Its section of the policy the demo runs: always delivering, whatever ``--enforce`` says.

    Delivering is safe here (the webhook is the demo's loopback capture endpoint and SES is emulated) and it is the
    point of the demo: every message the run would send is sent and saved. With no email configured, the demo's own
    sender and recipient are used so the email path runs too.
    """
    from governor_cli.demo.run import DEMO_DOMAIN

    chosen = policy.notifications
    return {
        "notifications": chosen.model_copy(
            update={
                "enforce": True,
                "email_sender": chosen.email_sender or DEMO_SENDER,
                "email_recipients": list(chosen.email_recipients) or list(DEMO_RECIPIENTS),
                # owners at the demo's addresses are looked up in Slack and emailed their own copy (docs/slack.md §2)
                "owner_email_domains": sorted({*chosen.owner_email_domains, DEMO_DOMAIN}),
            }
        )
    }


def digest_held(result: DemoResult) -> int:
    """Findings it held for the channel's digest (``notifications.immediate``: what is not due)."""
    return sum(1 for name, r in result.results if name == "notifier" and r.get("status") == "digest")


def digests_posted(result: DemoResult) -> int:
    """The channels' digests posted when the notifier's schedule ticked (``governor.notifier.flush``)."""
    return sum(len(r.get("digests") or []) for name, r in result.results if r.get("status") == "digest-posted")
