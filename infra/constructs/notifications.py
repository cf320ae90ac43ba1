"""Notifications: the ``notifier`` function on the governor bus, plus the scheduled reports and the fleet dashboard.

The dashboard (``dashboard.py``) is built here; the reports (``reports.py``, their own registry entry) are built
inside this construct because the report links to the dashboard and shares the notifier's Slack and email grants.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Duration
from constructs import Construct

from governor.registry import REGISTRY
from infra.constructs.dashboard import Dashboard, governor_metric
from infra.constructs.delivery import grant_delivery, grant_secret_reads
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, alert


class Notifications(CapabilityConstruct):
    """The notifier (governor bus → Slack / SES) and the fleet dashboard; the registry builds the reports inside it
    (``within``), where they link to the dashboard and keep their logical ids."""

    CAPABILITY = REGISTRY["notifier"]
    FUNCTION_ID = "Notifier"
    TIMEOUT = Duration.minutes(3)

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        policy = self.policy
        self.dashboard = Dashboard(self, "Dashboard", stack_name=self.settings.stack_name)
        alert(
            self,
            "FindingsUnsent",
            governor_metric("FindingsUnsent", Duration.minutes(15)),
            "governor: findings were refused by the governor bus and wait in the outbox (the next sweep or retry "
            "publishes them). Runbook: docs/reliability.md, 'Runbook' (FindingsUnsent)",
            self.shared,
        )
        self.on_findings("Findings", "Every governor finding to the notifier")
        # each channel's digest of what was held back (governor.notifier.flush), every notifications.digest_hours
        self.on_schedule("Digest", payload={"kind": "digest"})
        grant_delivery(self.function, policy)
        # owners' mentions by users.lookupByEmail (slack.md §2), posts to a channel: the Slack app's bot token
        if bot_token := REGISTRY.slack_app(policy).bot_token_names():
            grant_secret_reads(self.function, bot_token)
