"""The grants of the functions that talk to people: reading exactly the secrets their registry entries name (Slack
webhooks, the Slack app's signing secret and bot token) and sending email only as the configured sender.

Shared by every construct whose function delivers messages or answers Slack (the notifier, the report, the Slack
endpoint) and by the keys enforcer, which denies itself all of them.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from constructs import Construct

from governor.adapters import ses
from governor.adapters.slack_app import SlackSecrets
from governor.policy import Policy
from infra.constructs.function import GovernorFunction


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
    function.add_statement(SlackSecrets.IAM_ACTIONS, secret_arns(function, names))


def grant_delivery(function: GovernorFunction, policy: Policy) -> None:
    """Read only the named webhook secrets (any version suffix) and send email only as the configured sender."""
    stack = Stack.of(function)
    grant_secret_reads(function, policy.notifications.slack_secret_names())
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
