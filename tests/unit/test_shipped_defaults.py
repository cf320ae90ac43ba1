"""The shipped governor.yaml: a fresh deploy speaks on day one, and nothing destructive is switched on (issue 32).

After the documented deploy with the webhook secret in place, the first sweep's report-only findings reach Slack and
the daily report (the digest) is sent, without anyone editing governor.yaml. Every enforcer that changes resources
stays report-only, and the Slack buttons stay off until the app's Request URL is set (docs/slack.md)."""

from __future__ import annotations

from governor.policy import load_policy
from governor.registry import REGISTRY
from tests.conftest import ROOT

SHIPPED = load_policy(ROOT / "governor.yaml")
#: Sections whose enforcement changes resources (stop, terminate, revoke, rotate, tag, deactivate): those of the
#: capabilities returning an action that calls AWS itself (one with IAM actions of its own), from the registry.
DESTRUCTIVE = tuple(c.section for c in REGISTRY.values() if any(action.IAM for action in c.actions))


def test_findings_and_reports_are_delivered_by_default() -> None:
    assert SHIPPED.notifications.enforce is True and SHIPPED.reports.enforce is True
    assert SHIPPED.notifications.slack_secret_name == "governor/slack-webhook"
    assert SHIPPED.notifications.min_severity == "info"
    assert REGISTRY["notifier"].mode(SHIPPED).startswith("DELIVERS")


def test_nothing_destructive_is_enforced_by_default() -> None:
    for section in DESTRUCTIVE:
        assert getattr(SHIPPED, section).enforce is False, section
    assert SHIPPED.keys.enforce_kms in (None, False) and SHIPPED.keys.enforce_access_keys in (None, False)
    assert SHIPPED.interactions.buttons is False
