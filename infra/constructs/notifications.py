"""Notifications: the ``notifier`` function on the governor bus, plus the scheduled reports and the fleet dashboard.

The dashboard (``dashboard.py``) is built here; the reports (``reports.py``, their own registry entry) are built
inside this construct because the report links to the dashboard and shares the notifier's Slack and email grants.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import ArnFormat, Duration, Stack
from constructs import Construct

from governor.adapters import ses
from governor.notifier import slack
from governor.policy import Policy
from governor.registry import REGISTRY
from infra.constructs.dashboard import Dashboard, governor_metric
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, GovernorFunction, alert


def slack_secret_names(policy: Policy) -> list[str]:
    """Every Secrets Manager secret that may hold a webhook: the default channel and each team's."""
    names = {policy.notifications.slack_secret_name}
    names.update(team.slack_secret_name for team in policy.notifications.teams.values() if team.slack_secret_name)
    return sorted(names)


def secret_arns(scope: Construct, names: list[str]) -> list[str]:
    """These secrets' ARNs in this account and region (Secrets Manager appends a random six-character suffix)."""
    stack = Stack.of(scope)
    return [
        stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{name}-??????",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        for name in names
    ]


def grant_secret_reads(function: GovernorFunction, names: list[str]) -> None:
    """GetSecretValue on exactly these secrets."""
    function.add_statement(slack.IAM_ACTIONS, secret_arns(function, names))


def grant_delivery(function: GovernorFunction, policy: Policy) -> None:
    """Read only the named webhook secrets (any version suffix) and send email only as the configured sender."""
    stack = Stack.of(function)
    grant_secret_reads(function, slack_secret_names(policy))
    sender = policy.notifications.email_sender
    if sender:
        domain = sender.partition("@")[2]
        identities = [
            stack.format_arn(
                service="ses", resource="identity", resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
            )
            for name in (sender, domain)
        ]
        function.add_statement(ses.IAM_ACTIONS, identities)


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
        grant_delivery(self.function, policy)
